#!/usr/bin/env python3
"""Our top-k and the peers' (vLLM, SGLang, FlashInfer, torch) on the very same tensors, one table.

The peers come from a copy of ../shared/anchors/topk carried to the GPU machine (its peers.py is
imported, nothing of it is copied here), with their libraries built by its build.py:

    python3 .anchors/topk/build.py --build-dir /tmp/topk_peers_build --log-dir /tmp/topk_peers_build/logs
    python3 tools/compare_topk.py --anchors .anchors/topk --build-report /tmp/topk_peers_build/logs/build_report.json

Per cell (dtype x rows x length, k = 2048 by default): every peer and ours get the same input tensor
(randn rows, or indexer-like rows with --input relu), are checked against torch.topk's values (the
multiset of selected scores must match; ties may pick different columns), captured in a CUDA graph and
timed with one event pair per replay, all replays queued behind a GPU sleep (median). Prints one row
per cell: ours, ours with the histogram given, then each peer; '!' marks a wrong result.
"""
import argparse
import json
import os
import statistics
import sys

import numpy as np
import torch

import flash_indexer as fi


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--anchors", required=True, help="the carried copy of ../shared/anchors/topk")
    ap.add_argument("--build-report", required=True, help="build.py's logs/build_report.json")
    ap.add_argument("--rows", default="1,4,8,32,64,128,512")
    ap.add_argument("--lengths", default="8192,32768,65536,131072,262144")
    ap.add_argument("--dtypes", default="float32,float16")
    ap.add_argument("--k", type=int, default=2048)
    ap.add_argument("--input", choices=("randn", "relu"), default="randn")
    ap.add_argument("--replays", type=int, default=40)
    ap.add_argument("--pdl", action="store_true",
                    help="also time ours launched as a programmatic dependent launch (as SGLang launches its top-k)")
    ap.add_argument("--peers", default=None, help="comma list of peer names (default: every peer)")
    ap.add_argument("--json", default=None, help="also write every cell here")
    return ap.parse_args()


class Timer:
    """CUDA-graph replays, each between two events, queued behind a GPU sleep."""

    def __init__(self, replays):
        self.replays = replays
        clock_khz = torch.cuda.get_device_properties(0).clock_rate
        self.cycles_per_us = clock_khz / 1000.0

    def __call__(self, fn):
        fn()  # eager warm-up: loads kernels, lazy allocations
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fn()
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.replays)]
        stops = [torch.cuda.Event(enable_timing=True) for _ in range(self.replays)]
        torch.cuda._sleep(int((2000 + 30 * self.replays) * self.cycles_per_us))
        for s, e in zip(starts, stops):
            s.record()
            graph.replay()
            e.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) * 1000.0 for s, e in zip(starts, stops)), out


def correct(x, indices, k, lengths):
    """The selected scores equal torch.topk's (as multisets), row by row, over each row's live prefix."""
    for r in range(x.shape[0]):
        n = int(lengths[r])
        want = torch.topk(x[r, :n].float(), min(k, n)).values.sort().values
        idx = indices[r][indices[r] >= 0].long()
        if idx.numel() != want.numel() or torch.unique(idx).numel() != idx.numel():
            return False
        if not torch.equal(x[r, idx].float().sort().values, want):
            return False
    return True


def main():
    args = parse_args()
    sys.path.insert(0, os.path.abspath(args.anchors))
    import peers as P  # the anchors' peer definitions, unchanged

    with open(args.build_report) as f:
        libs = json.load(f).get("libs", {})
    peers = P.all_peers({})
    if args.peers:
        wanted = args.peers.split(",")
        unknown = sorted(set(wanted) - {p.name for p in peers})
        if unknown:
            sys.exit(f"--peers: unknown {unknown}; known: {[p.name for p in peers]}")
        peers = [p for p in peers if p.name in wanted]
    for p in peers:
        P.set_lib_paths(p, {key: libs[key] for key in P.lib_keys(p) if key in libs})
    timer = Timer(args.replays)
    dtypes = {"float32": torch.float32, "float16": torch.float16}
    gen = torch.Generator(device="cuda").manual_seed(1)
    rows_out = []
    ours = [("ours", False, False), ("ours+hist", True, False)] + ([("ours+pdl", False, True)] if args.pdl else [])
    names = [n for n, _, _ in ours] + [p.name for p in peers]
    print(f"{'dtype':8} {'R':>4} {'L':>7} " + " ".join(f"{n:>10}" for n in names), flush=True)
    for dname in args.dtypes.split(","):
        dtype = dtypes[dname]
        for R in map(int, args.rows.split(",")):
            for L in map(int, args.lengths.split(",")):
                x32 = torch.randn(R, L, device="cuda", generator=gen)
                if args.input == "relu":
                    x32 = x32.clamp_min(0) * 3 + 0.25 * torch.randn(R, L, device="cuda", generator=gen)
                x = x32.to(dtype)
                lengths = torch.full((R,), L, dtype=torch.int32, device="cuda")
                cells = {}
                # Ours, with and without the histogram (computed once, outside the timing, from the
                # stored values: what the fused logits kernel would have produced).
                indices = torch.empty(R, args.k, dtype=torch.int32, device="cuda")
                workspace = torch.empty(fi.topk_workspace_bytes(R), dtype=torch.uint8, device="cuda")
                stored = x.float().cpu().numpy().astype(np.float64)
                hist = torch.from_numpy(fi.reference.coarse_histogram(stored, [L] * R, dname)).cuda()
                for name, with_hist, pdl in ours:
                    h = hist if with_hist else None
                    us, out = timer(lambda h=h, pdl=pdl: fi.topk(x, lengths, indices, workspace, histogram=h, pdl=pdl))
                    cells[name] = (us, correct(x, out, args.k, [L] * R))
                for p in peers:
                    if p.supports(dtype, R, L, args.k):
                        continue
                    try:
                        us, out = timer(p.make(x, lengths, args.k))
                        cells[p.name] = (us, correct(x, out, args.k, [L] * R))
                    except Exception as e:  # a peer that fails is reported, not fatal
                        print(f"  {p.name}: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
                line = f"{dname:8} {R:>4} {L:>7} "
                for n in names:
                    us, ok = cells.get(n, (None, True))
                    line += f" {'-' if us is None else f'{us:.1f}' + ('' if ok else '!'):>10}"
                print(line, flush=True)
                rows_out.append({"dtype": dname, "R": R, "L": L, "k": args.k, "input": args.input,
                                 "us": {n: c[0] for n, c in cells.items()},
                                 "correct": {n: c[1] for n, c in cells.items()}})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows_out, f, indent=1)


if __name__ == "__main__":
    main()
