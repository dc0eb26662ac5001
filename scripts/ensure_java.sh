#!/usr/bin/env bash
# Spark (the sluice[spark] extra) needs Java 17+. Install a headless JRE with apt only when `java` is missing.
set -euo pipefail
if command -v java >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "java is missing and apt-get is not available: install a Java 17+ runtime for the Spark tests" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
echo "java is missing: installing openjdk-17-jre-headless" >&2
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends openjdk-17-jre-headless
