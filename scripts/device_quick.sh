#!/usr/bin/env bash
# One device call after scripts/device_pack.sh: the GPU test groups, then the benchmark of the
# default kernel choice next to the forced variants, the tiny and pro presets and the PyTorch
# peers. Run on the device from the repository root with .device-bin carried; logs go to $OUT.
#   MOE_EP_QUICK_STEPS="tests bench peers ncu ep ab" (default: tests bench peers)
#   MOE_EP_QUICK_BENCH: override the bench step with one line of bench calls (see bench()).
#   ab: the CLI in .device-base (an earlier commit, same libraries) against this one, alternating
#       base / new twice per preset, flash at T = MOE_EP_QUICK_AB_TOKENS (default 1,128,2048,8192)
#       and tiny at T = 1 (MOE_EP_QUICK_AB_TINY=0 leaves it out).
set -u
export LD_LIBRARY_PATH=$PWD/.device-bin:$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')/lib:${LD_LIBRARY_PATH:-}
B=.device-bin; T=$B/moe_ep_cuda_tests
STEPS=${MOE_EP_QUICK_STEPS:-tests bench peers}
echo "commit $(cat $B/COMMIT | tr '\n' ' ')"
run_group() {
  timeout $1 $T --gtest_filter="$2" > $OUT/tests_$3.log 2>&1
  echo "tests $3 rc=$? ok=$(grep -c '^\[       OK' $OUT/tests_$3.log) failed=$(grep -c '^\[  FAILED  \].*(' $OUT/tests_$3.log) skipped=$(grep -c '^\[  SKIPPED \].*(' $OUT/tests_$3.log)"
  grep '^\[  FAILED  \].*(' $OUT/tests_$3.log | head
}
bench() {  # name timeout env... -- args...
  local name=$1 limit=$2; shift 2
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" timeout $limit $B/moe_ep bench --device cuda "$@" --csv $OUT/bench_$name.csv > $OUT/bench_$name.log 2>&1
  echo "bench $name rc=$?"; grep -E "^ +[0-9]+ " $OUT/bench_$name.log
}
if [[ " $STEPS " == *" tests "* ]]; then
  run_group 240 'Sm90*:*/Sm90*' sm90
  run_group 90 '*Ep*:*Nccl*' ep
  grep -h "^\[ ep" $OUT/tests_ep.log | head -40
  grep -h "^\[ \(sm90\|decode\|wgmma\)" $OUT/tests_sm90.log | sort | uniq > $OUT/errors.txt
  grep -h "^\[ decode" $OUT/tests_sm90.log | head -40
fi
F="--preset deepseek-v4-flash"
if [[ " $STEPS " == *" bench "* && -n "${MOE_EP_QUICK_BENCH:-}" ]]; then
  eval "$MOE_EP_QUICK_BENCH"
elif [[ " $STEPS " == *" bench "* ]]; then
  bench auto 120 X=1 -- $F --tokens 1,8,32,64,128,256,512,1024,2048,8192
  bench decode 90 X=1 -- $F --kernel decode --tokens 64,128,256,512
  bench exact 100 X=1 -- $F --exact-accumulation --tokens 1,128,2048,8192
  bench v11 60 X=1 -- $F --kernel mma --no-fold --tokens 1,128
  bench tiny 40 X=1 -- --preset tiny --tokens 1,128
  bench pro 200 X=1 -- --preset deepseek-v4-pro --tokens 1,8192
fi
if [[ " $STEPS " == *" peers "* ]]; then
  PYTHONUNBUFFERED=1 timeout 100 python3 bench/torch_peer.py --preset deepseek-v4-flash --tokens 1,128,2048,8192 --fp8-rate --csv $OUT/torch.csv > $OUT/torch.log 2>&1
  echo "torch rc=$?"; tail -8 $OUT/torch.log
fi
if [[ " $STEPS " == *" ncu "* ]]; then  # device time per kernel, eager forwards, clocks left alone
  for T in ${MOE_EP_QUICK_NCU_TOKENS:-1 128 2048}; do
    timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \
      --csv $B/moe_ep run --device cuda $F -T $T --no-check --eager --iters 2 --warmup 0 > $OUT/ncu_T$T.csv 2> $OUT/ncu_T$T.log
    echo "ncu T=$T rc=$?"
    python3 - $OUT/ncu_T$T.csv <<'PY'
import csv, sys, collections, re
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
if rows:
    h = rows[0]; n, m, u, v = (h.index(k) for k in ("Kernel Name", "Metric Name", "Metric Unit", "Metric Value"))
    scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}
    acc = collections.defaultdict(list)
    for r in rows[1:]:
        k = re.search(r"sm90_\w+?_kernel|ep_\w+?_kernel|\w+_kernel", r[n]); k = k.group(0) if k else r[n][:40]
        val = float(r[v].replace(",", "")) * (scale.get(r[u], 1.0) if "duration" in r[m] else 1.0)
        acc[(k, "us" if "duration" in r[m] else "dram%")].append(val)
    print("  " + "  ".join(f"{k}[{w}]={sum(x)/len(x):.1f}" for (k, w), x in acc.items()))
PY
  done
fi
if [[ " $STEPS " == *" ep "* ]]; then  # expert parallelism simulated on the one GPU
  for spec in "8 1,128,4096 200" "2 1,128 80"; do
    set -- $spec
    timeout $3 $B/moe_ep bench --device cuda $F --ranks $1 --simulate-ranks-on-one-gpu --tokens $2 --csv $OUT/ep_R$1.csv > $OUT/ep_R$1.log 2>&1
    echo "ep bench R=$1 rc=$?"; grep -vE "^$" $OUT/ep_R$1.log | tail -8
  done
fi
if [[ " $STEPS " == *" ab "* ]]; then  # base vs new, alternating, same call
  for round in 1 2; do
    for side in base new; do
      bin=$B/moe_ep; [ $side = base ] && bin=.device-base/moe_ep
      timeout 150 $bin bench --device cuda $F --tokens ${MOE_EP_QUICK_AB_TOKENS:-1,128,2048,8192} --csv $OUT/ab_${side}_$round.csv > $OUT/ab_${side}_$round.log 2>&1
      echo "ab $side round $round rc=$?"; grep -E "^ +[0-9]+ " $OUT/ab_${side}_$round.log
      [ "${MOE_EP_QUICK_AB_TINY:-1}" = 0 ] && continue
      timeout 40 $bin bench --device cuda --preset tiny --tokens 1 > $OUT/ab_tiny_${side}_$round.log 2>&1
      echo "ab tiny $side round $round rc=$?"; grep -E "^ +[0-9]+ " $OUT/ab_tiny_${side}_$round.log
    done
  done
fi
# One archive comes back whole (the device returns only a few files per call).
(cd $OUT && tar czf quick.tar.gz --remove-files $(ls | grep -v '^quick.tar.gz$'))
