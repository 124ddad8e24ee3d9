#!/usr/bin/env python3
"""Paged MQA logits, ours against DeepGEMM, from the JSON files of the two benchmarks on one GPU.

    python3 benchmarks/logits_vs_deepgemm.py --ours logits.json [--ours logits-2.json] \
        --deepgemm deepgemm.json [--output table.md]

`--ours`: `flash-indexer bench logits ... --cold-l2 --fixed-length --json FILE` (given twice, each cell
takes the faster run). `--deepgemm`: DeepGEMM's `fp8_paged_mqa_logits` timed on the same cells, a JSON
list (or {"rows": [...]}) of objects with the fields status ("ok"), logits_dtype ("fp32" or "bf16"),
mode ("native" for next_n 1 and 2; "flattened" for next_n 3 and 4, run as next_n = 1 rows, as engines
call it), next_n, H, B, L and us_cold (cold-L2 microseconds); benchmarks/README.md describes it. Prints a
markdown table (ours / DeepGEMM (DeepGEMM / ours) per cell; >= 1.00: ours faster), the median and range
of the ratio per next_n, and, where the files hold the histogram's cells, its overhead. Where our files
carry the paged-read probe (`paged_read_us`: the cell's own KV blocks read with nothing else, in the same
harness), also DeepGEMM / that floor per next_n: the largest DeepGEMM / ours any kernel could reach."""
import argparse
import contextlib
import json
import statistics
import sys


def load_ours(paths, dtype):
    """Our best time per cell, and the paged-read floor per (B, L) where the files have it."""
    best, floor = {}, {}
    for path in paths:
        for r in json.load(open(path)):
            if r["logits"] != dtype or r.get("kv", "fp8") != "fp8":
                continue
            key = (r["next_n"], r["heads"], r["batch"], r["length"], bool(r["histogram"]))
            best[key] = min(best.get(key, float("inf")), r["us"])
            if r.get("paged_read_us"):
                bl = (r["batch"], r["length"])
                floor[bl] = min(floor.get(bl, float("inf")), r["paged_read_us"])
    return best, floor


def load_deepgemm(path, dtype):
    rows = json.load(open(path))
    rows = rows.get("rows", rows) if isinstance(rows, dict) else rows
    out = {}
    for r in rows:
        if r.get("status") != "ok" or r.get("logits_dtype") != dtype:
            continue
        if (r["mode"] == "native") != (r["next_n"] <= 2):
            continue
        out[(r["next_n"], r["H"], r["B"], r["L"])] = r["us_cold"]
    return out


def label(length):
    return f"{length // 1024}K"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ours", action="append", required=True)
    ap.add_argument("--deepgemm", required=True)
    ap.add_argument("--dtype", default="f32", help="our logits dtype (f32 or bf16; DeepGEMM's fp32 or bf16)")
    ap.add_argument("--output", default=None, metavar="FILE", help="write the table here (default: stdout)")
    args = ap.parse_args()
    with (open(args.output, "w") if args.output else contextlib.nullcontext(sys.stdout)) as out, \
            contextlib.redirect_stdout(out):
        report(args)


def report(args):
    ours, floor = load_ours(args.ours, args.dtype)
    dg = load_deepgemm(args.deepgemm, {"f32": "fp32", "bf16": "bf16"}[args.dtype])
    lengths = sorted({k[3] for k in ours})
    print("| next_n | H | B | " + " | ".join(label(x) for x in lengths) + " |")
    print("|---|---|---|" + "---|" * len(lengths))
    ratios, reachable = {}, {}
    for nn, h, b in sorted({k[:3] for k in ours}, key=lambda k: (k[0], -k[1], k[2])):
        cells = []
        for length in lengths:
            us = ours.get((nn, h, b, length, False))
            ref = dg.get((nn, h, b, length))
            if us is None:
                cells.append("")
            elif ref is None:
                cells.append(f"{us:.1f} / -")
            else:
                ratios.setdefault(nn, []).append(ref / us)
                if (b, length) in floor:
                    reachable.setdefault(nn, []).append(ref / floor[(b, length)])
                cells.append(f"{us:.1f} / {ref:.1f} ({ref / us:.2f})")
        print(f"| {nn} | {h} | {b} | " + " | ".join(cells) + " |")
    print()
    for nn, rs in sorted(ratios.items()):
        print(f"next_n {nn}: DeepGEMM / ours median {statistics.median(rs):.2f} (min {min(rs):.2f}, max {max(rs):.2f}, "
              f"{sum(r >= 1.0 for r in rs)} of {len(rs)} cells >= 1)")
    for nn, rs in sorted(reachable.items()):
        print(f"next_n {nn}: DeepGEMM / read floor median {statistics.median(rs):.2f} (min {min(rs):.2f}, max {max(rs):.2f}; "
              f"{sum(r >= 1.15 for r in rs)} of {len(rs)} cells >= 1.15)")
    if reachable:
        every = [r for rs in reachable.values() for r in rs]
        mine = [r for rs in ratios.values() for r in rs]
        print(f"all cells: DeepGEMM / ours median {statistics.median(mine):.2f}; DeepGEMM / read floor median "
              f"{statistics.median(every):.2f}, {sum(r >= 1.15 for r in every)} of {len(every)} cells >= 1.15")
    overhead = [(ours[k[:4] + (True,)] - us, ours[k[:4] + (True,)] / us, k) for k, us in ours.items()
                if not k[4] and k[:4] + (True,) in ours]
    if overhead:
        rel = sorted(o[1] for o in overhead)
        worst = max(overhead, key=lambda o: o[0])
        print(f"histogram: median overhead {100 * (statistics.median(rel) - 1):.1f} %, max {100 * (rel[-1] - 1):.1f} %, "
              f"largest {worst[0]:.2f} us (next_n {worst[2][0]} H {worst[2][1]} B {worst[2][2]} L {worst[2][3]}), "
              f"{sum(o[0] <= 1.0 for o in overhead)} of {len(overhead)} cells <= 1 us")


if __name__ == "__main__":
    main()
