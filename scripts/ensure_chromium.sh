#!/usr/bin/env bash
# The dashboard's browser tests (tests/browser) drive a headless Chromium through chromedriver (Selenium): where
# either is missing, Debian's chromium and chromium-driver are installed with apt; `make dev` never calls this.
set -euo pipefail
source "$(dirname "$0")/apt_install.sh"
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    exit 0
fi
apt_install ensure_chromium chromium chromium-driver || echo "ensure_chromium: install chromium and chromium-driver" \
    "(the browser tests skip without them, or fail where SLUICE_REQUIRE_BROWSER is set)" >&2
