#!/usr/bin/env python3
"""Markdown table of a benchmarks/compare_topk.py --output file: ours, ours with the histogram, every
peer that ran (torch.topk last), the best correct peer's ratio to ours, and which results were wrong;
then the count of cells won.

    python3 benchmarks/topk_table.py cmp-randn.json [--output table.md]
"""
import argparse
import contextlib
import json
import sys

SHORT = {"vllm.cooperative": "vl.coop", "vllm.persistent": "vl.pers", "vllm.decode": "vl.dec",
         "vllm.prefill": "vl.pre", "sgl.topk_v2": "sgl.v2", "sgl.fast_topk": "sgl.fast", "fi.ragged": "fi.ragg",
         "fi.radix": "fi.radix", "fi.cub": "fi.cub", "fi.top_k": "fi.topk"}
OURS = ("ours", "ours+hist", "ours+pdl")


def length(n):
    return f"{n // 1024}K" if n % 1024 == 0 else str(n)


def us_text(t, good=True):
    return "-" if t is None else f"{t:.1f}" + ("" if good else "!")


def main(path):
    cells = json.load(open(path))
    others = []  # every peer that ran in some cell, in the file's order, torch last
    for c in cells:
        others += [n for n in c["us"] if n not in OURS and n != "torch" and n not in others]
    others += ["torch"] if any("torch" in c["us"] for c in cells) else []
    print("| in | rows × L | ours | ours + histogram | " + " | ".join(SHORT.get(n, n) for n in others) +
          " | best peer / ours |")
    print("|---" * (5 + len(others)) + "|")
    won = won_hist = total = 0
    for c in cells:
        us, ok = c["us"], c["correct"]
        peers = {n: t for n, t in us.items() if n not in OURS and n != "torch" and ok.get(n) and t is not None}
        if not peers or us.get("ours") is None:
            continue
        best = min(peers, key=peers.get)
        total += 1
        won += us["ours"] < peers[best] and ok["ours"]
        won_hist += us["ours+hist"] < peers[best] and ok["ours+hist"]
        dtype = {"float32": "fp32", "float16": "fp16"}.get(c["dtype"], c["dtype"])
        print(f"| {dtype} | {c['R']} × {length(c['L'])} | {us_text(us['ours'], ok['ours'])} | "
              f"{us_text(us['ours+hist'], ok['ours+hist'])} | " +
              " | ".join(us_text(us.get(n), ok.get(n, True)) for n in others) +
              f" | {peers[best] / us['ours']:.2f} ({SHORT.get(best, best)}) |")
    print(f"\nAhead of the best peer in {won} of {total} cells ({won_hist} with the histogram); '!' marks a "
          "result that differs from torch.topk's.")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input", help="the JSON file of benchmarks/compare_topk.py --output")
    ap.add_argument("--output", default=None, metavar="FILE", help="write the table here (default: stdout)")
    args = ap.parse_args()
    with (open(args.output, "w") if args.output else contextlib.nullcontext(sys.stdout)) as out, \
            contextlib.redirect_stdout(out):
        main(args.input)
