#!/usr/bin/env python3
"""bench/RESULTS.md is exactly what bench/summarize.py makes of bench/results/*.csv, and the
summary accepts `moe_ep bench --csv`, `bench/torch_peer.py --csv`, `moe_ep_weight_stream` and
`bench/numerics/promotion_groups.py` files with gpu, date and commit columns. Standard library only; run by ctest as bench_results_summary."""

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUMMARIZE = ROOT / "bench" / "summarize.py"

BENCH_HEADER = ("gpu,date,commit,preset,backend,implementation,device,weight_format,tokens,"
                "valid_slots,unique_experts,time_us,min_us,weight_bytes,flops,memory_floor_us,"
                "compute_floor_us,floor_us,fraction_of_floor,tflops,bandwidth_gbps,compute_tflops,"
                "compute_rate_kind,variant")
BENCH_ROW = ("NVIDIA H100 80GB HBM3,2099-01-01,abc1234,tiny,mxfp4,cuda-sm90,cuda:0,mxfp4,128,512,16,"
             "19.500,19.000,1048576,1.00663e+08,0.350,0.100,0.350,0.01795,5.16220,3000.00,"
             "1000.0000,fp8-measured,auto")
STREAM_HEADER = "gpu,date,commit,mechanism,threads,depth,alu,units,time_us,gbps,copy_gbps"
STREAM_ROW = "NVIDIA H100 80GB HBM3,2099-01-01,abc1234,bulk ring 2 x 4 steps,768,8,16,1536,20.00,2674,3010"
NUMERICS_HEADER = "gpu,date,commit,distribution,k_per_promotion,rel_err_vs_recipe,rel_err_recipe,zeroed"
NUMERICS_ROW = "cpu (numpy),2099-01-01,abc1234,student-t3,128,2.430e-07,2.706e-02,2.29e-05"
PEER_HEADER = "gpu,date,commit,preset,peer,tokens,time_us,tflops,rel_err"
PEER_ROWS = ["NVIDIA H100 80GB HBM3,2099-01-01,abc1234,dense-8192,fp8-scaled-mm-rate,0,1.0,1000,",
             "NVIDIA H100 80GB HBM3,2099-01-01,abc1234,tiny,bf16,128,99.5,1.0,1e-3"]


def run(*args):
    return subprocess.run([sys.executable, str(SUMMARIZE), *args], capture_output=True, text=True)


def fail(message):
    print(f"FAILED: {message}")
    sys.exit(1)


def main():
    committed = (ROOT / "bench" / "RESULTS.md").read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # 1. Regenerated twice from the committed CSVs: byte for byte the committed file.
        for i in range(2):
            out = tmp / f"RESULTS{i}.md"
            r = run("--output", str(out))
            if r.returncode != 0:
                fail(f"summarize.py exited {r.returncode}: {r.stderr}")
            if out.read_bytes() != committed:
                fail("bench/RESULTS.md differs from what bench/summarize.py makes of bench/results/; "
                     "run python3 bench/summarize.py and commit the result")
        if run("--check").returncode != 0:
            fail("summarize.py --check does not accept the committed bench/RESULTS.md")

        # 2. A `moe_ep bench --csv` file and a torch_peer.py file with gpu/date/commit drop in.
        results = tmp / "results"
        results.mkdir()
        (results / "bench.csv").write_text(BENCH_HEADER + "\n" + BENCH_ROW + "\n")
        (results / "peer.csv").write_text(PEER_HEADER + "\n" + "\n".join(PEER_ROWS) + "\n")
        out = tmp / "dropin.md"
        r = run("--results", str(results), "--output", str(out))
        if r.returncode != 0:
            fail(f"summarize.py refused bench --csv rows: {r.stderr}")
        text = out.read_text(encoding="utf-8")
        expected_row = "| 128 | 19.500 | 1.8% | 5.16220 | 99.5 | 2099-01-01 | abc1234 |  |"
        if "## H100" not in text or "### tiny, mxfp4" not in text or expected_row not in text:
            fail("the bench --csv row is missing from the summary:\n" + text)
        (results / "weight_stream.csv").write_text(STREAM_HEADER + "\n" + STREAM_ROW + "\n")
        r = run("--results", str(results), "--output", str(out))
        stream_row = "| 16 | bulk ring 2 x 4 steps | 768 | 8 | 1536 | 20.00 | 2674 | 89% | 2099-01-01 | abc1234 |"
        if r.returncode != 0 or stream_row not in out.read_text(encoding="utf-8"):
            fail(f"the weight_stream row is missing from the summary: {r.stderr}\n" + out.read_text(encoding="utf-8"))
        (results / "promotion_groups.csv").write_text(NUMERICS_HEADER + "\n" + NUMERICS_ROW + "\n")
        r = run("--results", str(results), "--output", str(out))
        numerics_row = "| student-t3 | 128 | 2.430e-07 | — | 2.706e-02 | 2.29e-05 | 2099-01-01 | abc1234 |"
        if r.returncode != 0 or numerics_row not in out.read_text(encoding="utf-8"):
            fail(f"the promotion_groups row is missing from the summary: {r.stderr}\n" + out.read_text(encoding="utf-8"))
        # scripts/sass_loops.py --csv rows.
        (results / "sass_k_step.csv").write_text(
            "gpu,date,commit,kernel,wgmma_shape,k_step_instructions,wgmma,ffma,lds\n"
            'sm_90a SASS,2099-01-01,abc1234,"sm90_rs_kernel<Cfg, Epi, Gemm1Params>",64x64x32,185,4,32,16\n')
        r = run("--results", str(results), "--output", str(out))
        sass_row = "| `sm90_rs_kernel<Cfg, Epi, Gemm1Params>` | 64x64x32 | 185 | 4 | 32 | 16 | 2099-01-01 | abc1234 |"
        if r.returncode != 0 or sass_row not in out.read_text(encoding="utf-8"):
            fail(f"the sass_loops row is missing from the summary: {r.stderr}\n" + out.read_text(encoding="utf-8"))
        # The per-group quantization column, where the file has it.
        (results / "promotion_groups.csv").write_text(
            NUMERICS_HEADER + ",rel_err_direct_vs_recipe\n" + NUMERICS_ROW + ",2.426e-07\n")
        r = run("--results", str(results), "--output", str(out))
        numerics_row = "| student-t3 | 128 | 2.430e-07 | 2.426e-07 | 2.706e-02 | 2.29e-05 | 2099-01-01 | abc1234 |"
        if r.returncode != 0 or numerics_row not in out.read_text(encoding="utf-8"):
            fail(f"the per-group quantization column is missing from the summary: {r.stderr}\n" +
                 out.read_text(encoding="utf-8"))

        # 3. A file without gpu/date/commit is refused, naming the columns.
        (results / "bad.csv").write_text("preset,backend,tokens,time_us\ntiny,mxfp4,1,10\n")
        r = run("--results", str(results), "--output", str(tmp / "bad.md"))
        if r.returncode == 0 or "gpu" not in r.stderr:
            fail(f"a CSV without gpu/date/commit was accepted: rc {r.returncode}, {r.stderr}")
    print("bench/RESULTS.md matches bench/results/*.csv")


if __name__ == "__main__":
    main()
