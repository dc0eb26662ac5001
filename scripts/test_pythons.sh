#!/usr/bin/env bash
# make test-pythons: the tests on each Python Sluice supports (pyproject's requires-python), each in a virtualenv of
# its own (.venv-3.12, ...) with `.[test]` installed editable, so sluice._speedups is built for that interpreter
# (beside the others' in src/sluice: each has its own ABI tag).
#   scripts/test_pythons.sh [VERSION ...]     default: 3.11 3.12 3.13
#   PYTHON_TESTS="tests/unit" scripts/...     what pytest runs (default: the unit and integration tests)
#   PYTHON_SETUP_ONLY=1 scripts/...           make the virtualenvs, run nothing (CI makes them while the suite runs)
#   PYTHON_WORKERS=1 scripts/...              pytest-xdist workers per Python (default 2; CI runs 1 beside the suite)
# An interpreter is python3.X on the PATH, else pyenv's (`pyenv install 3.X` adds one, found with or without pyenv on
# the PATH); a missing one fails the run.
# Every version runs even when one fails; the exit status says whether all passed.
set -euo pipefail
cd "$(dirname "$0")/.."
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(3.11 3.12 3.13)
read -r -a tests <<< "${PYTHON_TESTS:-tests/unit tests/integration}"

interpreter() {
    local v=$1 prefix installed
    installed=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}/versions/$v".*/bin/"python$v" 2>/dev/null | sort -V | tail -1)
    if command -v "python$v" >/dev/null 2>&1 && "python$v" -c "" 2>/dev/null; then
        command -v "python$v"
    elif command -v pyenv >/dev/null 2>&1 && prefix=$(pyenv prefix "$v" 2>/dev/null); then
        echo "$prefix/bin/python$v"
    elif [ -n "$installed" ]; then  # pyenv's versions, pyenv itself not on the PATH
        echo "$installed"
    else
        echo "test_pythons: no Python $v (install it, e.g. pyenv install $v)" >&2
        return 1
    fi
}

failed=()
for v in "${versions[@]}"; do
    venv=".venv-$v"
    stamp="$venv/.installed-test"
    if [ ! -x "$venv/bin/python" ]; then
        "$(interpreter "$v")" -m venv "$venv"
    fi
    # Reinstalled when what the install builds from changed (the Makefile's BUILD_INPUTS).
    if [ ! -e "$stamp" ] || [ -n "$(find pyproject.toml setup.py src/sluice/_speedups.c -newer "$stamp")" ]; then
        "$venv/bin/python" -m pip install -q --upgrade pip
        "$venv/bin/python" -m pip install -q --no-compile -e '.[test]'
        touch "$stamp"
    fi
    [ -z "${PYTHON_SETUP_ONLY:-}" ] || continue
    echo "== Python $("$venv/bin/python" -c 'import platform; print(platform.python_version())'): ${tests[*]}"
    "$venv/bin/python" -m pytest -q -n "${PYTHON_WORKERS:-2}" --dist loadgroup "${tests[@]}" || failed+=("$v")
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "test_pythons: tests failed on Python ${failed[*]}" >&2
    exit 1
fi
