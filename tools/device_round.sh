#!/usr/bin/env bash
# One lent 16-core GPU machine, one call: tools/device_all.sh on this checkout, then the cores A/B
# of tools/device_ab.sh (PARTS=cores) against the trees named in CORES_AB (made beforehand with
# `bash tools/device_ab.sh --make COMMIT...` and carried as .ab), on the same 1 GB file. The results
# come back as two tarballs ($OUT/all.tgz, $OUT/ab.tgz), each written whole after its part, since
# the device tool returns at most 8 files and a call cut at its limit keeps what $OUT holds.
# AB_AFTER_S (default 420): the A/B part starts only if the first part ended before it. ROUND picks
# the parts (default "all,ab"; ROUND=ab in a second call on the still-warm machine: the A/B alone,
# on the file the first call generated). AB_PARTS (default "cores"): the A/B parts, e.g. "torchw
# cores" with TORCH_AB naming the trees whose window epochs with workers run against this one.
#
#   CORES_AB="be03bae 36f8182" THIS=abc1234 OUT=/tmp/out bash tools/device_round.sh [--small]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to the folder for the results}
RES=/tmp/lirs-round
mkdir -p "$OUT"
rm -rf "$RES" && mkdir -p "$RES/all" "$RES/ab"
pack() {  # NAME: $RES/NAME as $OUT/NAME.tgz, written whole
  tar czf "$OUT/.$1.tgz" -C "$RES" "$1" && mv "$OUT/.$1.tgz" "$OUT/$1.tgz"
}
t0=$SECONDS
if [[ ${ROUND:-all,ab} == *all* ]]; then
  OUT=$RES/all bash tools/device_all.sh ${1:-} 2>&1 | grep -v -e UserWarning -e check_worker_number > "$RES/all/round.log"
  grep -E "^page-cache|^device|cores part" "$RES/all/round.log"; tail -n 22 "$RES/all/round.log"
  pack all
fi
if [[ ${ROUND:-all,ab} == *ab* ]] && (( SECONDS - t0 < ${AB_AFTER_S:-420} )) && [[ -n ${CORES_AB:-}${TORCH_AB:-} ]]; then
  src=/tmp/lirs-cores${1:+-small}/kdd.svm  # device_all's file, the same generator and size
  mkdir -p /tmp/lirs-ab/cores-src
  [[ -e $src && ! -e /tmp/lirs-ab/cores-src/kdd.svm ]] && ln "$src" /tmp/lirs-ab/cores-src/kdd.svm
  OUT=$RES/ab PARTS=${AB_PARTS:-cores} bash tools/device_ab.sh ${1:-} > /dev/null 2>&1
  tail -n 8 "$RES/ab/device_ab.log"
  pack ab
fi
echo "round: $((SECONDS - t0)) s"
