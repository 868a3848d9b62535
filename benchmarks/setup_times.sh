#!/usr/bin/env bash
# Install size and time of the lab's virtual environment, on a cold and on a warm pip cache,
# measured with the Makefile's own install step (`make install VENV=...`: what the first
# `make lab` or `make test` runs). Nothing outside a temporary folder is touched: the venv
# and the pip cache live there and are deleted at the end (.venv is left alone).
#
#   bash benchmarks/setup_times.sh            # a cold install, then a warm one (~2 x 6 GB written)
#   TEST=1 bash benchmarks/setup_times.sh     # also times `make test` (in this checkout's .venv)
#
# "Cold" = an empty pip cache (PIP_CACHE_DIR in the temporary folder): every wheel is fetched
# from the package index. "Warm" = the same install again into a new venv, the cache now full.
# Where the index is a local mirror (file://, as on the lab's build machines), pip does not
# cache what it reads from disk, so cold and warm differ by little there; the script prints
# the total size of the wheels, which is what a cold install downloads over the network.
# Prints one Markdown table row per measurement (paste into benchmarks/RESULTS.md).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/lab-setup-XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
export PIP_CACHE_DIR="$WORK/pip-cache"

install() {  # $1: label; prints "label | seconds | venv size | CUDA libraries size"
    local venv="$WORK/venv-$1" start end
    start=$(date +%s.%N)
    make -s install PYTHON="$PY" VENV="$venv" >"$WORK/$1.log" 2>&1 || { cat "$WORK/$1.log"; exit 1; }
    end=$(date +%s.%N)
    local cuda
    cuda=$(du -sh "$venv"/lib/python3*/site-packages/nvidia 2>/dev/null | cut -f1 || true)
    printf '| %s | %.0f s | %s | %s |\n' "$1" "$(python3 -c "print($end - $start)")" \
        "$(du -sh "$venv" | cut -f1)" "${cuda:-none}"
    rm -rf "$venv"
}

echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(getconf _NPROCESSORS_ONLN) cores, load average $(cut -d" " -f1-3 /proc/loadavg), $($PY --version), commit $(git rev-parse --short HEAD)"
echo "| install | time | .venv size | of which CUDA libraries |"
echo "|---|---|---|---|"
install cold
install warm
echo "pip cache after the installs: $(du -sh "$PIP_CACHE_DIR" 2>/dev/null | cut -f1 || echo empty)"
"$PY" -m pip download --quiet --no-deps -c constraints.txt -r <(grep -E '^[A-Za-z0-9]' constraints.txt) \
    -d "$WORK/wheels" >/dev/null 2>&1 && echo "wheels a cold install downloads: $(du -sh "$WORK/wheels" | cut -f1)" || true
rm -rf "$WORK/wheels"

if [ "${TEST:-0}" = 1 ]; then
    start=$(date +%s.%N)
    make -s test >"$WORK/test.log" 2>&1 || { tail -30 "$WORK/test.log"; exit 1; }
    end=$(date +%s.%N)
    printf 'make test: %.0f s wall on %s cores (%s)\n' "$(python3 -c "print($end - $start)")" "$(getconf _NPROCESSORS_ONLN)" \
        "$(tail -1 "$WORK/test.log")"
fi
