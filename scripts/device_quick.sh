set -u
export LD_LIBRARY_PATH=$PWD/.device-bin:$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')/lib:${LD_LIBRARY_PATH:-}
B=.device-bin; T=$B/moe_ep_cuda_tests
echo "commit $(cat $B/COMMIT | tr '\n' ' ')"
run_group() { timeout $1 $T --gtest_filter="$2" > $OUT/tests_$3.log 2>&1; echo "tests $3 rc=$? ok=$(grep -c '^\[       OK' $OUT/tests_$3.log) failed=$(grep -c '^\[  FAILED  \].*(' $OUT/tests_$3.log) skipped=$(grep -c '^\[  SKIPPED \].*(' $OUT/tests_$3.log)"; grep '^\[  FAILED  \].*(' $OUT/tests_$3.log | head; }
run_group 120 'Sm90*:Recipes/Sm90*' sm90
run_group 90 '*Ep*:*Nccl*' ep
run_group 60 '*Wgmma*:*wgmma*' wgmma
grep -h "^\[ sm90" $OUT/tests_*.log | sort | uniq | head -60 > $OUT/errors.txt
for g in mma wgmma; do MOE_EP_SM90_GEMM=$g timeout 100 $B/moe_ep bench --device cuda --preset deepseek-v4-flash --tokens 1,128,2048,8192 --csv $OUT/bench_$g.csv > $OUT/bench_$g.log 2>&1; echo "bench $g rc=$?"; grep -E "^ +[0-9]+ " $OUT/bench_$g.log; done
timeout 30 $B/moe_ep bench --device cuda --preset tiny --tokens 1,128 > $OUT/bench_tiny.log 2>&1; grep -E "^ +[0-9]+ " $OUT/bench_tiny.log
PYTHONUNBUFFERED=1 timeout 100 python3 bench/torch_peer.py --preset deepseek-v4-flash --tokens 1,128,2048,8192 --fp8-rate --csv $OUT/torch.csv > $OUT/torch.log 2>&1; echo "torch rc=$?"; tail -8 $OUT/torch.log
