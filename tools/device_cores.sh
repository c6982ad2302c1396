#!/usr/bin/env bash
# The many-cores measurement (issue #25) as one prepared run for a 16-core machine: kdd-like LIBSVM
# made with lirs's generator, then benchmarks/bench_cores.py on 1, 2, 4, 8, 16 cores, page cache
# (engine buffered, data in /dev/shm) and device (default engine, data on disk), granularities
# group, window, instance, with the GIL-held share and its holders (py-spy), CPU us per record
# and the implied ceiling. Writes into $OUT: cores_gil.json, cores_gil.log, machine.txt.
#
#   OUT=/tmp/out bash tools/device_cores.sh            # 1 GB, about 7 minutes on 16 cores
#   OUT=/tmp/out bash tools/device_cores.sh --small    # 30 MB, 1 and 2 cores: a check of the script
#
# MODES picks the modes (default page-cache,device).
# Runs from the repository root with PYTHONPATH=. (no install) and NUMBA_CACHE_DIR=/tmp/nb.
# $PYTHON picks the interpreter (default python3; it needs numpy, scipy, numba). The runs left
# when the time budget is spent (BUDGET_S, default 420 s, data generation included) are listed
# under "skipped" in the JSON, which is rewritten after every run: a run cut short keeps its rows.
#
# py-spy (for the GIL figures) is taken from $PYSPY, PATH, beside $PYTHON, or installed from a
# wheel carried in .whl/ (where pip works, from the repository root:
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --platform manylinux_2_17_x86_64 \
#       --platform manylinux1_x86_64 -d .whl py-spy==0.4.3
# and carry .whl). Without it, or where ptrace is refused, the GIL columns are null with a reason.
set -euo pipefail
source "$(dirname "$0")/device_env.sh"

SHM=/dev/shm/lirs-cores-$$  # the page-cache copy, removed at the end
trap 'rm -rf "$SHM"' EXIT
SIZE=1GB DIR=/tmp/lirs-cores REPEAT=2 MAXS=2 GILS=2 CORES="" BUDGET=${BUDGET_S:-420}
if [[ ${1:-} == --small ]]; then
  SIZE=30MB DIR=/tmp/lirs-cores-small REPEAT=1 MAXS=1 GILS=1 CORES=1,2 BUDGET=${BUDGET_S:-300}
fi

beside=$("$PY" -c 'import os, sys; print(os.path.join(os.path.dirname(sys.executable), "py-spy"))')
if [[ -z ${PYSPY:-} ]]; then
  if command -v py-spy >/dev/null; then
    PYSPY=$(command -v py-spy)
  elif [[ -x $beside ]]; then
    PYSPY=$beside
  else
    whl=$(ls .whl/py_spy-*.whl 2>/dev/null | head -n 1 || true)
    if [[ -n $whl ]] && "$PY" -m pip install -q --no-index --no-deps --target /tmp/pyspy "$whl"; then
      PYSPY=/tmp/pyspy/bin/py-spy
    fi
  fi
fi
[[ -n ${PYSPY:-} ]] && export PYSPY

{
  echo "cores: $(nproc) (affinity), $(getconf _NPROCESSORS_ONLN) online"
  lscpu 2>/dev/null | grep -E 'Model name|^CPU\(s\)|Thread|NUMA node\(s\)' || true
  free -g || true
  df -h /tmp /dev/shm || true
  "$PY" -c 'import sys, numpy, scipy, numba; print("python", sys.version.split()[0], "numpy", numpy.__version__,
"scipy", scipy.__version__, "numba", numba.__version__)'
  echo "py-spy: ${PYSPY:-missing}"
  [[ -n ${PYSPY:-} ]] && "$PYSPY" --version
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

set -o pipefail
"$PY" benchmarks/bench_cores.py --size "$SIZE" --dir "$DIR" --modes "${MODES:-page-cache,device}" --shm "$SHM" --repeat "$REPEAT" --max-seconds "$MAXS" \
  --gil-seconds "$GILS" --gil-rate 200 ${CORES:+--cores "$CORES"} --budget-s "$BUDGET" \
  --note "${NOTE:-tools/device_cores.sh ${1:-}: $(nproc) cores; nothing else ran on the machine}" \
  --out "$OUT/cores_gil.json" 2>&1 | tee "$OUT/cores_gil.log"
