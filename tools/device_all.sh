#!/usr/bin/env bash
# Every device measurement of issue #25 as one prepared run for a 16-core GPU machine, in the order
# of what matters most: the cores benchmark (tools/device_cores.sh, page cache), the torch adapter's
# workers against num_workers=0 (benchmarks/bench_torch.py --workers 2,4,8, group and window), the
# GPU-feeding benchmark (bench_torch.py --train, also with the Loader in 2 and 4 DataLoader workers, and
# who holds the GIL while each trains) and the CUDA tests (tests/test_torch_gpu.py), all
# on one generated kdd-like file; after the cores part, whether threads' page-cache reads scale
# through one descriptor or one each (benchmarks/bench_pread.py). Writes into $OUT: machine.txt,
# cores_gil.json/.log, pread.json, torch.json, torch_window.json, train_gpu.json, and device.log
# (the output of the pread and torch parts and the tests).
#
#   OUT=/tmp/out bash tools/device_all.sh            # 1 GB, about 7 minutes on 16 cores
#   OUT=/tmp/out bash tools/device_all.sh --small    # 30 MB, a check of the script (minutes on 2 cores)
#
# CORES_BUDGET_S (default 280: at 200 s the run of 2026-11-27 ended before the instance rows) bounds the
# cores part; each later part is cut by `timeout`. The whole run took 323 s on 16 cores with 200 s.
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
DIR=/tmp/lirs-cores REPEATS=3
[[ ${1:-} == --small ]] && DIR=/tmp/lirs-cores-small REPEATS=1
t0=$SECONDS
MODES=page-cache BUDGET_S=${CORES_BUDGET_S:-280} bash tools/device_cores.sh ${1:-}
echo "cores part: $((SECONDS - t0)) s"
# device_cores.sh generated and indexed $DIR/kdd.svm; the torch parts reuse it (same size)
BYTES=$(stat -c %s "$DIR/kdd.svm")
NOTE="tools/device_all.sh ${1:-}: $(nproc) cores; nothing else ran on the machine"
LOG="$OUT/device.log"
: > "$LOG"
torch_run() {  # NAME TIMEOUT ARGS...: one bench_torch.py run into $OUT/NAME.json
  local name=$1 t=$2
  shift 2
  echo "== bench_torch.py $* ($((SECONDS - t0)) s)" | tee -a "$LOG"
  timeout "$t" "$PY" benchmarks/bench_torch.py --data "$DIR/kdd.svm" --size "$BYTES" --repeats "$REPEATS" \
    --note "$NOTE" --out "$OUT/$name.json" "$@" 2>&1 | grep -v -e UserWarning -e check_worker_number | tee -a "$LOG"
}
echo "== bench_pread.py ($((SECONDS - t0)) s)" | tee -a "$LOG"
timeout "${PREAD_T:-60}" "$PY" benchmarks/bench_pread.py --data "$DIR/kdd.svm" --seconds 0.5 --repeat "$REPEATS" \
  --note "$NOTE" --out "$OUT/pread.json" 2>&1 | tee -a "$LOG"
torch_run torch "${TORCH_T:-100}" --workers 2,4,8
# py-spy as device_cores.sh found or installed it (its own process: the variable does not come back)
[[ -z ${PYSPY:-} && -x /tmp/pyspy/bin/py-spy ]] && export PYSPY=/tmp/pyspy/bin/py-spy
torch_run train_gpu "${TRAIN_T:-190}" --train --train-workers 2,4 --train-gil 4
torch_run torch_window "${TORCH_T:-100}" --workers 2,4,8 --granularity window
echo "== tests/test_torch_gpu.py ($((SECONDS - t0)) s)" | tee -a "$LOG"
timeout "${TESTS_T:-100}" "$PY" -m pytest -q -p no:cacheprovider tests/test_torch_gpu.py 2>&1 | tail -n 30 | tee -a "$LOG"
echo "all: $((SECONDS - t0)) s" | tee -a "$LOG"
