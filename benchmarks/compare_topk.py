#!/usr/bin/env python3
"""Our top-k and the peers' (vLLM, SGLang, FlashInfer, torch) on the very same tensors, one table.

The peers are their released Python packages, imported from the current environment or from the
site-packages directories given with --site-packages, or the kernels of those releases built into one
bundle (--anchors: its folder, --anchors-status: its build_status.json); ours is the flash_indexer
Python package, from the environment or from --flash-indexer (the directory that holds the built
`flash_indexer` package). See benchmarks/README.md for the package versions and an example.

Per cell (dtype x rows x length, k = 2048 by default) every peer and ours get the same input tensor
(randn rows, or indexer-like rows with --input relu). Each result is checked against torch.topk (the
multiset of selected scores must match; ties may pick different columns), then the call is captured
in a CUDA graph and timed with one event pair per replay, all replays queued behind a GPU sleep so
that launch overhead on the host does not show; the median is reported, in microseconds. Prints one
line per cell: ours, ours given the row's coarse histogram, then each peer; '!' marks a wrong result.
--output writes every cell as JSON, the input of benchmarks/topk_table.py.
"""
import argparse
import json
import os
import statistics
import sys

WORKSPACE_BYTES = 1 << 20  # the scratch vLLM's indexer hands its top-k kernels


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--site-packages", action="append", default=[], metavar="DIR",
                    help="a site-packages directory (or any import root) holding the peers' packages; "
                         "repeatable, searched before the current environment")
    ap.add_argument("--anchors", default=None, metavar="DIR",
                    help="take the peers from a kernel bundle built from their releases (the folder holding its "
                         "peers.py) instead of their packages: vLLM, SGLang and FlashInfer as that bundle calls them")
    ap.add_argument("--anchors-status", default=None, metavar="FILE",
                    help="the bundle's build_status.json, which names each built library (with --anchors)")
    ap.add_argument("--flash-indexer", default=None, metavar="DIR",
                    help="the directory that holds the built flash_indexer package (default: import it "
                         "from the environment)")
    ap.add_argument("--rows", default="1,4,8,32,64,128,512")
    ap.add_argument("--lengths", default="8192,32768,65536,131072,262144")
    ap.add_argument("--dtypes", default="float32,float16")
    ap.add_argument("--k", type=int, default=2048)
    ap.add_argument("--input", choices=("randn", "relu"), default="randn")
    ap.add_argument("--replays", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--pdl", action="store_true",
                    help="also time ours launched as a programmatic dependent launch")
    ap.add_argument("--peers", default=None,
                    help="comma list of peers (default: every one whose package imports): " + ", ".join(PEER_NAMES))
    ap.add_argument("--output", "--json", dest="output", default=None, metavar="FILE",
                    help="also write every cell to FILE as JSON (for benchmarks/topk_table.py)")
    args = ap.parse_args()
    if (args.anchors is None) != (args.anchors_status is None):
        ap.error("--anchors and --anchors-status go together")
    return args


# ---------------------------------------------------------------------------------------------------
# Peers. Each entry: name -> (dtypes, supports(R, L, k) -> reason or None, make(x, lengths, k) -> fn).
# make() allocates what an engine allocates once (outputs, workspaces, plans); fn() is the per-step
# call that is captured in the graph and returns the [R, k] indices.

def torch_peer(torch):
    def make(x, lengths, k):
        return lambda: torch.topk(x, k, dim=-1, sorted=False).indices
    return {"torch": ((torch.float32, torch.float16), lambda R, L, k: None, make)}


def vllm_peers(torch):
    import vllm._custom_ops  # noqa: F401  (loads vllm._C, which registers torch.ops._C.*)
    ops = torch.ops._C

    def radix_support(R, L, k):
        return None if k in (512, 1024, 2048) else "k must be 512, 1024 or 2048"

    def coop_support(R, L, k):
        if k not in (512, 1024, 2048):
            return "k must be 512, 1024 or 2048"
        if R > 64:
            return "more than 64 rows (vLLM takes persistent_topk there)"
        return None if torch.cuda.get_device_capability()[0] >= 9 else "needs sm_90 or newer"

    def radix(op):
        def make(x, lengths, k):
            out = torch.empty(x.shape[0], k, dtype=torch.int32, device=x.device)
            ws = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=x.device)

            def fn():
                op(x, lengths, out, ws, k, x.shape[1])
                return out
            return fn
        return make

    def per_row_decode(x, lengths, k):
        out = torch.empty(x.shape[0], k, dtype=torch.int32, device=x.device)

        def fn():
            ops.top_k_per_row_decode(x, 1, lengths, out, x.shape[0], x.stride(0), x.stride(1), k)
            return out
        return fn

    peers = {"vllm.persistent": ((torch.float32,), radix_support, radix(ops.persistent_topk)),
             "vllm.decode": ((torch.float32,), lambda R, L, k: None, per_row_decode)}
    if hasattr(ops, "cooperative_topk"):  # only in builds with the cooperative kernel
        peers["vllm.cooperative"] = ((torch.float32,), coop_support, radix(ops.cooperative_topk))
    return peers


def sglang_peers(torch):
    from sglang.kernels.ops.attention.dsv4.topk import plan_topk_v2, topk_transform_paged_v2

    def support(R, L, k):
        if not 0 < k <= 2048:
            return "k must be in 1..2048"
        return None if L % 4 == 0 else "row stride must be a multiple of 4"

    def make(x, lengths, k):
        out = torch.empty(x.shape[0], k, dtype=torch.int32, device=x.device)
        plan = plan_topk_v2(lengths)  # once per step in the engine, outside the timed call here

        def fn():
            topk_transform_paged_v2(x, lengths, None, out, 1, plan)
            return out
        return fn
    return {"sgl.topk_v2": ((torch.float32,), support, make)}


def flashinfer_peers(torch):
    import flashinfer

    def top_k(x, lengths, k):
        return lambda: flashinfer.top_k(x, k, sorted=False)[1]

    def ragged(x, lengths, k):
        offsets = torch.zeros(x.shape[0], dtype=torch.int32, device=x.device)
        return lambda: flashinfer.top_k_ragged_transform(x, offsets, lengths, k)

    dtypes = (torch.float32, torch.float16)
    return {"fi.top_k": (dtypes, lambda R, L, k: None, top_k),
            "fi.ragged": (dtypes, lambda R, L, k: None, ragged)}


# (group, prefix of its peers' names, loader)
PEER_GROUPS = (("torch", "torch", torch_peer), ("vllm", "vllm.", vllm_peers), ("sglang", "sgl.", sglang_peers),
               ("flashinfer", "fi.", flashinfer_peers))
PEER_NAMES = ("torch", "vllm.persistent", "vllm.cooperative", "vllm.decode", "sgl.topk_v2", "fi.top_k",
              "fi.ragged")


def anchor_peers(torch, folder, status_file):
    """The peers of a bundle built from the engines' releases: its peers.py says how each is called, its
    build status where each library is. Same interface as the packaged peers above."""
    sys.path.insert(0, os.path.abspath(folder))
    import peers as bundle
    with open(status_file) as f:
        status = json.load(f).get("lib_status") or {}
    libs = {key: st["path"] for key, st in status.items()
            if st and st.get("status") in ("ok", "cached") and os.path.exists(st.get("path") or "")}
    out = {}
    for peer in bundle.all_peers(libs):
        keys = bundle.lib_keys(peer)
        if any(key not in libs for key in keys):
            print(f"{peer.name}: not built ({', '.join(k for k in keys if k not in libs)})", file=sys.stderr)
            continue
        bundle.set_lib_paths(peer, {key: libs[key] for key in keys})
        out[peer.name] = (tuple(peer.dtypes), lambda R, L, k, peer=peer: peer.supports(peer.dtypes[0], R, L, k),
                          lambda x, lengths, k, peer=peer: peer.make(x, lengths, k))
    return out


def load_peers(torch, wanted, anchors=None, anchors_status=None):
    if anchors is not None:
        peers = {"torch": torch_peer(torch)["torch"]}
        peers.update(anchor_peers(torch, anchors, anchors_status))
        return peers if wanted is None else {n: p for n, p in peers.items() if n in wanted}
    peers = {}
    for group, prefix, load in PEER_GROUPS:
        if wanted is not None and not any(n.startswith(prefix) for n in wanted):
            continue
        try:
            peers.update(load(torch))
        except Exception as e:  # a peer package that is missing or fails to load is reported, not fatal
            print(f"{group}: not available ({type(e).__name__}: {str(e)[:200]})", file=sys.stderr)
    if wanted is not None:
        missing = [n for n in wanted if n not in peers]
        if missing:
            print(f"--peers: not available here: {missing}", file=sys.stderr)
        peers = {n: p for n, p in peers.items() if n in wanted}
    return peers


# ---------------------------------------------------------------------------------------------------

class Timer:
    """CUDA-graph replays, each between two events, queued behind a GPU sleep."""

    def __init__(self, torch, replays):
        self.torch = torch
        self.replays = replays
        self.cycles_per_us = torch.cuda.get_device_properties(0).clock_rate / 1000.0

    def __call__(self, fn):
        torch = self.torch
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


def correct(torch, x, indices, k, lengths):
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
    for path in reversed(args.site_packages):
        sys.path.insert(0, os.path.abspath(path))
    if args.flash_indexer:
        sys.path.insert(0, os.path.abspath(args.flash_indexer))
    import numpy as np
    import torch

    import flash_indexer as fi

    peers = load_peers(torch, args.peers.split(",") if args.peers else None, args.anchors, args.anchors_status)
    timer = Timer(torch, args.replays)
    dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}", flush=True)
    ours = [("ours", False, False), ("ours+hist", True, False)] + ([("ours+pdl", False, True)] if args.pdl else [])
    names = [n for n, _, _ in ours] + list(peers)
    print(f"{'dtype':8} {'R':>4} {'L':>7} " + " ".join(f"{n:>10}" for n in names), flush=True)
    cells_out = []
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
                # Ours, with and without the coarse histogram (computed once, outside the timing, from
                # the stored values: what the fused logits kernel produces).
                indices = torch.empty(R, args.k, dtype=torch.int32, device="cuda")
                workspace = torch.empty(fi.topk_workspace_bytes(R), dtype=torch.uint8, device="cuda")
                stored = x.float().cpu().numpy().astype(np.float64)
                hist = torch.from_numpy(fi.reference.coarse_histogram(stored, [L] * R, dname)).cuda()
                for name, with_hist, pdl in ours:
                    h = hist if with_hist else None
                    us, out = timer(lambda h=h, pdl=pdl: fi.topk(x, lengths, indices, workspace, histogram=h, pdl=pdl))
                    cells[name] = (us, correct(torch, x, out, args.k, [L] * R))
                for name, (kinds, supports, make) in peers.items():
                    if dtype not in kinds or supports(R, L, args.k):
                        continue
                    try:
                        us, out = timer(make(x, lengths, args.k))
                        cells[name] = (us, correct(torch, x, out, args.k, [L] * R))
                    except Exception as e:  # a peer that fails is reported, not fatal
                        print(f"  {name}: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
                line = f"{dname:8} {R:>4} {L:>7} "
                for n in names:
                    us, ok = cells.get(n, (None, True))
                    line += f" {'-' if us is None else f'{us:.1f}' + ('' if ok else '!'):>10}"
                print(line, flush=True)
                cells_out.append({"dtype": dname, "R": R, "L": L, "k": args.k, "input": args.input,
                                  "us": {n: c[0] for n, c in cells.items()},
                                  "correct": {n: c[1] for n, c in cells.items()}})
    if args.output:
        with open(args.output, "w") as f:
            json.dump(cells_out, f, indent=1)


if __name__ == "__main__":
    main()
