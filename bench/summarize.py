#!/usr/bin/env python3
"""Writes bench/RESULTS.md from the CSV files of record in bench/results/.

    python3 bench/summarize.py            # rewrite bench/RESULTS.md
    python3 bench/summarize.py --check    # exit 1 when bench/RESULTS.md is not what the CSVs give

Python 3 standard library only; the output depends only on the CSV files (read in name order),
so it is byte for byte reproducible.

These kinds of CSV file are read, told apart by their header:

  layer rows  gpu,date,commit,preset,recipe,tokens,variant,time_us,floor_us,fraction_of_floor,
              tflops,source,note           (the files of record; extra columns are ignored)
  bench rows  the header of `moe_ep bench --csv` (preset,backend,...,variant) with the columns
              gpu,date,commit added: dropped into bench/results/ as they are
  peer rows   the header of `bench/torch_peer.py --csv` (preset,peer,tokens,time_us,tflops,
              rel_err) with gpu,date,commit added
  stage rows  gpu,date,commit,preset,stage,tokens,layers,time_us,floor_us,source,note
  stream rows the output of bench/micro/weight_stream.cu (gpu,date,commit,mechanism,threads,
              depth,alu,units,time_us,gbps,copy_gbps)
  sass     rows the output of scripts/sass_loops.py --csv (gpu,date,commit,kernel,wgmma_shape,
              k_step_instructions,wgmma,ffma,lds): a consumer warp's instructions per k step
  numerics rows the output of bench/numerics/promotion_groups.py (gpu,date,commit,distribution,
              k_per_promotion,rel_err_vs_recipe,rel_err_recipe,zeroed[,rel_err_direct_vs_recipe])

For each (gpu, preset, recipe, T, variant) the newest row wins: the later date, and on the same
date the row read last (files in name order, rows in file order).
"""

import argparse
import csv
import io
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# H, I, K of the presets (src/testing/presets.cpp), for TFLOP/s where a row does not record it.
PRESET_SHAPES = {
    "deepseek-v4-flash": (4096, 2048, 6),
    "deepseek-v4-pro": (7168, 3072, 6),
    "tiny": (256, 128, 4),
}
PRESET_ORDER = ["deepseek-v4-flash", "deepseek-v4-pro", "tiny"]
RECIPE_ORDER = ["mxfp4", "nvfp4"]
PEER_NAMES = {"bf16": "torch-bf16", "fp8-rowwise": "torch-fp8", "fp8": "torch-fp8"}
PEER_ORDER = ["torch-bf16", "torch-fp8"]
RUN_COLUMNS = ("gpu", "date", "commit")


class InputError(Exception):
    pass


def gpu_name(text):
    """'NVIDIA H100 80GB HBM3' -> 'H100'; other names stay as given."""
    for short in ("H100", "H200", "B200", "GB200"):
        if short in text:
            return short
    return text.strip()


def order_key(value, order):
    return (order.index(value), "") if value in order else (len(order), value)


def read_rows(results_dir):
    layers, stages, streams, numerics, sass = [], [], [], [], []
    files = sorted(results_dir.glob("*.csv"))
    if not files:
        raise InputError(f"no CSV files in {results_dir}")
    seq = 0
    for path in files:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            missing = [c for c in RUN_COLUMNS if c not in header]
            if missing:
                raise InputError(f"{path.name}: missing column(s) {', '.join(missing)}; every row "
                                 "must name its gpu, date and commit")
            if "k_per_promotion" in header:
                kind = "numerics"
            elif "k_step_instructions" in header:
                kind = "sass"
            elif "mechanism" in header:
                kind = "stream"
            elif "stage" in header:
                kind = "stage"
            elif "recipe" in header:
                kind = "layer"
            elif "backend" in header:
                kind = "bench"
            elif "peer" in header:
                kind = "peer"
            else:
                raise InputError(f"{path.name}: header {header} is none of the known formats")
            for line, row in enumerate(reader, start=2):
                seq += 1
                where = f"{path.name}:{line}"
                for c in RUN_COLUMNS:
                    if not (row.get(c) or "").strip():
                        raise InputError(f"{where}: empty {c}")
                if kind == "sass":
                    sass.append({"date": row["date"].strip(), "commit": row["commit"].strip(), "seq": seq,
                                 **{c: row[c].strip() for c in ("kernel", "wgmma_shape", "k_step_instructions",
                                                                "wgmma", "ffma", "lds")}})
                    int(row["k_step_instructions"])  # must parse
                    continue
                if kind == "numerics":
                    numerics.append({"date": row["date"].strip(), "commit": row["commit"].strip(), "seq": seq,
                                     **{c: row[c].strip() for c in ("distribution", "k_per_promotion",
                                                                    "rel_err_vs_recipe", "rel_err_recipe",
                                                                    "zeroed")},
                                     "direct": (row.get("rel_err_direct_vs_recipe") or "").strip() or "—"})
                    float(row["rel_err_vs_recipe"]), int(row["k_per_promotion"])  # must parse
                    continue
                if kind == "stream":
                    streams.append({"gpu": gpu_name(row["gpu"]), "date": row["date"].strip(),
                                    "commit": row["commit"].strip(), "seq": seq,
                                    **{c: row[c].strip() for c in ("mechanism", "threads", "depth", "alu",
                                                                   "units", "time_us", "gbps", "copy_gbps")}})
                    float(row["gbps"]), float(row["copy_gbps"])  # must parse
                    continue
                base = {
                    "gpu": gpu_name(row["gpu"]),
                    "date": row["date"].strip(),
                    "commit": row["commit"].strip(),
                    "preset": row["preset"].strip(),
                    "tokens": int(row["tokens"]),
                    "time_us": row["time_us"].strip(),
                    "seq": seq,
                    "where": where,
                }
                float(base["time_us"])  # must parse
                if kind == "stage":
                    base.update(stage=row["stage"].strip(), layers=int(row.get("layers") or 1),
                                floor_us=(row.get("floor_us") or "").strip(),
                                source=(row.get("source") or "").strip(),
                                note=(row.get("note") or "").strip())
                    stages.append(base)
                    continue
                if kind == "layer":
                    recipe, variant = row["recipe"].strip(), row["variant"].strip() or "auto"
                    source = (row.get("source") or "").strip()
                    note = (row.get("note") or "").strip()
                    fraction = (row.get("fraction_of_floor") or "").strip()
                    tflops = (row.get("tflops") or "").strip()
                    floor = (row.get("floor_us") or "").strip()
                elif kind == "bench":
                    recipe, variant = row["backend"].strip(), (row.get("variant") or "").strip() or "auto"
                    source, note = "moe_ep bench", ""
                    fraction = row["fraction_of_floor"].strip()
                    tflops = row["tflops"].strip()
                    floor = row["floor_us"].strip()
                else:  # peer
                    if base["tokens"] <= 0:
                        continue  # the dense-rate line of torch_peer.py
                    peer = row["peer"].strip()
                    recipe, variant = "", PEER_NAMES.get(peer, "torch-" + peer)
                    source, note, fraction, floor = "bench/torch_peer.py", "", "", ""
                    tflops = (row.get("tflops") or "").strip()
                if variant.startswith("torch-"):
                    recipe = ""
                base.update(recipe=recipe, variant=variant, source=source, note=note,
                            fraction=fraction, tflops=tflops, floor_us=floor)
                layers.append(base)
    return layers, stages, streams, numerics, sass


def newest(rows, key):
    best = {}
    for r in rows:
        k = key(r)
        if k not in best or (r["date"], r["seq"]) >= (best[k]["date"], best[k]["seq"]):
            best[k] = r
    return best


def derived_tflops(row):
    if row["tflops"]:
        return row["tflops"]
    shape = PRESET_SHAPES.get(row["preset"])
    t = float(row["time_us"])
    if shape is None or t <= 0:
        return ""
    H, I, K = shape
    flops = 2.0 * row["tokens"] * K * 3 * H * I
    return f"{flops / t * 1e-6:.1f}"


def fraction_text(row):
    if row["fraction"]:
        return f"{float(row['fraction']) * 100:.1f}%"
    if row["floor_us"]:
        return f"{float(row['floor_us']) / float(row['time_us']) * 100:.1f}%"
    return ""


def cell(text):
    return text.replace("|", "\\|")


def table(header, lines):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(c) for c in line) + " |" for line in lines]
    return out


def stream_section(rows):
    best = newest(rows, lambda r: (r["mechanism"], r["threads"], r["depth"], r["alu"], r["units"]))
    srows = sorted(best.values(), key=lambda r: (int(r["alu"]), r["mechanism"], int(r["threads"]), int(r["depth"])))
    out = ["### Weight streaming at T = 1 (`bench/micro/weight_stream.cu`)", "",
           "deepseek-v4-flash's W13 of one token (51 MiB) streamed by one block per SM with `alu`",
           "rounds of about 8 integer instructions per k step and lane standing in for the decode; *of copy*",
           "is the bandwidth over that of a device-to-device copy in the same run.", ""]
    lines = [[r["alu"], r["mechanism"], r["threads"], r["depth"], r["units"], r["time_us"], r["gbps"],
              f"{float(r['gbps']) / float(r['copy_gbps']) * 100:.0f}%", r["date"], r["commit"]] for r in srows]
    out += table(["alu", "mechanism", "threads", "k steps in flight", "units", "µs", "GB/s", "of copy", "date",
                  "commit"], lines)
    out.append("")
    return out


def numerics_section(rows):
    best = newest(rows, lambda r: (r["distribution"], r["k_per_promotion"]))
    nrows = sorted(best.values(), key=lambda r: (r["distribution"], int(r["k_per_promotion"])))
    out = ["## Promotion groups (CPU emulation, `bench/numerics/promotion_groups.py`)", "",
           "GEMM 1 of deepseek-v4-flash's shape (K = 4096) in float64 with the recipe's Q8 activations",
           "re-encoded so that the k32 blocks of each group of *k per promotion* share the group's largest",
           "scale: the error that re-encoding adds against the recipe's GEMM (the tensor cores' own k-sum",
           "precision not emulated), beside the recipe's own error against unquantized activations;",
           "*quantized per group*: the activations quantized once at the group's largest scale instead.", ""]
    lines = [[r["distribution"], r["k_per_promotion"], r["rel_err_vs_recipe"], r["direct"], r["rel_err_recipe"],
              r["zeroed"], r["date"], r["commit"]] for r in nrows]
    out += table(["activations", "k per promotion", "rel. error vs the recipe (re-encoded)",
                  "(quantized per group)", "recipe vs unquantized", "codes zeroed", "date", "commit"], lines)
    out.append("")
    return out


def sass_section(rows):
    best = newest(rows, lambda r: (r["kernel"], r["wgmma_shape"]))
    srows = sorted(best.values(), key=lambda r: (r["kernel"], r["wgmma_shape"]))
    out = ["## SASS: a consumer warp's instructions per k step (`scripts/sass_loops.py --csv`)", "",
           "Each innermost loop around a kernel's wgmma, from the sm_90a SASS of the build: one iteration",
           "is one pass of a consumer warp's mainloop (the instructions it issues; of them wgmma, FFMA and",
           "LDS). The wgmma count times the shape's K is the k that one pass covers (128 for the",
           "register-operand and FP8 forms, 512 for the decode forms). The warps of all warpgroups share",
           "each SM sub-partition's one issue slot per clock.", ""]
    lines = [[f"`{r['kernel']}`", r["wgmma_shape"], r["k_step_instructions"], r["wgmma"], r["ffma"], r["lds"],
              r["date"], r["commit"]] for r in srows]
    out += table(["kernel", "wgmma", "instructions", "wgmma", "FFMA", "LDS", "date", "commit"], lines)
    out.append("")
    return out


def render(layers, stages, streams, numerics=(), sass=()):
    out = [
        "# moe_ep: measured figures",
        "",
        "<!-- Generated by bench/summarize.py from bench/results/*.csv; do not edit by hand. -->",
        "This file is generated by `bench/summarize.py` from the CSV files of record in",
        "`bench/results/`. To add figures, add rows there (or drop in a `moe_ep bench --csv` file",
        "with its gpu, date and commit columns) and run `python3 bench/summarize.py`; ctest's",
        "`bench_results_summary` checks that this file matches the CSVs. How the figures are",
        "measured: `docs/benchmarks.md`. Earlier figures and their analysis are in the git history",
        "of this file.",
        "",
        "Layer times are CUDA graph replays of one forward at world size 1 on synthetic weights and",
        "inputs (no `-1` holes), median, µs. *Of floor* is the roofline floor",
        "`max(unique expert weight bytes / bandwidth, FLOPs / rate)` measured in the same run over the",
        "time. TFLOP/s counts `2 T K (3 H I)` FLOPs. Each row names the date and commit of its run;",
        "compare figures only within one GPU, and best within one run.",
        "",
    ]
    gpus = sorted({r["gpu"] for r in layers} | {r["gpu"] for r in stages} | {r["gpu"] for r in streams})
    for gpu in gpus:
        out += [f"## {gpu}", ""]
        g_layers = [r for r in layers if r["gpu"] == gpu]
        best = newest(g_layers, lambda r: (r["preset"], r["recipe"], r["tokens"], r["variant"]))
        rows = list(best.values())
        peers = [r for r in rows if r["variant"].startswith("torch-")]
        ours = [r for r in rows if not r["variant"].startswith("torch-")]
        combos = sorted({(r["preset"], r["recipe"]) for r in ours},
                        key=lambda c: (order_key(c[0], PRESET_ORDER), order_key(c[1], RECIPE_ORDER)))
        for preset, recipe in combos:
            out += [f"### {preset}, {recipe}", ""]
            preset_peers = [p for p in peers if p["preset"] == preset]
            peer_names = sorted({p["variant"] for p in preset_peers},
                                key=lambda v: order_key(v, PEER_ORDER))
            auto = sorted((r for r in ours if (r["preset"], r["recipe"], r["variant"]) ==
                           (preset, recipe, "auto")), key=lambda r: r["tokens"])
            other_runs = set()
            lines = []
            for r in auto:
                line = [str(r["tokens"]), r["time_us"], fraction_text(r), derived_tflops(r)]
                for name in peer_names:
                    p = next((p for p in preset_peers
                              if p["variant"] == name and p["tokens"] == r["tokens"]), None)
                    if p is None:
                        line.append("")
                    elif (p["date"], p["commit"]) == (r["date"], r["commit"]):
                        line.append(p["time_us"])
                    else:
                        line.append(p["time_us"] + " *")
                        other_runs.add((p["date"], p["commit"]))
                line += [r["date"], r["commit"], r["note"]]
                lines.append(line)
            if lines:
                header = ["T", "µs", "of floor", "TFLOP/s"] + [f"{n} µs" for n in peer_names]
                out += table(header + ["date", "commit", "note"], lines)
                out.append("")
                if other_runs:
                    runs = ", ".join(f"{d} {c}" for d, c in sorted(other_runs))
                    out += [f"\\* the peer's figure comes from another run of the same GPU ({runs}).", ""]
            pinned = sorted((r for r in ours if (r["preset"], r["recipe"]) == (preset, recipe)
                             and r["variant"] != "auto"), key=lambda r: (r["tokens"], r["variant"]))
            if pinned:
                out += ["Kernels pinned by `--kernel` / `--variants`:", ""]
                out += table(["T", "variant", "µs", "of floor", "date", "commit", "note"],
                             [[str(r["tokens"]), r["variant"], r["time_us"], fraction_text(r),
                               r["date"], r["commit"], r["note"]] for r in pinned])
                out.append("")
        g_stages = [r for r in stages if r["gpu"] == gpu]
        if g_stages:
            best_s = newest(g_stages, lambda r: (r["preset"], r["stage"], r["layers"], r["tokens"]))
            srows = sorted(best_s.values(), key=lambda r: (order_key(r["preset"], PRESET_ORDER),
                                                           r["stage"], r["layers"], r["tokens"]))
            out += ["### Shared expert, routing stage and layer chains", ""]
            lines = []
            for r in srows:
                ratio = (f"{float(r['time_us']) / float(r['floor_us']):.2f}x"
                         if r["floor_us"] else "")
                lines.append([r["preset"], r["stage"], str(r["tokens"]), str(r["layers"]),
                              r["time_us"], r["floor_us"], ratio, r["date"], r["commit"],
                              f"`{r['source']}`" + (f"; {r['note']}" if r["note"] else "")])
            out += table(["preset", "what", "T", "layers in graph", "µs", "floor µs", "x floor",
                          "date", "commit", "command; note"], lines)
            out.append("")
        g_streams = [r for r in streams if r["gpu"] == gpu]
        if g_streams:
            out += stream_section(g_streams)
    if numerics:
        out += numerics_section(list(numerics))
    if sass:
        out += sass_section(list(sass))
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=str(HERE / "results"), help="folder of CSV files")
    ap.add_argument("--output", default=str(HERE / "RESULTS.md"), help="file to write")
    ap.add_argument("--check", action="store_true",
                    help="compare with --output instead of writing it; exit 1 when they differ")
    args = ap.parse_args(argv)
    try:
        layers, stages, streams, numerics, sass = read_rows(Path(args.results))
    except (InputError, KeyError, ValueError) as exc:
        print(f"summarize.py: {exc}", file=sys.stderr)
        return 2
    text = render(layers, stages, streams, numerics, sass)
    out = Path(args.output)
    if args.check:
        current = out.read_bytes().decode("utf-8") if out.exists() else None
        if current != text:
            print(f"summarize.py: {out} is not what {args.results} gives; run "
                  "python3 bench/summarize.py", file=sys.stderr)
            return 1
        return 0
    with io.open(out, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
