#!/usr/bin/env python3
"""One DeepGEMM fp8_paged_mqa_logits configuration, eager, for ncu / nsys (no timing grid).

Run on the GPU machine after `bash .anchors/deepgemm/run.sh` in the same session (it leaves the
unpacked sources and the built .so in $DG_BENCH_WORK, default /tmp/dgbench, and the JIT cubins in
$DG_JIT_CACHE_DIR, default /tmp/dgbench_jit_cache):

    python3 .device-run/dg_one.py --batch 64 --length 32768 --next-n 2 --heads 64
    ncu -k regex:sm90_fp8_paged_mqa_logits --launch-skip 1 --launch-count 1 \
        python3 .device-run/dg_one.py --batch 64 --length 32768 --next-n 2 --heads 64

Uses bench.py's own helpers (load_ops, make_kv_pool, make_queries, flatten_inputs, call_logits,
reference_logits, compare, hard_exit) and the seeds of Bench.inputs(cell, 0), so the inputs are those
of bench.py's first input set of the same cell.  Order of GPU work: input construction (torch kernels),
one get_paged_mqa_logits_metadata call (kernel deep_gemm::sched::sm90_paged_mqa_logits_metadata), then
--calls logits calls (kernel deep_gemm::sm90_fp8_paged_mqa_logits), each followed by
torch.cuda.synchronize().  The first logits call may JIT-compile / load the cubin; --launch-skip 1
skips it.  Also accepts every argument bench.py takes (run.sh passes --so --so-origin --lib-root
--cuda-home --out --deadline [$DG_BENCH_ARGS]); the ones that only matter to the grid are ignored.
"""
import argparse
import importlib.util
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.environ.get('DG_BENCH_PKG', os.path.join(HERE, '..', '.anchors', 'deepgemm'))
WORK = os.environ.get('DG_BENCH_WORK', '/tmp/dgbench')

# Kernel names (DeepGEMM 2.6.1 sources: csrc/jit_kernels/impls/sm90_fp8_mqa_logits.hpp,
# deep_gemm/include/deep_gemm/impls/sm90_fp8_paged_mqa_logits.cuh, .../scheduler/sm90_paged_mqa_logits.cuh)
LOGITS_KERNEL = 'deep_gemm::sm90_fp8_paged_mqa_logits'
META_KERNEL = 'deep_gemm::sched::sm90_paged_mqa_logits_metadata'
LOGITS_NCU_REGEX = 'regex:sm90_fp8_paged_mqa_logits'      # does not match the metadata kernel (no "fp8")
META_NCU_REGEX = 'regex:sm90_paged_mqa_logits_metadata'


def load_bench():
    path = os.path.abspath(os.path.join(PKG, 'bench.py'))
    spec = importlib.util.spec_from_file_location('bench', path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules['bench'] = mod
    spec.loader.exec_module(mod)  # module level: constants only; main() runs only under __main__
    return mod, path


def default_cuda_home():
    """run.sh's choice: $CUDA_HOME, else the toolkit of the nvcc on PATH, else /usr/local/cuda."""
    home = os.environ.get('CUDA_HOME', '')
    if not home:
        nvcc = shutil.which('nvcc')
        home = os.path.dirname(os.path.dirname(os.path.realpath(nvcc))) if nvcc else '/usr/local/cuda'
    if not os.access(os.path.join(home, 'bin', 'nvcc'), os.X_OK):
        home = '/usr/local/cuda'
    return home


def default_so():
    """run.sh's .so: $WORK/dg_bench_ops.so, or the prebuilt one when the build failed (it is then absent)."""
    built = os.path.join(WORK, 'dg_bench_ops.so')
    return built if os.path.exists(built) else os.path.abspath(os.path.join(PKG, 'prebuilt', 'dg_bench_ops.so'))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    # the configuration
    p.add_argument('--batch', '-B', type=int, required=True)
    p.add_argument('--length', '-L', type=int, required=True, help='context length of every request')
    p.add_argument('--next-n', type=int, default=1)
    p.add_argument('--heads', '-H', type=int, default=64)
    p.add_argument('--dtype', choices=('fp32', 'bf16'), default='fp32', help='logits dtype')
    p.add_argument('--mode', choices=('native', 'flat'), default='native',
                   help="flat: next_n rows flattened to B*next_n rows of next_n=1 (bench.py's 'flat' cells)")
    p.add_argument('--calls', type=int, default=3, help='logits calls after the one metadata call')
    p.add_argument('--profile-range', action='store_true',
                   help='cudaProfilerStart before logits call 2, Stop after the last (ncu --profile-from-start off)')
    p.add_argument('--check', action='store_true', help='after the calls, compare with bench.reference_logits')
    # bench.py's arguments, same defaults as run.sh gives them
    p.add_argument('--so', default=default_so())
    p.add_argument('--lib-root', default=os.path.join(WORK, 'DeepGEMM', 'deep_gemm'))
    p.add_argument('--cuda-home', default=default_cuda_home())
    p.add_argument('--so-origin', default='built' if os.path.exists(os.path.join(WORK, 'dg_bench_ops.so')) else 'prebuilt-fallback')
    p.add_argument('--out', default='.')                     # ignored (nothing is written)
    p.add_argument('--deadline', type=float, default=0.0)    # ignored
    p.add_argument('--max-mem-gb', type=float, default=20.0)  # ignored
    p.add_argument('--pool-cache-gb', type=float, default=40.0)  # ignored
    p.add_argument('--jit-workers', type=int, default=8)     # ignored (no parallel warm-up here)
    p.add_argument('--jit-timeout', type=float, default=240.0)  # ignored
    p.add_argument('--quick', action='store_true')           # ignored
    return p.parse_args()


def main():
    args = parse_args()
    # run.sh's JIT cache, so the cubins bench.py compiled are found (read by DeepGEMM's Compiler via getenv)
    os.environ.setdefault('DG_JIT_CACHE_DIR', '/tmp/dgbench_jit_cache')
    bench, bench_path = load_bench()
    b, l, nn, h, dt = args.batch, args.length, args.next_n, args.heads, args.dtype
    print(f'dg_one: bench.py {bench_path}; .so {args.so} ({args.so_origin}); lib-root {args.lib_root}; '
          f'cuda-home {args.cuda_home}; DG_JIT_CACHE_DIR {os.environ["DG_JIT_CACHE_DIR"]}', flush=True)
    for pth in (args.so, os.path.join(args.lib_root, 'include', 'deep_gemm')):
        if not os.path.exists(pth):
            print(f'!!! {pth} does not exist: run `bash .anchors/deepgemm/run.sh` first (same DG_BENCH_WORK)')
            return 2

    import torch
    if not torch.cuda.is_available():
        print('!!! no CUDA device visible to torch')
        return 4
    ops = bench.load_ops(torch, args.so, args.lib_root, args.cuda_home)
    num_sms = ops.get_num_sms()
    print(f'device {torch.cuda.get_device_name(0)}, {num_sms} SMs, arch {ops.get_arch_major()}, '
          f'pdl {ops.get_pdl()}, {ops.build_info()}', flush=True)

    # Inputs exactly as Bench.inputs(cell, idx=0) builds them
    dev = bench.DEVICE
    kv, bt = bench.make_kv_pool(torch, b, l, 1000 + 7919 * 0 + 31 * b + l, dev)
    q, w, ctx = bench.make_queries(torch, b, nn, h, l, 17 + nn * 100 + h, dev)
    q0, w0, ctx0, bt0 = q, w, ctx, bt  # per-request layout, for --check
    if args.mode == 'flat':
        q, w, ctx, bt = bench.flatten_inputs(q, w, ctx, bt)
    torch.cuda.synchronize()
    kn = q.shape[1]  # next_n the kernel sees
    print(f'config: mode={args.mode} B={b} L={l} next_n={nn} H={h} D={bench.HEAD_DIM} block={bench.BLOCK_KV} '
          f'logits={dt} | q {tuple(q.shape)} kv {tuple(kv.shape)} w {tuple(w.shape)} ctx {tuple(ctx.shape)} '
          f'block_table {tuple(bt.shape)} | KV bytes {bench.kv_bytes_of(b, l)}', flush=True)
    print(f'kernels: logits {LOGITS_KERNEL}<{kn}, {h}, {bench.HEAD_DIM}, {bench.BLOCK_KV}, true, false, 3, 3, '
          f'{bench.SPLIT_KV}, 128, {bench.SPLIT_KV // 64 * 128}, {"float" if dt == "fp32" else "cutlass::bfloat16_t"}> '
          f'grid {num_sms} x block {128 + bench.SPLIT_KV // 64 * 128}; metadata {META_KERNEL}'
          f'<{-(-ctx.shape[0] // 32) * 32}, {bench.SPLIT_KV}, {num_sms}, false> grid 1 x block 32', flush=True)
    print(f'ncu: -k {LOGITS_NCU_REGEX} --launch-skip 1 --launch-count 1   (metadata: -k {META_NCU_REGEX})',
          flush=True)

    # Schedule metadata once (as run_cell does), then the logits calls
    t = time.perf_counter()
    meta = ops.get_paged_mqa_logits_metadata(ctx, bench.BLOCK_KV, num_sms)
    torch.cuda.synchronize()
    print(f'metadata: shape {tuple(meta.shape)}, {(time.perf_counter() - t) * 1e3:.1f} ms wall (first call: JIT load)',
          flush=True)
    out = None
    for i in range(args.calls):
        if args.profile_range and i == 1:
            torch.cuda.profiler.start()
        t = time.perf_counter()
        out = bench.call_logits(ops, torch, q, kv, w, ctx, bt, meta, l, dt)
        torch.cuda.synchronize()
        print(f'logits call {i + 1}/{args.calls}: {(time.perf_counter() - t) * 1e6:.0f} us eager wall '
              f'(host overhead incl.{", JIT load" if i == 0 else ""})', flush=True)
    if args.profile_range and args.calls > 1:
        torch.cuda.profiler.stop()
    if out is not None:
        print(f'logits: shape {tuple(out.shape)} stride0 {out.stride(0)} dtype {out.dtype}', flush=True)
    if args.check and out is not None:
        ref = bench.reference_logits(torch, q0, kv, w0, ctx0, bt0)
        res = bench.compare(torch, out, ref)
        tol = 5e-6 if dt == 'fp32' else 3e-5
        print(f'check vs torch reference: {res} -> {"PASS" if not res["nonfinite"] and res["calc_diff"] < tol else "FAIL"}',
              flush=True)
    return 0


if __name__ == '__main__':
    code = main()
    try:
        import bench as _bench  # hard_exit: skip the extension's C++ static destructors (see bench.py)
        _bench.hard_exit(code)
    except ImportError:
        os._exit(code)
