#!/usr/bin/env bash
# The controller tests run a real etcd (tests/etcd_server.py): where `etcd` is missing, Debian's etcd-server (3.4) is
# installed with apt (`apt-get update` first only if the install fails); `make dev` never calls this.
set -euo pipefail
if command -v etcd >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_etcd: etcd missing and apt-get is not available: install etcd 3.4+" \
         "(the etcd tests skip without it, or fail where SLUICE_REQUIRE_ETCD is set)" >&2
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
install() {
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends etcd-server
}
echo "ensure_etcd: etcd missing: installing etcd-server" >&2
if ! install; then
    $SUDO apt-get update -q
    install
fi
