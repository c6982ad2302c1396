#!/usr/bin/env bash
# Every device measurement of issue #25 as one prepared run for a 16-core GPU machine, in the order
# of what matters most: the cores benchmark (tools/device_cores.sh, page cache), the torch adapter's
# workers against num_workers=0 (benchmarks/bench_torch.py --workers 2,4,8) and the GPU-feeding
# benchmark (bench_torch.py --train), all on one generated kdd-like file. Writes into $OUT:
# machine.txt, cores_gil.json/.log, torch.json/.log, train_gpu.json/.log; then the CUDA tests
# (tests/test_torch_gpu.py, skipped where there is no GPU) into gpu_tests.log.
#
#   OUT=/tmp/out bash tools/device_all.sh            # 1 GB, about 5 minutes on 16 cores
#   OUT=/tmp/out bash tools/device_all.sh --small    # 30 MB, a check of the script (minutes on 2 cores)
#
# CORES_BUDGET_S (default 200) bounds the cores part; each torch part is cut by `timeout`.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to the folder for the results}
mkdir -p "$OUT"
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}" NUMBA_CACHE_DIR=${NUMBA_CACHE_DIR:-/tmp/nb} PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
SIZE=1e9 DIR=/tmp/lirs-cores REPEATS=3 TORCH_T=${TORCH_T:-120} TRAIN_T=${TRAIN_T:-100}
[[ ${1:-} == --small ]] && SIZE=30e6 DIR=/tmp/lirs-cores-small REPEATS=1
t0=$SECONDS
MODES=page-cache BUDGET_S=${CORES_BUDGET_S:-200} bash tools/device_cores.sh ${1:-}
echo "cores part: $((SECONDS - t0)) s"
# device_cores.sh generated and indexed $DIR/kdd.svm; bench_torch reuses it (same size).
BYTES=$(stat -c %s "$DIR/kdd.svm")
NOTE="tools/device_all.sh ${1:-}: $(nproc) cores; nothing else ran on the machine"
timeout "$TORCH_T" "$PY" benchmarks/bench_torch.py --data "$DIR/kdd.svm" --size "$BYTES" --workers 2,4,8 \
  --repeats "$REPEATS" --note "$NOTE" --out "$OUT/torch.json" 2>&1 | tee "$OUT/torch.log"
echo "torch part: $((SECONDS - t0)) s"
timeout "$TRAIN_T" "$PY" benchmarks/bench_torch.py --train --data "$DIR/kdd.svm" --size "$BYTES" \
  --repeats "$REPEATS" --note "$NOTE" --out "$OUT/train_gpu.json" 2>&1 | tee "$OUT/train_gpu.log"
echo "train part: $((SECONDS - t0)) s"
timeout "${TESTS_T:-120}" "$PY" -m pytest -q -p no:cacheprovider tests/test_torch_gpu.py 2>&1 | tail -n 30 | tee "$OUT/gpu_tests.log"
echo "all: $((SECONDS - t0)) s"
