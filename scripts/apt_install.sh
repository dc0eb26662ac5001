# Sourced by the ensure_*.sh scripts: `apt_install WHO PACKAGE...` installs Debian packages with apt-get (with sudo
# when not root; `apt-get update` first only if the install fails). Returns 1 without apt-get, having said so.
apt_install() {
    local who=$1
    shift
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "$who: apt-get is not available to install $*" >&2
        return 1
    fi
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        sudo="sudo"
    fi
    echo "$who: installing $*" >&2
    if ! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "$@"; then
        $sudo apt-get update -q
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "$@"
    fi
}
