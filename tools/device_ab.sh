#!/usr/bin/env bash
# This checkout against earlier lirs trees on one lent 16-core GPU machine, in one call: the same
# data, the same machine, runs one after the other (no two at once). Most wanted first, each part
# cut by `timeout`:
#   1. benchmarks/bench_torch.py --train (the GPU fed by make_dataloader(device="cuda")): this tree,
#      then the CUDA tests (tests/test_torch_gpu.py, this tree), then each tree named in TRAIN_AB;
#      into $OUT/train_gpu.json and train_gpu_<commit>.json.
#   2. benchmarks/bench_cores.py, page cache, cores $CORES, granularities $GRANS, no GIL records:
#      this tree, then each tree named in CORES_AB; into $OUT/cores_ab.json, cores_ab_<commit>.json.
#   3. (PARTS with "torchw") benchmarks/bench_torch.py --granularity window --workers $TORCH_WORKERS
#      (default 2,4,8): this tree, then each tree named in TORCH_AB, on the cores part's file; into
#      $OUT/torch_window_ab.json, torch_window_ab_<commit>.json.
# An earlier tree is lirs/ and benchmarks/*.py of a commit, made here before the call with
#   bash tools/device_ab.sh --make COMMIT...      (into .ab/COMMIT/; add /.ab/ to .git/info/exclude)
# or, for a tree that is a commit with a patch applied (an experiment not on main; tools/ab/*.diff),
#   bash tools/device_ab.sh --make NAME=COMMIT+PATCH   (into .ab/NAME/; then CORES_AB="NAME ...")
# and carried (run's carry: [".ab"]). Each tree runs its own benchmark scripts on its own lirs.
#
#   TRAIN_AB=49dc7d9 CORES_AB=75594c1 OUT=/tmp/out bash tools/device_ab.sh           # 1 GB, ~4 minutes
# PARTS picks the parts (default "train cores"; PARTS=cores runs the cores benchmark alone).
# THIS names this checkout's commit in the notes (default: git's HEAD, where there is a .git).
#   TRAIN_AB=49dc7d9 CORES_AB=75594c1 OUT=/tmp/out bash tools/device_ab.sh --small   # 30 MB, a check here
set -uo pipefail
if [[ ${1:-} == --make ]]; then
  shift
  for c in "$@"; do
    name=${c%%=*} spec=${c#*=} patch=
    [[ $spec == *+* ]] && patch=${spec#*+} spec=${spec%%+*}
    rm -rf ".ab/$name" && mkdir -p ".ab/$name"
    git archive "$spec" lirs benchmarks | tar -x -C ".ab/$name" --exclude 'benchmarks/results' || exit 1
    rm -rf ".ab/$name/benchmarks/results"
    if [[ -n $patch ]]; then
      patch -s -p1 -d ".ab/$name" < "$patch" || { echo "device_ab: $patch does not apply to $spec" >&2; exit 1; }
    fi
  done
  du -sh .ab
  exit 0
fi
source "$(dirname "$0")/device_env.sh"
SIZE=1GB BYTES=1e9 CORES=${CORES:-2,16} GRANS=${GRANS:-group,window} REPEATS=3 TRAIN_T=${TRAIN_T:-90} CORES_T=${CORES_T:-90}
if [[ ${1:-} == --small ]]; then
  SIZE=30MB BYTES=30e6 CORES=1,2 REPEATS=1
fi
D=/tmp/lirs-ab
THIS=${THIS:-$(git rev-parse --short HEAD 2>/dev/null || echo "this checkout")}  # the device's copy has no .git
mkdir -p "$D"
t0=$SECONDS
NOTE="tools/device_ab.sh ${1:-}: $(nproc) cores; nothing else ran on the machine"
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/machine_ab.txt" 2>&1
{ echo "cores: $(nproc)"; lscpu 2>/dev/null | grep -E 'Model name'; } >> "$OUT/machine_ab.txt"
LOG="$OUT/device_ab.log"
: > "$LOG"

tree_run() {  # TREE TIMEOUT SCRIPT ARGS...: a benchmark script of TREE ("." this one) on TREE's lirs
  local tree=$1 t=$2 script=$3
  shift 3
  echo "== $tree: $script $* ($((SECONDS - t0)) s)" | tee -a "$LOG"
  (cd "$tree" && PYTHONPATH=. timeout "$t" "$PY" "$script" "$@") 2>&1 \
    | grep -v -e UserWarning -e check_worker_number | tee -a "$LOG"
}

PARTS=${PARTS:-train cores}
# 1. the GPU fed by make_dataloader: one file (made by this tree's bench_torch), every tree
DATA=$D/kdd.svm
if [[ " $PARTS " == *" train "* ]]; then
tree_run . "$TRAIN_T" benchmarks/bench_torch.py --train --data "$DATA" --size "$BYTES" --repeats "$REPEATS" \
  --note "$NOTE; lirs at $THIS" --out "$OUT/train_gpu.json"
echo "== tests/test_torch_gpu.py ($((SECONDS - t0)) s)" | tee -a "$LOG"
timeout "${TESTS_T:-60}" "$PY" -m pytest -q -p no:cacheprovider tests/test_torch_gpu.py 2>&1 | tail -n 15 | tee -a "$LOG"
for c in ${TRAIN_AB:-}; do
  tree_run ".ab/$c" "$TRAIN_T" benchmarks/bench_torch.py --train --data "$DATA" --size "$BYTES" --repeats "$REPEATS" \
    --note "$NOTE; lirs at $c" --out "$OUT/train_gpu_$c.json"
done
fi

# 2. the cores benchmark: each tree indexes its own hard link of one file (made once, by this tree)
cores_run() {  # TREE NAME
  local dir=$D/cores-$2
  mkdir -p "$dir"
  if [[ ! -e $dir/kdd.svm ]]; then
    [[ -e $D/cores-src/kdd.svm ]] || (PYTHONPATH=. "$PY" -m lirs.cli gen --profile kdd --size "$SIZE" -o "$D/cores-src/kdd.svm" --quiet)
    ln "$D/cores-src/kdd.svm" "$dir/kdd.svm"
    (cd "$1" && PYTHONPATH=. "$PY" -m lirs.cli index "$dir/kdd.svm" > /dev/null)  # else bench_cores makes its own file
  fi
  tree_run "$1" "$CORES_T" benchmarks/bench_cores.py --size "$SIZE" --dir "$dir" --modes page-cache \
    --granularities "$GRANS" --cores "$CORES" --shm "/dev/shm/lirs-ab-$2" --repeat 2 --max-seconds 2 --gil-seconds 0 \
    --note "$NOTE; lirs at $2" --out "$OUT/cores_ab${3:-}.json"
  rm -rf "/dev/shm/lirs-ab-$2"
}
if [[ " $PARTS " == *" cores "* ]]; then
mkdir -p "$D/cores-src"
cores_run . "$THIS"
for c in ${CORES_AB:-}; do
  cores_run ".ab/$c" "$c" "_$c"
done
fi

# 3. window epochs with DataLoader workers: each tree indexes its own hard link of the cores part's file
torch_ab_run() {  # TREE NAME [SUFFIX]
  local dir=$D/torchw-$2
  mkdir -p "$dir"
  [[ -e $D/cores-src/kdd.svm ]] || (PYTHONPATH=. "$PY" -m lirs.cli gen --profile kdd --size "$SIZE" -o "$D/cores-src/kdd.svm" --quiet)
  [[ -e $dir/kdd.svm ]] || ln "$D/cores-src/kdd.svm" "$dir/kdd.svm"
  tree_run "$1" "${TORCH_T:-100}" benchmarks/bench_torch.py --data "$dir/kdd.svm" --size "$(stat -c %s "$dir/kdd.svm")" \
    --repeats "$REPEATS" --workers "${TORCH_WORKERS:-2,4,8}" --granularity window --note "$NOTE; lirs at $2" \
    --out "$OUT/torch_window_ab${3:-}.json"
}
if [[ " $PARTS " == *" torchw "* ]]; then
mkdir -p "$D/cores-src"
torch_ab_run . "$THIS"
for c in ${TORCH_AB:-}; do
  torch_ab_run ".ab/$c" "$c" "_$c"
done
fi
echo "all: $((SECONDS - t0)) s" | tee -a "$LOG"
