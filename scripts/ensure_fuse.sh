#!/usr/bin/env bash
# The slow- and failing-disk tests mount a FUSE file system of the project's (tests/fault/slowfs.c), built with gcc
# against libfuse3: where fusermount3, the libfuse3 headers or pkg-config are missing, Debian's fuse3, libfuse3-dev
# and pkg-config are installed with apt (`apt-get update` first only if the install fails); `make dev` never calls
# this. The partition tests need only iproute2's `ip` (network namespaces), installed with it where missing.
set -euo pipefail
missing=()
command -v fusermount3 >/dev/null 2>&1 || missing+=(fuse3)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
{ command -v pkg-config >/dev/null 2>&1 && pkg-config --exists fuse3; } || missing+=(libfuse3-dev)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_fuse: missing ${missing[*]} and apt-get is not available" \
         "(the fault tests skip without them, or fail where SLUICE_REQUIRE_FAULT is set)" >&2
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
install() {
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
}
echo "ensure_fuse: installing ${missing[*]}" >&2
if ! install; then
    $SUDO apt-get update -q
    install
fi
