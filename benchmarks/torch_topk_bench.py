#!/usr/bin/env python3
"""torch.topk on the shapes of `flash-indexer bench topk`, as a baseline on the same GPU.

Rows of indexer-like scores (ReLU-weighted, like the C++ benchmark), full length; torch.topk(k,
sorted=False) captured in a CUDA graph and replayed; CUDA events around each replay; the median, in
microseconds, one line per cell (rows, length, k, dtype). --output also writes the cells as JSON.
"""
import argparse
import json
import os
import statistics
import sys


def parse_list(text, cast=int):
    return [cast(x) for x in text.split(",") if x]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", default="1,4,8,32,64,128,512")
    ap.add_argument("--lengths", default="8192,32768,65536,131072,262144")
    ap.add_argument("--k", default="2048")
    ap.add_argument("--dtype", default="f32,f16")
    ap.add_argument("--replays", type=int, default=50)
    ap.add_argument("--site-packages", action="append", default=[], metavar="DIR",
                    help="a site-packages directory holding torch (repeatable; default: the environment's)")
    ap.add_argument("--output", default=None, metavar="FILE", help="also write every cell here as JSON")
    args = ap.parse_args()
    for path in reversed(args.site_packages):
        sys.path.insert(0, os.path.abspath(path))
    import torch

    cells = []
    dtypes = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}: torch.topk(sorted=False) in a CUDA graph")
    print(f"{'rows':>5} {'L':>7} {'k':>5} {'in':>4} {'us':>9}")
    for rows in parse_list(args.rows):
        for length in parse_list(args.lengths):
            for name in args.dtype.split(","):
                g = torch.Generator(device="cuda").manual_seed(1)
                x = torch.randn(rows, length, device="cuda", generator=g)
                x = (x.clamp_min(0) * 3 + 0.25 * torch.randn(rows, length, device="cuda", generator=g)).to(dtypes[name])
                for k in parse_list(args.k):
                    stream = torch.cuda.Stream()
                    stream.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(stream):
                        for _ in range(3):
                            torch.topk(x, k, dim=1, sorted=False)
                    torch.cuda.current_stream().wait_stream(stream)
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        out = torch.topk(x, k, dim=1, sorted=False)
                    times = []
                    for i in range(args.replays + 3):
                        start = torch.cuda.Event(enable_timing=True)
                        stop = torch.cuda.Event(enable_timing=True)
                        start.record()
                        graph.replay()
                        stop.record()
                        stop.synchronize()
                        if i >= 3:
                            times.append(start.elapsed_time(stop) * 1000.0)
                    del out, graph
                    us = statistics.median(times)
                    print(f"{rows:>5} {length:>7} {k:>5} {name:>4} {us:9.2f}", flush=True)
                    cells.append({"rows": rows, "length": length, "k": k, "dtype": name, "us": us})
    if args.output:
        with open(args.output, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cells": cells}, f, indent=1)


if __name__ == "__main__":
    main()
