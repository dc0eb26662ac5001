#!/usr/bin/env bash
# The slow- and failing-disk tests mount a FUSE file system of the project's (tests/fault/slowfs.c), built with gcc
# against libfuse3: where fusermount3, the libfuse3 headers or pkg-config are missing, Debian's fuse3, libfuse3-dev
# and pkg-config are installed with apt; the partition tests need iproute2's `ip` (network namespaces), installed
# with them where missing. `make dev` never calls this.
set -euo pipefail
source "$(dirname "$0")/apt_install.sh"
missing=()
command -v fusermount3 >/dev/null 2>&1 || missing+=(fuse3)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
{ command -v pkg-config >/dev/null 2>&1 && pkg-config --exists fuse3; } || missing+=(libfuse3-dev)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
apt_install ensure_fuse "${missing[@]}" || echo "ensure_fuse: the fault tests skip without ${missing[*]}, or fail" \
    "where SLUICE_REQUIRE_FAULT is set" >&2
