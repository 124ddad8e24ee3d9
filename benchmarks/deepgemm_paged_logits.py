#!/usr/bin/env python3
"""DeepGEMM's fp8_paged_mqa_logits timed on the cells of `flash-indexer bench logits`, for logits_vs_deepgemm.py.

Inputs match the sizes of our bench: an FP8 key cache [blocks, 64, 1, D + 4] (64 x D E4M3 bytes, then 64
FP32 scales per block) in a pool of at least 512 MiB and of 1.1x the largest cell's blocks, every request
exactly L long, its blocks drawn shuffled from the whole pool; q E4M3 [B, next_n, H, D]; weights FP32
[B * next_n, H]. The values are random bytes (no E4M3 NaN), scales in [0.005, 0.05], weights N(0, 0.125).

next_n 1-2 run natively ("native"); next_n 3-4, which DeepGEMM's SM90 kernel rejects, run as B * next_n
rows of next_n = 1 with row j of a request seeing L - next_n + j + 1 keys ("flattened"), as engines call it.

Timing, as our bench does it: the logits call alone is captured in a CUDA graph (its output buffer comes
from the graph's pool; no clean-logits pass); 3 warm-up replays, then --replays replays queued behind a
GPU sleep, each between two CUDA events; the median. --cold-l2 writes a 256 MiB buffer before each
replay, outside the events. get_paged_mqa_logits_metadata runs once per cell before the capture, as an
engine runs it once per step for all layers; it is not in us_cold / us_hot and is timed on its own in
the same harness as us_metadata.

Writes {"device", "deep_gemm", "torch", "num_sms", "read_bandwidth", "cold_l2", "rows": [...]}; each row
holds status ("ok" or "error"), logits_dtype, mode, context_lens ("2d" or "1d": the form the installed
DeepGEMM took), next_n, H, B, L, D, us_cold (with --cold-l2) or us_hot, us_metadata, and bytes, flops,
gbps, bandwidth_fraction, tflops, floor_us defined as in our bench's JSON. logits_vs_deepgemm.py reads
us_cold: pass --cold-l2 for it.
"""
import argparse
import json
import os
import sys

BLOCK = 64               # tokens per KV block (DeepGEMM's SM90 block_kv)
FLUSH_BYTES = 256 << 20  # as our bench's flush: several times the L2 of current GPUs
TENSOR_FLOPS = 1600e12   # the FP8 rate our bench's floor assumes


def parse_list(text, cast=int):
    return [cast(x) for x in text.split(",") if x]


def load_deep_gemm():
    try:
        import deep_gemm
    except ImportError as e:
        sys.exit(f"deep_gemm is not importable ({e}). Install DeepGEMM (built from its repository, "
                 "with the CUDA toolkit it JIT-compiles with) or pass --site-packages DIR holding it.")
    if not hasattr(deep_gemm, "get_paged_mqa_logits_metadata"):
        sys.exit(f"deep_gemm {getattr(deep_gemm, '__version__', '?')} has no paged MQA logits "
                 "(get_paged_mqa_logits_metadata): a release with the indexer kernels is needed")
    return deep_gemm


def time_graph(torch, fn, replays, flush):
    """Median µs of `fn` captured once in a CUDA graph; replays behind a GPU sleep, each between events."""
    fn()  # JIT compile and load outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    # The sleep must outlast the host's enqueueing of every replay: 2 ms + 30 µs each, in cycles at <= 2 GHz.
    torch.cuda._sleep(2 * (2_000_000 + 30_000 * replays))
    for i in range(replays):
        if flush is not None:
            flush.fill_(i & 0xFF)
        starts[i].record()
        graph.replay()
        stops[i].record()
    torch.cuda.synchronize()
    times = sorted(a.elapsed_time(b) for a, b in zip(starts, stops))
    del graph
    return 1000.0 * times[len(times) // 2]


def make_pool(torch, blocks, dim, gen):
    """The key cache: 4096 random blocks replicated over the pool (valid E4M3 bytes, positive scales)."""
    pattern = min(blocks, 4096)
    keys = torch.randint(0, 256, (pattern, BLOCK * dim), dtype=torch.uint8, device="cuda", generator=gen)
    keys[(keys & 0x7F) == 0x7F] = 0x3C
    scales = torch.empty(pattern, BLOCK, device="cuda").uniform_(0.005, 0.05, generator=gen)
    pool = torch.empty(blocks, BLOCK * (dim + 4), dtype=torch.uint8, device="cuda")
    for b in range(0, blocks, pattern):
        n = min(pattern, blocks - b)
        pool[b:b + n, :BLOCK * dim] = keys[:n]
        pool[b:b + n, BLOCK * dim:] = scales[:n].view(torch.uint8)
    return pool.view(blocks, BLOCK, 1, dim + 4)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="\n".join(__doc__.splitlines()[2:]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--site-packages", action="append", default=[], metavar="DIR",
                    help="an import root holding deep_gemm (and torch), put first on sys.path (repeatable)")
    ap.add_argument("--heads", default="32,64")
    ap.add_argument("--next-n", default="1,2,3,4")
    ap.add_argument("--batch", default="1,8,32,64,128")
    ap.add_argument("--lengths", default="8192,32768,65536,131072")
    ap.add_argument("--dtype", default="fp32",
                    help="logits dtypes: fp32 and/or bf16 (bf16 needs fp8_fp4_paged_mqa_logits)")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--cold-l2", action="store_true", help="write 256 MiB before each replay (untimed)")
    ap.add_argument("--read-bandwidth", type=float, default=0.0, metavar="GBPS",
                    help="GB/s for bandwidth_fraction and floor_us; our bench's JSON has it as read_bandwidth "
                         "(bytes/s). Default: a 2 GiB torch.sum timed in the same harness")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--output", default=None, metavar="FILE", help="write the JSON here")
    args = ap.parse_args()
    for path in reversed(args.site_packages):
        sys.path.insert(0, os.path.abspath(path))
    import torch
    if not torch.cuda.is_available():
        sys.exit("no CUDA device visible to torch")
    dg = load_deep_gemm()

    heads, next_ns = parse_list(args.heads), parse_list(args.next_n)
    batches, lengths = parse_list(args.batch), parse_list(args.lengths)
    dtypes = args.dtype.split(",")
    dim = args.head_dim
    num_sms = (dg.get_num_sms() if hasattr(dg, "get_num_sms")
               else torch.cuda.get_device_properties(0).multi_processor_count)
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda") if args.cold_l2 else None
    if args.read_bandwidth > 0:
        bandwidth = args.read_bandwidth * 1e9
    else:
        data = torch.ones((2 << 30) // 4, device="cuda")
        bandwidth = data.numel() * 4 / (time_graph(torch, lambda: data.sum(), 20, None) * 1e-6)
        del data

    # Pool as our bench sizes it: the widest request allows 1.3 L, 10 % spare, never under 512 MiB.
    max_width = (max(lengths) * 13 // 10 + BLOCK) // BLOCK * BLOCK
    pool_blocks = max(max(batches) * (max_width // BLOCK) * 11 // 10, (512 << 20) // (BLOCK * (dim + 4)))
    kv = make_pool(torch, pool_blocks, dim, gen)
    rows_max = max(batches) * max(next_ns)
    q_all = torch.randint(0, 256, (rows_max * max(heads) * dim,), dtype=torch.uint8, device="cuda", generator=gen)
    q_all[(q_all & 0x7F) == 0x7F] = 0x38
    w_all = torch.empty(rows_max * max(heads), device="cuda").normal_(0.0, 0.125, generator=gen)

    # The installed release's forms, found on first use: metadata with or without block_kv, 2-D or 1-D lengths.
    api = {"meta": None, "lens2d": None}

    def metadata(lens):
        if api["meta"] != "no_block_kv":
            try:
                out = dg.get_paged_mqa_logits_metadata(lens, BLOCK, num_sms)
                api["meta"] = "block_kv"
                return out
            except TypeError:  # a release whose metadata call takes no block_kv
                if api["meta"] == "block_kv":
                    raise
        out = dg.get_paged_mqa_logits_metadata(lens, num_sms)
        api["meta"] = "no_block_kv"
        return out

    def logits_fn(dtype):
        if dtype == "fp32" and hasattr(dg, "fp8_paged_mqa_logits"):
            return dg.fp8_paged_mqa_logits
        if hasattr(dg, "fp8_fp4_paged_mqa_logits"):  # takes q as (values, scales); FP8 q has no scales
            out_dtype = torch.float32 if dtype == "fp32" else torch.bfloat16
            return lambda q_, *a, **k: dg.fp8_fp4_paged_mqa_logits((q_, None), *a, logits_dtype=out_dtype, **k)
        raise RuntimeError(f"this deep_gemm has no paged logits entry point for {dtype} logits")

    cells = []
    key = "us_cold" if args.cold_l2 else "us_hot"
    print(f"DeepGEMM {getattr(dg, '__version__', '?')} fp8_paged_mqa_logits on {torch.cuda.get_device_name()} "
          f"({num_sms} SMs), torch {torch.__version__}; read {bandwidth / 1e9:.0f} GB/s; {args.replays} replays"
          f"{', cold L2' if args.cold_l2 else ''}; every length exactly L")
    print(f"{'B':>5} {'L':>7} {'n':>2} {'H':>3} {'out':>4} {'mode':>9} {'us':>9} {'meta_us':>8} {'GB/s':>6} {'BW%':>6}")
    for batch in batches:
        for length in lengths:
            width_blocks = (length + BLOCK - 1) // BLOCK
            ids = torch.randperm(pool_blocks, device="cuda", generator=gen, dtype=torch.int64)
            table = ids[:batch * width_blocks].to(torch.int32).view(batch, width_blocks)
            for next_n in next_ns:
                mode = "native" if next_n <= 2 else "flattened"
                rows_n = batch * next_n
                # Row j of a request sees L - next_n + j + 1 keys (ours and DeepGEMM's 1-D lengths alike).
                row_lens = torch.arange(length - next_n + 1, length + 1, dtype=torch.int32, device="cuda").repeat(batch)
                # 2-D lengths: [requests, next_n the kernel sees]; 1-D: one per request, its last row's length.
                kn = next_n if mode == "native" else 1
                lens2d = row_lens.view(rows_n // kn, kn)
                lens1d = lens2d[:, -1].contiguous()
                tab = table if mode == "native" else table.repeat_interleave(next_n, dim=0)
                for h in heads:
                    q = q_all[:rows_n * h * dim].view(torch.float8_e4m3fn).view(rows_n // kn, kn, h, dim)
                    w = w_all[:rows_n * h].view(rows_n, h)
                    for dtype in dtypes:
                        row = {"status": "ok", "logits_dtype": dtype, "mode": mode, "next_n": next_n, "H": h,
                               "B": batch, "L": length, "D": dim}
                        try:
                            fn_logits = logits_fn(dtype)
                            # Newer releases require 2-D lengths, older ones take 1-D only: try 2-D first.
                            forms = [api["lens2d"]] if api["lens2d"] is not None else [True, False]
                            errors = []
                            for i, two_d in enumerate(forms):
                                lens = lens2d if two_d else lens1d
                                try:
                                    meta = metadata(lens)
                                    call = (lambda l=lens, m=meta:
                                            fn_logits(q, kv, w, l, tab, m, length, clean_logits=False))
                                    call()
                                    torch.cuda.synchronize()
                                    api["lens2d"] = two_d
                                    break
                                except Exception as e:  # noqa: BLE001 - DeepGEMM's host asserts raise RuntimeError or others
                                    errors.append(f"{'2-D' if two_d else '1-D'} lengths: {type(e).__name__}: "
                                                  + (str(e).splitlines() or [''])[0])
                                    if i + 1 == len(forms):
                                        raise RuntimeError("; ".join(errors)) from e
                            row["context_lens"] = "2d" if api["lens2d"] else "1d"
                            row[key] = time_graph(torch, call, args.replays, flush)
                            try:
                                row["us_metadata"] = time_graph(torch, lambda l=lens: metadata(l), args.replays, flush)
                            except Exception:  # noqa: BLE001 - a metadata call that cannot be captured: not timed
                                row["us_metadata"] = None
                        except Exception as e:  # noqa: BLE001 - one failing cell must not end the grid
                            row.update(status="error", error=f"{type(e).__name__}: {e}".splitlines()[0])
                            print(f"{batch:5} {length:7} {next_n:2} {h:3} {dtype:>4} {mode:>9} error: {row['error']}")
                            cells.append(row)
                            continue
                        # The cell's bytes and FLOPs as our bench counts them (the same for every kernel).
                        us = row[key]
                        live = batch * sum(length - next_n + j + 1 for j in range(next_n))
                        row["bytes"] = (batch * width_blocks * BLOCK * (dim + 4) + live * (4 if dtype == "fp32" else 2)
                                        + rows_n * h * (dim + 4) + batch * width_blocks * 4)
                        row["flops"] = 2.0 * batch * width_blocks * BLOCK * next_n * h * dim
                        row["gbps"] = row["bytes"] / (us * 1e-6) / 1e9
                        row["bandwidth_fraction"] = row["bytes"] / (us * 1e-6) / bandwidth
                        row["tflops"] = row["flops"] / (us * 1e-6) / 1e12
                        row["floor_us"] = max(row["bytes"] / bandwidth, row["flops"] / TENSOR_FLOPS) * 1e6
                        cells.append(row)
                        print(f"{batch:5} {length:7} {next_n:2} {h:3} {dtype:>4} {mode:>9} {us:9.2f} "
                              f"{row['us_metadata'] or 0:8.2f} {row['gbps']:6.0f} "
                              f"{100 * row['bandwidth_fraction']:5.1f}%",
                              flush=True)
    if args.output:
        with open(args.output, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "deep_gemm": getattr(dg, "__version__", None),
                       "torch": torch.__version__, "cuda": torch.version.cuda, "num_sms": num_sms,
                       "read_bandwidth": bandwidth, "cold_l2": args.cold_l2, "replays": args.replays,
                       "rows": cells}, f, indent=1)
        print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
