# Sourced by the device scripts (tools/device_cores.sh, tools/device_all.sh): the repository root as
# the working folder, $OUT made, the environment the benchmarks run in without an install, $PY.
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to the folder for the results}
mkdir -p "$OUT"
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}" NUMBA_CACHE_DIR=${NUMBA_CACHE_DIR:-/tmp/nb} PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
