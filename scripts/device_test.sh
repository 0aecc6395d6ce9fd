#!/usr/bin/env bash
# The GPU runner: on an SM90 machine, runs every GPU test, compute-sanitizer on a small case,
# `moe_ep run`/`moe_ep bench --device cuda` and the PyTorch peers (bench/torch_peer.py) in one
# go, writes logs and CSV under $OUT and prints a short table last.
#
#   scripts/device_test.sh                  binaries from .device-bin (scripts/device_pack.sh),
#                                           else builds build-cuda here (needs the dev packages)
#   MOE_EP_DEVICE_STEPS="tests sanitizer run ep stages torch bench profile"   steps (default:
#                                           all; "pro" adds deepseek-v4-pro at T = 1, 8192)
#   MOE_EP_BENCH_TOKENS=1,8,32,128,512,2048,8192            bench sweep
#
# Outputs ($OUT, default ./device-out): summary.txt, bench.csv, torch.csv, logs.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device-out}
WORK=$(mktemp -d /tmp/moe_ep_device.XXXX)
STEPS=${MOE_EP_DEVICE_STEPS:-tests sanitizer run ep stages torch bench profile}
TOKENS=${MOE_EP_BENCH_TOKENS:-1,8,32,128,512,2048,8192}
mkdir -p "$OUT"
START=$(date +%s)
BUDGET=${MOE_EP_DEVICE_BUDGET:-560}  # seconds for all steps (a device call allows 600)
elapsed() { echo $(( $(date +%s) - START )); }
# limit N: the smaller of N and the budget left (minus a margin for the summary); 0 = skip.
limit() { local left=$(( BUDGET - $(elapsed) - 15 )); (( left < $1 )) && echo $(( left > 0 ? left : 0 )) || echo "$1"; }
run_limited() {  # run_limited SECONDS cmd...: timeout, or skip when the budget is spent
  local s; s=$(limit "$1"); shift
  if (( s <= 5 )); then echo "skipped: device budget spent" >&2; return 124; fi
  timeout "$s" "$@"
}
has_step() { [[ " $STEPS " == *" $1 "* ]]; }
SUMMARY=$WORK/summary.txt
note() { echo "$*" | tee -a "$SUMMARY"; }

BIN=${MOE_EP_DEVICE_BIN:-.device-bin}
if [[ -x "$BIN/moe_ep_cuda_tests" && -x "$BIN/moe_ep" ]]; then
  export LD_LIBRARY_PATH="$PWD/$BIN:${LD_LIBRARY_PATH:-}"
  TESTS=$BIN/moe_ep_cuda_tests CLI=$BIN/moe_ep
  note "binaries: $BIN ($(cat "$BIN/COMMIT" 2>/dev/null | tr '\n' ' '))"
else
  note "binaries: building build-cuda (no $BIN)"
  cmake -S . -B build-cuda -G Ninja -DMOE_EP_CUDA=ON > "$WORK/build.log" 2>&1 &&
    ninja -C build-cuda moe_ep_cuda_tests moe_ep_cli >> "$WORK/build.log" 2>&1 ||
    { note "build failed (see build.log)"; tail -30 "$WORK/build.log"; }
  TESTS=build-cuda/tests/moe_ep_cuda_tests CLI=build-cuda/moe_ep
fi
# NCCL: the binaries open libnccl.so.2 at run time (dlopen); the device's PyTorch ships one.
NCCL_LIB=$(python3 -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null)
[[ -n "$NCCL_LIB" && -d "$NCCL_LIB" ]] && export LD_LIBRARY_PATH="$NCCL_LIB:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}  # never NVLink multicast
note "nccl: lib ${NCCL_LIB:-none}; torch.cuda.nccl.version() = $(python3 -c 'import torch; print(".".join(map(str, torch.cuda.nccl.version())))' 2>&1 | tail -1); $("$CLI" info 2>/dev/null | grep '^nccl:')"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem \
  --format=csv,noheader > "$WORK/gpu.txt" 2>&1
note "gpu: $(cat "$WORK/gpu.txt")"
note "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)  date: $(date -u +%Y-%m-%dT%H:%MZ)"

# 1. GPU tests, one process per group (a device fault in one group cannot hide the others).
if has_step tests; then
  groups=("Sm90Kernels.*:Sm90Fp4*:Sm90WeightLayout*:Recipes/Sm90WeightLayout*:Sm90Plan*:Sm90LayerErrors*"
          "Recipes/Sm90LayerTiny.*/0" "Recipes/Sm90LayerTiny.*/1" "Sm90FlashMxfp4.*" "Sm90FlashNvfp4.*"
          "Weights/Sm90Decode.*:Recipes/Sm90DecodeFlash.*:Sm90DecodeSplit.*:Sm90DecodeWgmma.*:Sm90OneToken.*" "Recipes/EpSimOneGpu.*" "EpNcclWorldOfOne.*"
          "Sm90SharedExpert*:Recipes/Sm90LayerSharedExpert.*:Sm90Routing*:Sm90RoutingStage*:Sm90LayerChain*"
          "Sm90Config*:Sm90RsCodec*:Sm90WgmmaKernels.*:Sm90WgmmaLayer.*:Kernels/Sm90WgmmaFlashLayer.*"
          "Sm90Nvfp4Kernels.*:Sm90SharedExpertLayout*:Sm90Sanitizer.*"
          "Sm90LayerMxfp4.*:Sm90RouteBounds.*:*Sm90WeightPrep*:EpSimBootstrap.*:EpSimHost.*:EpSimFaults.*")
  # MOE_EP_DEVICE_TEST_GROUPS="g1;g2": only these gtest filters.
  [[ -n "${MOE_EP_DEVICE_TEST_GROUPS:-}" ]] && IFS=';' read -r -a groups <<< "$MOE_EP_DEVICE_TEST_GROUPS"
  : > "$WORK/tests.log"
  for i in "${!groups[@]}"; do
    run_limited "${MOE_EP_DEVICE_GROUP_TIMEOUT:-240}" "$TESTS" --gtest_filter="${groups[$i]}" --gtest_output=xml:"$WORK/gtest_$i.xml" \
      > "$WORK/tests_$i.log" 2>&1
    rc=$?
    cat "$WORK/tests_$i.log" >> "$WORK/tests.log"
    note "tests ${groups[$i]}: rc=$rc passed=$(grep -c "^\[       OK \]" "$WORK/tests_$i.log")" \
         "failed=$(grep -c "^\[  FAILED  \].*(" "$WORK/tests_$i.log")" \
         "skipped=$(grep -c "^\[  SKIPPED \].*(" "$WORK/tests_$i.log")  ($(elapsed) s)"
  done
  grep -E "^\[ sm90 " "$WORK/tests.log" > "$WORK/errors.txt"
  grep "^\[  FAILED  \].*(" "$WORK/tests.log" | sed 's/^/  /' | tee -a "$SUMMARY"
fi

# 2. compute-sanitizer on the small layer case (both recipes, every GEMM family) and the quantizer kernel.
if has_step sanitizer; then
  for tool in memcheck racecheck synccheck; do
    run_limited 150 compute-sanitizer --tool "$tool" --error-exitcode 86 "$TESTS" \
      --gtest_filter='Sm90Sanitizer.*:*SmallCaseForSanitizers*:Sm90Kernels.Q8*' > "$WORK/sanitizer_$tool.log" 2>&1
    rc=$?
    note "sanitizer $tool: rc=$rc ($( grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$WORK/sanitizer_$tool.log" | tail -1 ))  ($(elapsed) s)"
  done
fi

# 3. moe_ep run on the GPU, checked against the CPU backend.
if has_step run; then
  for args in "--preset tiny --backend mxfp4" "--preset tiny --backend nvfp4" \
              "--preset deepseek-v4-flash --backend mxfp4 -T 256 --check-rows 32"; do
    run_limited 150 "$CLI" run --device cuda $args > "$WORK/run.log.tmp" 2>&1
    rc=$?
    cat "$WORK/run.log.tmp" >> "$WORK/run.log"
    note "run $args: rc=$rc $(grep -iE "check" "$WORK/run.log.tmp" | tail -1 | tr -s ' ')"
  done
fi

# 3b. Expert parallelism on the GPU: R ranks simulated on this GPU, the NCCL launcher with one
# rank, the refusal of more ranks than GPUs, and the EP bench (layer time, dispatch/combine GB/s).
if has_step ep; then
  : > "$WORK/ep.log"
  for args in "--preset tiny --backend mxfp4 --ranks 8 -T 100 --simulate-ranks-on-one-gpu" \
              "--preset tiny --backend nvfp4 --ranks 4 -T 77 --holes 0.2 --simulate-ranks-on-one-gpu" \
              "--preset tiny --backend mxfp4 --ranks 2 -T 0 --simulate-ranks-on-one-gpu" \
              "--preset deepseek-v4-flash --backend mxfp4 --ranks 8 -T 128 --check-rows 64 --simulate-ranks-on-one-gpu" \
              "--preset tiny --backend mxfp4 --ranks 1 -T 64 --nccl" \
              "--preset tiny --ranks 4 -T 8"; do
    run_limited 150 "$CLI" run --device cuda --timeout-ms 20000 $args > "$WORK/ep.log.tmp" 2>&1
    rc=$?
    cat "$WORK/ep.log.tmp" >> "$WORK/ep.log"
    note "ep run $args: rc=$rc $(grep -iE "check:|result|error|rel_err" "$WORK/ep.log.tmp" | tail -2 | tr -s ' ' | tr '\n' ' ' | cut -c1-400)"
  done
  for R in ${MOE_EP_EP_BENCH_RANKS:-8}; do
    run_limited 200 "$CLI" bench --device cuda --preset deepseek-v4-flash --ranks "$R" \
      --simulate-ranks-on-one-gpu --tokens "${MOE_EP_EP_BENCH_TOKENS:-1,128,4096}" --iters 10 --timeout-ms 20000 \
      --csv "$WORK/bench_ep_R$R.csv" > "$WORK/bench_ep_R$R.log" 2>&1
    note "ep bench R=$R: rc=$? ($(elapsed) s)"
    sed 's/^/  /' "$WORK/bench_ep_R$R.log" | tail -6 >> "$SUMMARY"
  done
fi

# 3c. The stages around the routed experts (issue 13): the router, EPLB remap and the shared
# expert inside each layer (second stream, added in the combine), on one GPU and on simulated
# ranks, checked against the CPU layer; then their per-stage times in an 8-layer graph.
if has_step stages; then
  : > "$WORK/stages.log"
  for args in "run --preset tiny --layers 2 --router --eplb-redundant 4 --shared-expert -T 100" \
              "run --preset deepseek-v4-flash --layers 2 --router --eplb-redundant 8 --shared-expert -T 1" \
              "run --preset deepseek-v4-flash --shared-expert -T 2048 --check-rows 32" \
              "run --preset tiny --ranks 4 -T 70 --shared-expert --simulate-ranks-on-one-gpu" \
              "run --preset deepseek-v4-flash --ranks 8 -T 16 --shared-expert --check-rows 32 --simulate-ranks-on-one-gpu" \
              "run --preset tiny --ranks 4 -T 50 --router --hash-layers 1 --eplb-redundant 4 --simulate-ranks-on-one-gpu" \
              "run --preset deepseek-v4-flash --ranks 8 -T 64 --router --eplb-redundant 8 --shared-expert --check-rows 32 --simulate-ranks-on-one-gpu"; do
    run_limited 150 "$CLI" $args --device cuda --timeout-ms 20000 > "$WORK/stages.log.tmp" 2>&1
    rc=$?
    cat "$WORK/stages.log.tmp" >> "$WORK/stages.log"
    note "stages $args: rc=$rc $(grep -iE "check:|result|shared expert|error" "$WORK/stages.log.tmp" | tail -3 | tr -s ' ' | tr '\n' ' ' | cut -c1-500)"
  done
  for shared in "" "--shared-expert"; do
    run_limited 200 "$CLI" bench --device cuda --preset deepseek-v4-flash --layers 8 --router --eplb-redundant 8 \
      $shared --tokens 1,128,2048 --csv "$WORK/bench_stages${shared:+_shared}.csv" > "$WORK/bench_stages.log.tmp" 2>&1
    note "bench stages ${shared:-(no shared expert)}: rc=$? ($(elapsed) s)"
    sed 's/^/  /' "$WORK/bench_stages.log.tmp" | tail -8 >> "$SUMMARY"
  done
fi

# 4. PyTorch peers first (their fp8 rate measurement feeds the bench floor).
RATE=1400  # H200 dense FP8, unless measured below
if has_step torch; then
  PYTHONUNBUFFERED=1 run_limited 240 python3 bench/torch_peer.py --preset deepseek-v4-flash \
    --tokens "$TOKENS" --check --fp8-rate --csv "$WORK/torch.csv" > "$WORK/torch.log" 2>&1
  note "torch peers: rc=$? ($(elapsed) s); $(grep -E "check|dense fp8" "$WORK/torch.log" | tr '\n' ';')"
  measured=$(grep -oP 'dense fp8 .*: \K[0-9]+(?= TFLOP/s)' "$WORK/torch.log" | head -1)
  [[ -n "$measured" ]] && RATE=$measured && note "FP8 rate for the floor: $RATE TFLOP/s (torch._scaled_mm, measured now)"
fi

# 5. moe_ep bench on the GPU (graph replays), FP8 floor at $RATE TFLOP/s.
if has_step bench; then
  for backend in mxfp4 nvfp4; do
    variants=auto
    [[ $backend == nvfp4 ]] && variants=mma,decode  # nvfp4: both families at every T (auto takes decode up to 1536)
    run_limited 200 "$CLI" bench --device cuda --preset deepseek-v4-flash --backend "$backend" \
      --tokens "$TOKENS" --variants "$variants" --compute-tflops "$RATE" --csv "$WORK/bench_$backend.csv" \
      > "$WORK/bench_$backend.log" 2>&1
    note "bench $backend: rc=$? ($(elapsed) s)"
  done
  run_limited 60 "$CLI" bench --device cuda --preset tiny --tokens 1,128 --compute-tflops "$RATE" \
    --csv "$WORK/bench_tiny.csv" > "$WORK/bench_tiny.log" 2>&1
  note "bench tiny: rc=$? ($(elapsed) s)"
  if has_step pro; then
    run_limited 150 "$CLI" bench --device cuda --preset deepseek-v4-pro --tokens 1,8192 \
      --compute-tflops "$RATE" --csv "$WORK/bench_pro.csv" > "$WORK/bench_pro.log" 2>&1
    note "bench pro: rc=$? ($(elapsed) s)"
  fi
  { head -1 "$WORK/bench_mxfp4.csv" 2>/dev/null
    for f in "$WORK"/bench_*.csv; do tail -n +2 "$f"; done; } > "$WORK/bench.csv"
fi

# 6. Per-kernel device time (ncu, eager forwards, clocks left alone) of the flash mxfp4 layer.
if has_step profile; then
  for T in 1 128 2048; do
    run_limited 90 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
      "$CLI" run --device cuda --preset deepseek-v4-flash -T "$T" --no-check --eager --iters 2 \
      --warmup 0 > "$WORK/ncu_T$T.csv" 2> "$WORK/ncu_T$T.log"
    note "ncu T=$T: rc=$? ($(elapsed) s)"
    python3 - "$WORK/ncu_T$T.csv" "$T" >> "$SUMMARY" <<'PY'
import csv, sys, collections, re
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
if not rows:
    sys.exit(0)
head = rows[0]
name_i, unit_i, val_i = head.index("Kernel Name"), head.index("Metric Unit"), head.index("Metric Value")
scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}
times = collections.defaultdict(list)
for r in rows[1:]:
    m = re.search(r"sm90_\w+", r[name_i]) or re.search(r"\w+_kernel\w*", r[name_i])
    times[m.group(0) if m else r[name_i][:40]].append(float(r[val_i].replace(",", "")) * scale.get(r[unit_i], 1.0))
parts = [f"{k} {sum(v) / len(v):.1f}" for k, v in times.items()]
total = sum(sum(v) / len(v) for v in times.values())
print(f"  kernels T={sys.argv[2]} (us per launch, mean): " + ", ".join(parts) + f"; sum {total:.1f}")
PY
  done
fi

# Table: moe_ep (mxfp4, nvfp4) next to the torch peers, per T.
python3 - "$WORK" >> "$SUMMARY" <<'PY'
import csv, os, sys
w = sys.argv[1]
rows = {}
def load(path):
    return list(csv.DictReader(open(path))) if os.path.exists(path) else []
for r in load(os.path.join(w, "bench.csv")):
    rows.setdefault((r["preset"], int(r["tokens"])), {})[r["backend"]] = r
for r in load(os.path.join(w, "torch.csv")):
    if r["peer"] != "fp8-scaled-mm-rate":
        rows.setdefault((r["preset"], int(r["tokens"])), {})["torch " + r["peer"]] = r
print(f"\n{'preset':<18} {'T':>5} {'mxfp4 us':>10} {'floor us':>9} {'of floor':>8} {'TFLOP/s':>8} "
      f"{'nvfp4 us':>10} {'torch bf16':>10} {'torch fp8':>10}")
for (preset, t), d in sorted(rows.items()):
    mx, nv = d.get("mxfp4"), d.get("nvfp4")
    b16, f8 = d.get("torch bf16"), d.get("torch fp8-rowwise")
    f = lambda r, k: f"{float(r[k]):.1f}" if r and r.get(k) else "-"
    frac = f"{100 * float(mx['fraction_of_floor']):.1f}%" if mx else "-"
    tfl = f"{float(mx['tflops']):.1f}" if mx else "-"
    print(f"{preset:<18} {t:>5} {f(mx, 'time_us'):>10} {f(mx, 'floor_us'):>9} {frac:>8} {tfl:>8} "
          f"{f(nv, 'time_us'):>10} {f(b16, 'time_us'):>10} {f(f8, 'time_us'):>10}")
PY
note "total $(elapsed) s"

cp "$SUMMARY" "$OUT/summary.txt"
[[ -f "$WORK/bench.csv" ]] && cp "$WORK/bench.csv" "$OUT/bench.csv"
[[ -f "$WORK/torch.csv" ]] && cp "$WORK/torch.csv" "$OUT/torch.csv"
[[ -f "$WORK/errors.txt" ]] && cp "$WORK/errors.txt" "$OUT/errors.txt"
ls "$WORK"/bench_ep_R*.csv >/dev/null 2>&1 && cat "$WORK"/bench_ep_R*.csv > "$OUT/bench_ep.csv"
tar -czf "$OUT/logs.tar.gz" -C "$WORK" . 2>/dev/null
echo
echo "==== moe_ep device summary ===="
cat "$SUMMARY"
