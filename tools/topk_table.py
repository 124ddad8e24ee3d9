#!/usr/bin/env python3
"""Markdown table of a tools/compare_topk.py --json file: ours, ours with the histogram, the best correct
peer (torch aside), the ratio, torch.topk, and which results were wrong; then the count of cells won.

    python3 tools/topk_table.py compare-randn.json
"""
import json
import sys

SHORT = {"vllm.cooperative": "vl.coop", "vllm.persistent": "vl.pers", "vllm.decode": "vl.dec",
         "vllm.prefill": "vl.pre", "sgl.topk_v2": "sgl.v2", "sgl.fast_topk": "sgl.fast", "fi.ragged": "fi.ragg",
         "fi.radix": "fi.radix", "fi.cub": "fi.cub", "fi.top_k": "fi.topk"}
OURS = ("ours", "ours+hist")


def length(n):
    return f"{n // 1024}K" if n % 1024 == 0 else str(n)


def main(path):
    cells = json.load(open(path))
    print("| in | rows × L | ours | ours + histogram | best peer | which | best / ours | torch.topk | wrong results |")
    print("|---|---|---|---|---|---|---|---|---|")
    won = won_hist = total = 0
    for c in cells:
        us, ok = c["us"], c["correct"]
        peers = {n: t for n, t in us.items() if n not in OURS and n != "torch" and ok.get(n) and t is not None}
        wrong = ", ".join(SHORT.get(n, n) for n, good in ok.items() if not good)
        if not peers or us.get("ours") is None:
            continue
        best = min(peers, key=peers.get)
        total += 1
        won += us["ours"] < peers[best] and ok["ours"]
        won_hist += us["ours+hist"] < peers[best] and ok["ours+hist"]
        dtype = {"float32": "fp32", "float16": "fp16"}.get(c["dtype"], c["dtype"])
        print(f"| {dtype} | {c['R']} × {length(c['L'])} | {us['ours']:.1f} | {us['ours+hist']:.1f} | {peers[best]:.1f} | "
              f"{SHORT.get(best, best)} | {peers[best] / us['ours']:.2f} | {us['torch']:.1f} | {wrong} |")
    print(f"\nAhead of the best peer in {won} of {total} cells ({won_hist} with the histogram).")


if __name__ == "__main__":
    main(sys.argv[1])
