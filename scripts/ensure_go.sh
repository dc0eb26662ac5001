#!/usr/bin/env bash
# The Go client's interop tests (tests/interop/go, rocketmq-client-go) build with the go command: where `go` is
# missing, Debian's golang-go (1.19; the programs need 1.19+) is installed with apt; `make dev` never calls this.
set -euo pipefail
source "$(dirname "$0")/apt_install.sh"
if command -v go >/dev/null 2>&1; then
    exit 0
fi
apt_install ensure_go golang-go || echo "ensure_go: install Go 1.19+ (the Go interop tests skip without it, or" \
    "fail where SLUICE_REQUIRE_GO is set)" >&2
