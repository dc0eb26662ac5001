#!/usr/bin/env bash
# The controller tests run a real etcd (tests/etcd_server.py): where `etcd` is missing, Debian's etcd-server (3.4) is
# installed with apt; `make dev` never calls this.
set -euo pipefail
source "$(dirname "$0")/apt_install.sh"
if command -v etcd >/dev/null 2>&1; then
    exit 0
fi
apt_install ensure_etcd etcd-server || echo "ensure_etcd: install etcd 3.4+ (the etcd tests skip without it, or" \
    "fail where SLUICE_REQUIRE_ETCD is set)" >&2
