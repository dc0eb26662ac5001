#!/usr/bin/env bash
# The test suite needs a Java 17+ JDK and Maven: Spark (the sluice-mq[spark] extra) runs on Java, and the interop and
# reference tests build their Java programs with Maven. Whatever of `java`, `javac` and `mvn` is missing is
# installed with apt; `make dev` never calls this.
set -euo pipefail
source "$(dirname "$0")/apt_install.sh"
missing=()
command -v java >/dev/null 2>&1 || missing+=(java)
command -v javac >/dev/null 2>&1 || missing+=(javac)
command -v mvn >/dev/null 2>&1 || missing+=(mvn)
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
packages=()
case " ${missing[*]} " in *" java "*|*" javac "*) packages+=(openjdk-17-jdk-headless) ;; esac
case " ${missing[*]} " in *" mvn "*) packages+=(maven) ;; esac
if ! apt_install ensure_java "${packages[@]}"; then
    echo "ensure_java: ${missing[*]} missing: install a Java 17+ JDK and Maven (the Spark tests need java; the Java" \
         "interop and reference tests skip without javac and mvn)" >&2
    command -v java >/dev/null 2>&1 || exit 1
fi
