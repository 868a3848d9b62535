#!/usr/bin/env bash
# The GPU proof of the series: nbval over every notebook on a CUDA machine, compared with
# the outputs stored from the CPU (nothing is regenerated), then the benchmarks.
#
#   bash benchmarks/gpu_nbval.sh [OUTDIR]            # default OUTDIR: build/gpu_proof
#
# Environment knobs:
#   NOTEBOOKS="notebooks/00_hardware.ipynb ..."   which notebooks (default: notebooks/[0-9][0-9]_*.ipynb)
#   JOBS=4        notebooks run in parallel (each in its own pytest session and kernel)
#   BENCH=1       also run benchmarks/matmul_throughput.py and benchmarks/train_step.py (0: skip)
#   UNIT=1        also run the unit tests of labsupport's hardware/distributed modules on this machine
#   EXECUTE="00_hardware 10_scaling_up"  also execute copies of these notebooks (outputs of the
#                 NBVAL_IGNORE_OUTPUT cells, i.e. the GPU's own figures, end up in the log archive)
#   PYTHON=python3
#
# Needs python3 with a CUDA torch, torchvision, matplotlib, scikit-learn, tensorboard, tqdm and
# pytest. nbval, ipykernel, ipywidgets and their dependencies may come as wheels in ./.whl
# (see the device notes); they are installed into /tmp/site, nowhere else. labsupport is used
# from this checkout (PYTHONPATH), so nothing is installed into the machine's Python.
#
# Output in OUTDIR: summary.txt (one line per notebook: PASS/FAIL, cells, seconds), logs.tar.gz
# (each notebook's pytest log with nbval's diffs, executed copies), matmul.json, train_step.json.
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR="${1:-build/gpu_proof}"
PY="${PYTHON:-python3}"
JOBS="${JOBS:-4}"
mkdir -p "$OUTDIR"
LOGS="$(mktemp -d)"

if compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
# NVLink multicast stays off for every NCCL program started from here.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

{
    date -u
    nvidia-smi -L 2>&1
    "$PY" -c "import sys, torch, torchvision; print('python', sys.version.split()[0], '| torch', torch.__version__, '| torchvision', torchvision.__version__, '| cuda available', torch.cuda.is_available(), '| GPUs', torch.cuda.device_count())"
} | tee "$OUTDIR/summary.txt"
"$PY" -c "import torch; assert torch.cuda.is_available()" || { echo "no CUDA GPU: this is the GPU proof" | tee -a "$OUTDIR/summary.txt"; exit 1; }

run_one() {   # one notebook, one pytest session; prints its summary line
    nb="$1"; name="$(basename "$nb" .ipynb)"
    start=$(date +%s%N)
    "$PY" -m pytest -q -p no:cacheprovider "$nb" --nbval --nbval-current-env \
        --nbval-sanitize-with tests/nbval_sanitize.cfg >"$LOGS/$name.log" 2>&1
    rc=$?
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    verdict=$([ $rc -eq 0 ] && echo PASS || echo FAIL)
    printf "%-36s %s rc=%d %4d.%01d s  %s\n" "$name" "$verdict" "$rc" $((ms / 1000)) $((ms % 1000 / 100)) \
        "$(tail -n 1 "$LOGS/$name.log")"
}
export -f run_one
export PY LOGS

NOTEBOOKS="${NOTEBOOKS:-$(ls notebooks/[0-9][0-9]_*.ipynb)}"
echo "nbval against the stored CPU outputs:" | tee -a "$OUTDIR/summary.txt"
printf "%s\n" $NOTEBOOKS | xargs -P "$JOBS" -I{} bash -c 'run_one {}' | sort | tee -a "$OUTDIR/summary.txt"

if [ "${UNIT:-1}" = 1 ]; then
    "$PY" -m pytest -q -p no:cacheprovider tests/test_hardware.py tests/test_distributed.py \
        tests/test_checks_scaling.py tests/test_checks_hardware.py >"$LOGS/unit.log" 2>&1
    echo "unit tests (hardware, distributed, checks 00/10): rc=$? $(tail -n 1 "$LOGS/unit.log")" | tee -a "$OUTDIR/summary.txt"
fi

for stem in ${EXECUTE:-}; do   # copies, executed in a scratch folder: the checkout stays as it is
    mkdir -p "$LOGS/executed"
    cp "notebooks/$stem.ipynb" notebooks/*.py "$LOGS/executed/"   # with the scripts a notebook runs (ddp_train.py)
    LAB_RUNS_DIR="$LOGS/runs" "$PY" -m tools.regenerate "$LOGS/executed/$stem.ipynb" >>"$LOGS/executed.log" 2>&1
    echo "executed a copy of $stem: rc=$?" | tee -a "$OUTDIR/summary.txt"
done
rm -rf "$LOGS/runs"

if [ "${BENCH:-1}" = 1 ]; then
    "$PY" benchmarks/matmul_throughput.py --json "$OUTDIR/matmul.json" 2>&1 | tee -a "$OUTDIR/summary.txt"
    ddp=$("$PY" -c "import torch; print(min(2, torch.cuda.device_count()))")   # NCCL: 1 vs 2 GPUs, or 1
    "$PY" benchmarks/train_step.py --batch-sizes 64 1024 --ddp "$ddp" --json "$OUTDIR/train_step.json" \
        2>&1 | tee -a "$OUTDIR/summary.txt"
fi

tar -czf "$OUTDIR/logs.tar.gz" -C "$LOGS" . && rm -rf "$LOGS"
grep -q " FAIL " "$OUTDIR/summary.txt" && exit 1 || exit 0
