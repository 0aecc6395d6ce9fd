#!/usr/bin/env bash
# A change against a baseline commit on the GPU machine, in one call: builds the baseline's CLI
# (scripts/device_baseline.sh, from .devdeps/), compares the SASS of every kernel of the two
# binaries (scripts/sass_fingerprint.py: a kernel of the new binary whose instructions are those
# of a baseline kernel runs the same code, whatever its name), and benches both binaries
# alternately on the same presets and T (CUDA graph replays). Writes to $OUT:
#   sass_new.txt, sass_base.txt   fingerprints (hash, instructions, kernel)
#   sass_diff.txt                 new kernels with no identical baseline kernel
#   bench_<preset>_<recipe>_{new,base}.csv
#   scripts/device_compare.sh NEW_MOE_EP [presets] [tokens]
#   MOE_EP_BASELINE_BIN=path/moe_ep   a baseline CLI built elsewhere (the same toolkit), instead
#     presets: "deepseek-v4-flash:mxfp4 deepseek-v4-flash:nvfp4" (default), tokens 1,8,128,512,2048,8192
set -uo pipefail
cd "$(dirname "$0")/.."
NEW=$1
PRESETS=${2:-deepseek-v4-flash:mxfp4 deepseek-v4-flash:nvfp4}
TOKENS=${3:-1,8,128,512,2048,8192}
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
if [[ -n "${MOE_EP_BASELINE_BIN:-}" ]]; then
  BASE=$MOE_EP_BASELINE_BIN
else
  mapfile -t base < <(scripts/device_baseline.sh | tail -2) || exit 1
  export "${base[0]}"
  BASE=${base[1]}
fi
[[ -x "$BASE" ]] || { echo "no baseline binary"; exit 1; }
python3 scripts/sass_fingerprint.py "$NEW" > "$OUT/sass_new.txt"
python3 scripts/sass_fingerprint.py "$BASE" > "$OUT/sass_base.txt"
awk 'NR == FNR { seen[$1] = 1; next } !($1 in seen)' "$OUT/sass_base.txt" "$OUT/sass_new.txt" > "$OUT/sass_diff.txt"
echo "kernels: new $(wc -l < "$OUT/sass_new.txt"), baseline $(wc -l < "$OUT/sass_base.txt"), new without an identical baseline kernel: $(wc -l < "$OUT/sass_diff.txt")"
cut -c1-160 "$OUT/sass_diff.txt"
for pr in $PRESETS; do
  preset=${pr%%:*} recipe=${pr##*:}
  for side in base new; do
    bin=$NEW; [[ $side == base ]] && bin=$BASE
    "$bin" bench --device cuda --preset "$preset" --backend "$recipe" --tokens "$TOKENS" \
      --csv "$OUT/bench_${preset}_${recipe}_${side}.csv" > "$OUT/bench_${preset}_${recipe}_${side}.log" 2>&1 ||
      { echo "bench $side $preset $recipe failed"; tail -5 "$OUT/bench_${preset}_${recipe}_${side}.log"; }
  done
  python3 - "$OUT/bench_${preset}_${recipe}_base.csv" "$OUT/bench_${preset}_${recipe}_new.csv" "$preset $recipe" <<'PY'
import csv, sys
def rows(p):
    try:
        return {int(r["tokens"]): float(r["time_us"]) for r in csv.DictReader(open(p))}
    except OSError:
        return {}
b, n = rows(sys.argv[1]), rows(sys.argv[2])
for t in sorted(set(b) | set(n)):
    bt, nt = b.get(t), n.get(t)
    ratio = f"{nt / bt:.3f}" if bt and nt else "-"
    print(f"{sys.argv[3]:28s} T={t:5d} base {bt or 0:9.1f} us  new {nt or 0:9.1f} us  new/base {ratio}")
PY
done
