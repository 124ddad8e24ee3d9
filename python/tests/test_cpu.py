"""Tests that need no GPU: the package imports, its signatures, argument errors, and the CPU reference
against plain numpy implementations written here, on fresh random inputs."""
import importlib.metadata
import inspect
import math
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import flash_indexer as fi


def test_version_is_the_cmake_projects():
    # One source: project() in CMakeLists.txt; the extension and the wheel's metadata take it from there.
    cmake = pathlib.Path(__file__).resolve().parents[2] / "CMakeLists.txt"
    if cmake.exists():
        assert fi.__version__ == re.search(r"project\(flash_indexer VERSION ([0-9.]+)", cmake.read_text()).group(1)
    assert fi.__version__ == importlib.metadata.version("flash_indexer")


def test_imports_and_exports():
    for name in fi.__all__:
        assert hasattr(fi, name), name
    for name in ("paged_mqa_logits", "topk", "warm_paged_mqa_logits", "warm_topk", "current_stream"):
        assert getattr(fi, name).__doc__
    for name in ("topk", "coarse_bin", "coarse_histogram", "paged_mqa_logits", "mqa_logits", "topk_windows", "topk_merge"):
        assert getattr(fi.reference, name).__doc__


def test_signatures_take_the_stream_as_a_keyword():
    for fn in (fi.paged_mqa_logits, fi.topk):
        params = inspect.signature(fn).parameters
        assert params["stream"].kind is inspect.Parameter.KEYWORD_ONLY
        assert params["stream"].default is None
    assert list(inspect.signature(fi.topk).parameters)[:4] == ["logits", "lengths", "indices", "workspace"]


def test_programmatic_launch_is_an_opt_in_keyword():
    for fn in (fi.paged_mqa_logits, fi.mqa_logits, fi.topk, fi.topk_merge, fi.DecodePlan.__init__):
        params = inspect.signature(fn).parameters
        assert params["pdl"].kind is inspect.Parameter.KEYWORD_ONLY
        assert params["pdl"].default is False


def test_current_stream_takes_ints_and_stream_objects():
    class FakeStream:
        cuda_stream = 1234

    assert fi.current_stream(77) == 77
    assert fi.current_stream(FakeStream()) == 1234


def test_cpu_arrays_are_refused_naming_the_argument():
    logits = np.zeros((2, 300), np.float32)
    lengths = np.full(2, 300, np.int32)
    indices = np.zeros((2, 8), np.int32)
    workspace = np.zeros(fi.topk_workspace_bytes(2), np.uint8)
    with pytest.raises(ValueError, match="topk: logits: expected a CUDA tensor, got a CPU tensor"):
        fi.topk(logits, lengths, indices, workspace, stream=0)
    q = np.zeros((1, 1, 64, 128), np.uint8)
    with pytest.raises(ValueError, match="paged_mqa_logits: histogram: expected a CUDA tensor"):
        fi.paged_mqa_logits(q, q, q, q, q, q, stream=0, histogram=np.zeros((1, 1024), np.int32))


def test_bad_configurations_raise_value_error():
    with pytest.raises(ValueError, match="config.k: expected 1..4096, got 4097"):
        fi.DecodePlan(max_batch=1, next_n=1, heads=64, head_dim=128, k=4097)
    assert fi.MAX_TOPK == 4096
    # The plan's device memory is known without a GPU; a plan in torch's memory takes exactly that much.
    small = fi.DecodePlan.required_bytes(max_batch=1, next_n=1, heads=64, head_dim=128, k=2048, max_context=4096)
    large = fi.DecodePlan.required_bytes(max_batch=8, next_n=1, heads=64, head_dim=128, k=2048, max_context=4096)
    assert 0 < small < large and small % 256 == 0
    with pytest.raises(ValueError, match="config.k"):
        fi.DecodePlan.required_bytes(max_batch=1, next_n=1, heads=64, head_dim=128, k=0)
    with pytest.raises(ValueError, match="heads"):
        fi.DecodePlan(max_batch=1, next_n=1, heads=48, head_dim=128, k=2048)
    # The one-pass step: named where it does not apply; it counts the histogram whatever `histogram` says.
    with pytest.raises(ValueError, match="config.step: one_pass applies to"):
        fi.DecodePlan.required_bytes(max_batch=1, next_n=1, heads=16, head_dim=128, k=2048, step="one_pass")
    with pytest.raises(ValueError, match="step: expected automatic, two_kernels or one_pass, got 'fused'"):
        fi.DecodePlan(max_batch=1, next_n=1, heads=64, head_dim=128, k=2048, step="fused")
    bare = dict(max_batch=1, next_n=1, heads=64, head_dim=128, k=2048, max_context=4096, histogram=False)
    one = fi.DecodePlan.required_bytes(**bare, step="one_pass")
    assert one > fi.DecodePlan.required_bytes(**bare) and one % 256 == 0
    # The second level (candidates): its logits are the candidates' columns, whatever max_context.
    second = dict(max_batch=2, next_n=1, heads=64, head_dim=128, k=512, candidates=2048)
    assert fi.DecodePlan.required_bytes(**second, max_context=1 << 20) == fi.DecodePlan.required_bytes(**second)
    with pytest.raises(ValueError, match="config.candidate_block: expected 8 or 16, got 4"):
        fi.DecodePlan.required_bytes(**second, candidate_block=4)
    with pytest.raises(ValueError, match="logits dtype: expected float32, float16 or bfloat16"):
        fi.warm_topk("int8")
    with pytest.raises(ValueError, match="variant: expected automatic, portable or sm90"):
        fi.warm_paged_mqa_logits(1, 64, 128, variant="fast")
    with pytest.raises(ValueError, match="expected heads in"):
        fi.warm_paged_mqa_logits(1, 48, 128)
    with pytest.raises(ValueError, match=r"config.dcp.rank: expected 0..1 \(ranks - 1\), got 2"):
        fi.DecodePlan(max_batch=1, next_n=1, heads=64, head_dim=128, k=2048, dcp=(2, 2, 1))
    with pytest.raises(ValueError, match="DecodePlan: kv: expected fp8 or mxfp4, got 'fp4'"):
        fi.DecodePlan(max_batch=1, next_n=1, heads=64, head_dim=128, k=2048, kv="fp4")
    with pytest.raises(ValueError, match="the MXFP4 cache is built for"):
        fi.DecodePlan(max_batch=1, next_n=1, heads=16, head_dim=128, k=2048, kv="mxfp4")


def test_dcp_decode_plan_rejects_a_single_rank_and_a_null_communicator():
    with pytest.raises(ValueError, match="DcpDecodePlan: config.dcp.ranks: expected 2 or more"):
        fi.DcpDecodePlan(comm=0x1000, dcp=(1, 0, 1), max_batch=1, next_n=1, heads=64, head_dim=128, k=2048)
    with pytest.raises(ValueError, match="DcpDecodePlan: comm: expected an NCCL communicator, got null"):
        fi.DcpDecodePlan(comm=None, dcp=(2, 0, 64), max_batch=1, next_n=1, heads=64, head_dim=128, k=2048)


def test_cache_directory_override(tmp_path):
    before = fi.cache_directory()
    fi.set_cache_directory(str(tmp_path))
    try:
        assert fi.cache_directory() == str(tmp_path)
    finally:
        fi.set_cache_directory("")
    assert fi.cache_directory() == before


# The first JIT compile of a fresh process into an empty cache, through the package, with torch loaded
# first where it is installed: a build that carried its own C++ runtime crashed right there next to
# torch's (the build now refuses to produce one: cmake/check_cxx_runtime.cmake). A subprocess, so that
# nothing this test process loaded before counts.
FIRST_COMPILE = """
import importlib.util, os, sys
if importlib.util.find_spec("torch") is not None:
    import torch  # noqa: F401
import flash_indexer as fi
fi.warm_paged_mqa_logits(1, 64, 128, histogram=True, logits="float16", arch="sm_90a")
entries = [e for e in os.listdir(sys.argv[1]) if not e.startswith(".")]
assert len(entries) == 1 and entries[0].startswith("paged_mqa_logits.sm90.n1.h64.d128"), entries
assert os.path.isfile(os.path.join(sys.argv[1], entries[0], "kernel.cubin"))
print("compiled", entries[0])
"""


def test_first_jit_compile_in_a_fresh_process_with_an_empty_cache(tmp_path):
    env = dict(os.environ, FLASH_INDEXER_CACHE_DIR=str(tmp_path))
    run = subprocess.run([sys.executable, "-c", FIRST_COMPILE, str(tmp_path)], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "compiled paged_mqa_logits.sm90.n1.h64.d128" in run.stdout


def test_warm_for_an_arch_names_a_bad_one():
    with pytest.raises(ValueError, match="warm_topk: arch"):
        fi.warm_topk("float32", arch="sm_70")
    with pytest.raises(ValueError, match="warm_paged_mqa_logits: arch"):
        fi.warm_paged_mqa_logits(1, 64, 128, arch="hopper")


def numpy_topk(row, length, k):
    """Columns of the k largest non-NaN scores among the first `length`, ties to the lower column."""
    live = [(float(row[s]), s) for s in range(min(length, len(row))) if not math.isnan(row[s])]
    live.sort(key=lambda vs: (-vs[0], vs[1]))
    return [s for _, s in live[:k]]


@pytest.mark.parametrize("sorted_", [False, True])
def test_reference_topk_matches_numpy(sorted_):
    rng = np.random.default_rng()
    rows, width, k = 7, 500, 64
    logits = rng.standard_normal((rows, width)).astype(np.float32)
    logits[1, :] = np.round(logits[1, :])          # many ties
    logits[2, ::3] = np.nan                         # NaN never selected
    logits[3, :10] = np.inf
    logits[4, 5] = -0.0
    lengths = [width, width, width, 40, 0, 63, 1000]  # 0 and past the width included
    indices, values = fi.reference.topk(logits, lengths, k, sorted=sorted_)
    assert indices.shape == (rows, k) and indices.dtype == np.int32
    assert values.dtype == np.float32
    for r in range(rows):
        want = numpy_topk(logits[r], lengths[r], k)
        got = [int(i) for i in indices[r] if i >= 0]
        assert (sorted(got) if not sorted_ else got) == sorted(want), r
        assert all(i == -1 for i in indices[r][len(want):])
        assert np.all(np.isneginf(values[r][len(want):]))
        for i, v in zip(indices[r][:len(want)], values[r][:len(want)]):
            assert v == logits[r, i]


def test_coarse_bin_is_monotone_and_matches_the_contract():
    rng = np.random.default_rng()
    xs = np.concatenate([rng.standard_normal(2000) * 10.0 ** rng.integers(-6, 4, 2000),
                         [0.0, -0.0, 16.0, 17.0, 222.9, 223.0, 1e30, -1e30, np.inf, -np.inf]]).astype(np.float32)
    xs.sort()
    bins = [fi.reference.coarse_bin(float(x)) for x in xs]
    assert all(a >= b for a, b in zip(bins, bins[1:]))  # a larger score never lands in a larger bin
    assert fi.reference.coarse_bin(223.0) == 0 and fi.reference.coarse_bin(np.inf) == 0
    assert fi.reference.coarse_bin(0.0) == 511 and fi.reference.coarse_bin(-0.0) == 511
    assert fi.reference.coarse_bin(16.0) == 511 - 304 and fi.reference.coarse_bin(17.5) == 511 - 305
    assert fi.reference.coarse_bin(-np.inf) == 1023


def test_coarse_histogram_counts_live_non_nan_scores():
    rng = np.random.default_rng()
    logits = rng.standard_normal((3, 257)) * 5
    logits[0, 7] = np.nan
    lengths = [257, 100, 0]
    hist = fi.reference.coarse_histogram(logits, lengths, "float32")
    assert hist.shape == (3, 1024) and hist.dtype == np.int32
    assert hist[0].sum() == 256 and hist[1].sum() == 100 and hist[2].sum() == 0
    for s in range(100):
        assert hist[1, fi.reference.coarse_bin(float(np.float32(logits[1, s])))] > 0


def e4m3_values():
    """The float value of every FP8 E4M3 byte (0x7f / 0xff: NaN)."""
    out = np.zeros(256)
    for b in range(256):
        e, m = (b >> 3) & 0xF, b & 7
        if e == 0xF and m == 7:
            out[b] = np.nan
            continue
        mag = m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
        out[b] = -mag if b & 0x80 else mag
    return out


def assert_sum_close(got, scale, terms, where):
    """got equals scale times the sum of the head terms up to the rounding of a double sum in another
    order: the bound scales with the terms' magnitudes, not with the sum, which cancels towards 0 for
    some random weights (a relative tolerance on the sum fails such draws)."""
    want = float(scale) * float(np.sum(terms))
    assert abs(got - want) <= 1e-12 * float(scale) * float(np.sum(np.abs(terms))) + 1e-300, (where, got, want)


def random_fp8_paged_inputs(rng, B=2, n=2, H=16, D=64, blocks=6):
    """Finite random FP8 bytes for q and the keys, scales in [0.01, 0.1), normal weights; 1-D lengths
    [130, 64] (token j sees L - n + j + 1 keys) over a table of 3 blocks per request."""
    finite = np.array([b for b in range(256) if not np.isnan(e4m3_values()[b])], np.uint8)
    q = rng.choice(finite, (B, n, H, D)).astype(np.uint8)
    kv = np.zeros((blocks, 64, 1, D + 4), np.uint8)
    keys = rng.choice(finite, (blocks, 64, D)).astype(np.uint8)
    scales = rng.uniform(0.01, 0.1, (blocks, 64)).astype(np.float32)
    flat = kv.reshape(blocks, -1)
    flat[:, : 64 * D] = keys.reshape(blocks, -1)
    flat[:, 64 * D:] = scales.view(np.uint8).reshape(blocks, -1)
    weights = rng.standard_normal((B * n, H)).astype(np.float32)
    lens = np.array([130, 64], np.int32)
    table = np.array([[4, 1, 5], [0, 2, 3]], np.int32)
    return q, kv, keys, scales, weights, lens, table


def test_reference_paged_mqa_logits_matches_numpy():
    B, n = 2, 2
    table8 = e4m3_values()
    q, kv, keys, scales, weights, lens, table = random_fp8_paged_inputs(np.random.default_rng(), B, n)
    width = 192
    got = fi.reference.paged_mqa_logits(q, kv, weights, lens, table, width)
    assert got.shape == (B * n, width)
    for b in range(B):
        for j in range(n):
            r = b * n + j
            length = lens[b] - n + j + 1
            qf = table8[q[b, j]]                        # [H, D]
            for s in range(width):
                if s >= length:
                    assert np.isneginf(got[r, s])
                    continue
                blk = table[b, s // 64]
                k = table8[keys[blk, s % 64]]
                terms = weights[r] * np.maximum(qf @ k, 0.0)  # float64
                assert_sum_close(got[r, s], scales[blk, s % 64], terms, (r, s))


def test_reference_two_level_indexing():
    B, n = 2, 2
    q, kv, _, _, weights, lens, table = random_fp8_paged_inputs(np.random.default_rng(), B, n)
    full = fi.reference.paged_mqa_logits(q, kv, weights, lens, table, 192)
    rows = B * n
    row_lengths = [lens[r // n] - n + r % n + 1 for r in range(rows)]
    for block in (8, 16):
        # Second level: every kind of candidate (in range, the last partial block, -1, past the row, a duplicate).
        candidates = np.array([[0, (row_lengths[r] - 1) // block, -1, 99, 3, 3] for r in range(rows)], np.int32)
        sparse = fi.reference.sparse_paged_mqa_logits(q, kv, weights, lens, table, candidates, block)
        assert sparse.shape == (rows, 6 * block)
        for r in range(rows):
            for c in range(6):
                for o in range(block):
                    pos = candidates[r, c] * block + o
                    live = 0 <= candidates[r, c] < -(-row_lengths[r] // block) and pos < row_lengths[r]
                    assert sparse[r, c * block + o] == (full[r, pos] if live else -np.inf)
        # First level: the best blocks of each row by their largest score, ascending; -1 pads.
        best = fi.reference.top_blocks(full.astype(np.float32), row_lengths, block, 3)
        for r in range(rows):
            nblocks = -(-row_lengths[r] // block)
            maxima = [full[r, i * block: min((i + 1) * block, row_lengths[r])].astype(np.float32).max() for i in range(nblocks)]
            order = sorted(range(nblocks), key=lambda i: (-maxima[i], i))[:3]
            assert list(best[r]) == sorted(order) + [-1] * (3 - len(order))
        newest = fi.reference.top_blocks(full.astype(np.float32), row_lengths, block, 2, keep_newest=True)
        for r in range(rows):
            assert (-(-row_lengths[r] // block) - 1) in newest[r]


def test_reference_mqa_logits_matches_numpy():
    rng = np.random.default_rng()
    T, H, D, N = 5, 8, 64, 90
    table8 = e4m3_values()
    finite = np.array([b for b in range(256) if not np.isnan(table8[b])], np.uint8)
    q = rng.choice(finite, (T, H, D)).astype(np.uint8)
    kv = rng.choice(finite, (N, D)).astype(np.uint8)
    scales = rng.uniform(0.01, 0.1, N).astype(np.float32)
    weights = rng.standard_normal((T, H)).astype(np.float32)
    ks = np.array([0, 10, -4, 50, 80], np.int32)     # clamped below, and an empty window (ke <= ks)
    ke = np.array([1, 90, 30, 50, 200], np.int32)    # clamped above at N
    got = fi.reference.mqa_logits(q, kv, scales, weights, ks, ke)
    assert got.shape == (T, N)
    for t in range(T):
        start, end = min(max(ks[t], 0), N), min(max(ke[t], 0), N)
        qf = table8[q[t]]                               # [H, D]
        for s in range(N):
            if not start <= s < end:
                assert np.isneginf(got[t, s]), (t, s)
                continue
            terms = weights[t] * np.maximum(qf @ table8[kv[s]], 0.0)  # float64
            assert_sum_close(got[t, s], scales[s], terms, (t, s))
    with pytest.raises(ValueError, match="ke"):
        fi.reference.mqa_logits(q, kv, scales, weights, ks, ke[:2])


@pytest.mark.parametrize("relative", [False, True])
def test_reference_topk_windows_matches_numpy(relative):
    rng = np.random.default_rng()
    rows, width, k = 6, 200, 9
    logits = np.round(rng.standard_normal((rows, width)) * 4) / 4   # ties
    logits = logits.astype(np.float32)
    logits[0, 3] = np.nan
    starts = [0, 20, -5, 150, 100, 10]
    ends = [200, 60, 7, 400, 100, 15]
    indices, values = fi.reference.topk_windows(logits, starts, ends, k, relative=relative, sorted=False)
    for r in range(rows):
        start, end = min(max(starts[r], 0), width), min(max(ends[r], 0), width)
        cols = [s for s in range(start, max(start, end)) if not np.isnan(logits[r, s])]
        cols.sort(key=lambda s: (-logits[r, s], s))     # larger first, ties to the lower column
        want = cols[:k] + [-1] * (k - len(cols[:k]))
        got = [int(i) + (start if relative and i >= 0 else 0) for i in indices[r]]
        assert got == want, r
        assert all(np.isneginf(values[r, i]) for i in range(len(cols[:k]), k))


def test_reference_topk_merge_matches_numpy():
    rng = np.random.default_rng()
    D, rows, k_in, k = 3, 4, 10, 12
    values = (np.round(rng.standard_normal((D, rows, k_in)) * 2) / 2).astype(np.float32)  # ties
    positions = np.stack([np.stack([rng.permutation(100)[:k_in] + 100 * d for _ in range(rows)]) for d in range(D)])
    positions = positions.astype(np.int32)
    positions[0, 1, :4] = -1  # padding
    values[1, 2, 3] = np.nan
    indices, merged = fi.reference.topk_merge(values, positions, k, sorted=True)
    for r in range(rows):
        pool = [(float(values[d, r, i]), int(positions[d, r, i])) for d in range(D) for i in range(k_in)
                if positions[d, r, i] >= 0 and not np.isnan(values[d, r, i])]
        pool.sort(key=lambda c: (-c[0], c[1]))          # larger first, ties to the lower position
        want = sorted(p for _, p in pool[:k])
        assert list(indices[r]) == want + [-1] * (k - len(want)), r
    with pytest.raises(ValueError, match="positions: expected the shape of values"):
        fi.reference.topk_merge(values, positions[:, :2], k)


class FakeTensor:
    """Just enough of a torch tensor for the drop-in wrappers' argument handling."""

    def __init__(self, shape, device="cuda:0", dtype="float32"):
        shape = (shape,) if isinstance(shape, int) else tuple(shape)  # torch.empty takes both
        self.shape, self.device, self.dtype = shape, device, dtype

    def dim(self):
        return len(self.shape)

    def numel(self):
        return int(np.prod(self.shape))

    def as_strided(self, size, stride):
        return ("as_strided", tuple(size), tuple(stride))

    def reshape(self, *shape):
        return FakeTensor((self.numel(),) if shape == (-1,) else shape, self.device, self.dtype)

    def __getitem__(self, index):
        return ("rows", index)


def fake_torch():
    import types

    def empty(shape, dtype=None, device=None):
        return FakeTensor(shape, device, dtype)

    return types.SimpleNamespace(float32="float32", float16="float16", int32="int32", uint8="uint8",
                                 empty=empty, zeros=empty)


def test_deepgemm_compatible_logits_allocate_and_pass_through(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch", fake_torch())
    calls = []
    monkeypatch.setattr(fi, "paged_mqa_logits", lambda *a, **kw: calls.append((a, kw)))
    q = FakeTensor((3, 2, 64, 128))
    meta = fi.get_paged_mqa_logits_metadata(FakeTensor((3, 2)), 64, 132)
    assert meta.shape == (133, 2) and meta.dtype == "int32"
    hist = FakeTensor((6, 1024), dtype="int32")
    out = fi.fp8_paged_mqa_logits(q, "kv", "w", "lens", "table", meta, 5000, clean_logits=True,
                                  logits_dtype="float16", histogram=hist)
    assert out.shape == (6, 5000) and out.dtype == "float16" and out.device == "cuda:0"
    (args, kw), = calls
    assert args == (q, "kv", "w", "lens", "table", out)
    assert kw == {"fill_masked": True, "histogram": hist}
    out32 = fi.fp8_paged_mqa_logits(q, "kv", "w", "lens", "table", meta, 100)
    assert out32.dtype == "float32" and calls[-1][1]["fill_masked"] is False
    with pytest.raises(ValueError, match="block_kv: expected 64"):
        fi.get_paged_mqa_logits_metadata(FakeTensor((3, 2)), 32, 132)
    # DeepGEMM's keyword names and its current entry points, with (values, scales) queries.
    meta = fi.get_paged_mqa_logits_metadata(context_lens=FakeTensor((3, 2)), block_kv=64, num_sms=132, indices=None)
    assert meta.shape == (133, 2)
    with pytest.raises(ValueError, match="fp8_paged_mqa_logits: indices"):
        fi.fp8_paged_mqa_logits(q, "kv", "w", "lens", "table", meta, 100, False, "indices")
    # DeepGEMM's varlen form: request ids per query token, next_n 1; the call is the per-token one.
    with pytest.raises(ValueError, match="indices: expected next_n = 1"):
        fi.fp8_paged_mqa_logits(q, "kv", "w", "lens", "table", meta, 100, False, FakeTensor((3,), dtype="int32"))
    tokens = FakeTensor((5, 1, 64, 128))
    with pytest.raises(ValueError, match=r"indices: expected int32 \[5\]"):
        fi.fp8_paged_mqa_logits(tokens, "kv", "w", "lens", "table", meta, 100, False, FakeTensor((4,), dtype="int32"))
    calls.clear()
    fi.fp8_paged_mqa_logits(tokens, "kv", "w", "lens", "table", meta, 100, False, FakeTensor((5,), dtype="int32"))
    assert calls[-1][0][0] is tokens
    out = fi.fp8_fp4_paged_mqa_logits((q, None), "kv", "w", "lens", "table", meta, 100, clean_logits=False,
                                      logits_dtype="bfloat16")
    assert out.shape == (6, 100) and out.dtype == "bfloat16"
    assert calls[-1][0] == (q, "kv", "w", "lens", "table", out) and calls[-1][1]["q_scales"] is None
    packed, exponents = FakeTensor((3, 2, 64, 64), dtype="uint8"), FakeTensor((3, 2, 64), dtype="int32")
    fi.fp8_fp4_paged_mqa_logits((packed, exponents), "kv", "w", "lens", "table", meta, 100)
    assert calls[-1][0][0] is packed and calls[-1][1]["q_scales"] is exponents


def test_deepgemm_sparse_calls_check_their_arguments_before_any_work(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch", fake_torch())
    monkeypatch.setattr(fi, "sparse_paged_mqa_logits", lambda *a, **kw: pytest.fail("reached the kernel"))
    lens, table = FakeTensor((3,), dtype="int32"), FakeTensor((3, 5), dtype="int32")
    sparse = FakeTensor((3, 16), dtype="int32")
    meta = fi.get_paged_sparse_mqa_logits_metadata
    for kw, match in (({"page_kv": 128}, "page_kv: expected 64"),
                      ({"sparse_block_kv": 32}, "sparse_block_kv: expected 8 or 16"),
                      ({"qk_dtype": "torch.float16"}, "qk_dtype: expected torch.int8"),
                      ({"context_lens": FakeTensor((4,), dtype="int32")}, r"context_lens: expected int32 .*\[3, ...\]"),
                      ({"context_lens": FakeTensor((3, 2), dtype="int32")}, r"context_lens: expected \[3\] or \[3, 1\]"),
                      ({"block_table": FakeTensor((3, 5), dtype="int64")}, "block_table: expected int32"),
                      ({"block_table": FakeTensor((3, 0), dtype="int32")}, "block_table: expected at least one column"),
                      ({"sparse_kv_block_indices": FakeTensor((3,), dtype="int32")}, "sparse_kv_block_indices: expected"),
                      ({"indices": FakeTensor((2,), dtype="int32")}, r"indices: expected int32 \[3\]")):
        args = dict(context_lens=lens, block_table=table, indices=None, page_kv=64, sparse_kv_block_indices=sparse,
                    qk_dtype="torch.int8", sparse_block_kv=8)
        args.update(kw)
        with pytest.raises(ValueError, match="get_paged_sparse_mqa_logits_metadata: " + match):
            meta(**args)
    logits = fi.fp8_fp4_paged_sparse_mqa_logits
    packed, exponents = FakeTensor((3, 1, 32, 64), dtype="torch.int8"), FakeTensor((3, 1, 32), dtype="int32")
    words = 3 * (1 + 16 + 5)  # lengths, candidates and table of 3 tokens
    good = FakeTensor((4 * words,), dtype="torch.uint8")
    for args, match in ((((packed, exponents), "kv", "w", FakeTensor((4 * words - 4,), dtype="torch.uint8"), 16, 8),
                         r"metadata: expected .* 3 query tokens and num_max_sparse_blocks = 16"),
                        (((packed, exponents), "kv", "w", good, 21, 8), "metadata: expected"),
                        (((packed, exponents), "kv", "w", FakeTensor((words,), dtype="torch.int32"), 16, 8),
                         "metadata: expected"),
                        (((packed, exponents), "kv", "w", good, 16, 4), "sparse_block_kv: expected 8 or 16"),
                        (((packed, exponents), "kv", "w", good, 0, 8), "num_max_sparse_blocks: expected 1 or more"),
                        (((FakeTensor((3, 2, 32, 64), dtype="torch.int8"), exponents), "kv", "w", good, 16, 8),
                         r"q: expected \[T, 1, H, D\] values \(next_n 1\)"),
                        (((FakeTensor((3, 1, 32, 128), dtype="torch.float8_e4m3fn"), exponents), "kv", "w", good, 16, 8),
                         r"q: FP8 queries with UE8M0 scales \(MXFP8\) are not supported"),
                        ((packed, "kv", "w", good, 16, 8), r"q: expected \(values, scales\)")):
        with pytest.raises(ValueError, match="fp8_fp4_paged_sparse_mqa_logits: " + match):
            logits(*args)


def test_top_blocks_workspace_bytes_and_argument_errors():
    # The workspace grows with the rows' blocks and the dtype; a bad block is named before any GPU work.
    f32 = fi.top_blocks_workspace_bytes(4, 65536, 8, "float32")
    assert f32 > fi.top_blocks_workspace_bytes(4, 65536, 8, "bfloat16") > fi.top_blocks_workspace_bytes(4, 65536, 16, "bfloat16")
    assert f32 >= 4 * 8192 * 4 + fi.topk_workspace_bytes(4)
    with pytest.raises(ValueError, match="top_blocks_workspace_bytes: block: expected 1..1024"):
        fi.top_blocks_workspace_bytes(4, 65536, 0)
    with pytest.raises(ValueError, match="top_blocks_workspace_bytes: logits dtype"):
        fi.top_blocks_workspace_bytes(4, 65536, 8, "int8")


def test_deepgemm_sm_count_calls(monkeypatch):
    monkeypatch.setattr(fi, "_num_sms", None)
    fi.set_num_sms(100)
    assert fi.get_num_sms() == 100
    with pytest.raises(ValueError, match="set_num_sms: num_sms"):
        fi.set_num_sms(0)


def test_deepgemm_prefill_call_takes_tuples_and_the_logits_dtype(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch", fake_torch())
    calls = []
    monkeypatch.setattr(fi, "mqa_logits", lambda *a, **kw: calls.append((a, kw)))
    q, keys = FakeTensor((5, 64, 128)), FakeTensor((700, 128))
    out = fi.fp8_fp4_mqa_logits((q, None), (keys, "scales"), "w", "ks", "ke", clean_logits=False,
                                logits_dtype="bfloat16")
    assert out.shape == (5, 700) and out.dtype == "bfloat16"
    assert calls[-1] == ((q, keys, "scales", "w", "ks", "ke", out), {"fill_masked": False, "compressed": False})
    # The compressed layout: [T, max_seqlen_k], and (DeepGEMM's rule) only without clean_logits.
    out = fi.fp8_fp4_mqa_logits((q, None), (keys, "scales"), "w", "ks", "ke", False, 64)
    assert out.shape == (5, 64) and out.dtype == "float32"
    assert calls[-1] == ((q, keys, "scales", "w", "ks", "ke", out), {"fill_masked": False, "compressed": True})
    with pytest.raises(ValueError, match="clean_logits: expected False with max_seqlen_k > 0"):
        fi.fp8_fp4_mqa_logits((q, None), (keys, "scales"), "w", "ks", "ke", max_seqlen_k=64)
    with pytest.raises(ValueError, match="max_seqlen_k: expected 0"):
        fi.fp8_fp4_mqa_logits((q, None), (keys, "scales"), "w", "ks", "ke", False, -1)


def test_vllm_compatible_decode_topk_maps_its_arguments(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch", fake_torch())
    calls = []
    monkeypatch.setattr(fi, "topk", lambda *a, **kw: calls.append((a, kw)))
    monkeypatch.setattr(fi, "_workspaces", {})  # the fake workspace must not outlive the test (GPU tests reuse the cache)
    logits = FakeTensor((8, 65536))
    indices = FakeTensor((8, 2048), dtype="int32")
    seq_lens = FakeTensor((4,), dtype="int32")
    fi.top_k_per_row_decode(logits, 2, seq_lens, indices, 8, 70000, 1, 2048)
    (args, kw), = calls
    assert args[0] == ("as_strided", (8, 65536), (70000, 1))  # stride0 honoured
    assert args[1] is seq_lens and args[2] == ("rows", slice(None, 8))
    assert args[3].numel() >= fi.topk_workspace_bytes(8)
    assert kw == {"next_n": 2}  # 1-D seq_lens: the MTP rule
    fi.top_k_per_row_decode(logits, 2, FakeTensor((4, 2), dtype="int32"), indices, 8, 65536, 1, 2048)
    assert calls[-1][1] == {"next_n": 0}  # 2-D: a length per row
    fi.top_k_per_row_decode(logits, 2, FakeTensor((4, 1), dtype="int32"), indices, 8, 65536, 1, 2048)
    assert calls[-1][0][1].shape == (4,) and calls[-1][1] == {"next_n": 2}  # vLLM's [B, 1]: the MTP rule
    with pytest.raises(ValueError, match="stride1: expected 1, got 2"):
        fi.top_k_per_row_decode(logits, 1, seq_lens, indices, 8, 65536, 2, 2048)
    with pytest.raises(ValueError, match="top_k: expected 1..4096, got 4097"):
        fi.top_k_per_row_decode(logits, 1, seq_lens, indices, 8, 65536, 1, 4097)
    with pytest.raises(ValueError, match="indices: expected"):
        fi.top_k_per_row_decode(logits, 1, seq_lens, FakeTensor((8, 512)), 8, 65536, 1, 2048)


def test_vllm_compatible_prefill_topk_maps_its_arguments(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch", fake_torch())
    calls = []
    monkeypatch.setattr(fi, "topk", lambda *a, **kw: calls.append((a, kw)))
    monkeypatch.setattr(fi, "_workspaces", {})  # the fake workspace must not outlive the test (GPU tests reuse the cache)
    logits = FakeTensor((6, 40000))
    indices = FakeTensor((6, 2048), dtype="int32")
    starts, ends = FakeTensor((6,), dtype="int32"), FakeTensor((6,), dtype="int32")
    fi.top_k_per_row_prefill(logits, starts, ends, indices, 5, 40064, 1, 2048)
    (args, kw), = calls
    assert args[0] == ("as_strided", (5, 40000), (40064, 1))  # stride0 honoured
    assert args[1] == ("rows", slice(None, 5)) and args[2] == ("rows", slice(None, 5))  # the window ends
    assert args[3].numel() >= fi.topk_workspace_bytes(5)
    assert kw == {"row_starts": ("rows", slice(None, 5)), "relative": True}  # offsets from the window start
    with pytest.raises(ValueError, match="stride1: expected 1, got 3"):
        fi.top_k_per_row_prefill(logits, starts, ends, indices, 5, 40064, 3, 2048)
    with pytest.raises(ValueError, match="top_k: expected 1..4096, got 0"):
        fi.top_k_per_row_prefill(logits, starts, ends, indices, 5, 40064, 1, 0)
    with pytest.raises(ValueError, match="row_ends: expected"):
        fi.top_k_per_row_prefill(logits, starts, FakeTensor((4,), dtype="int32"), indices, 5, 40064, 1, 2048)
    with pytest.raises(ValueError, match="row_starts: expected"):
        fi.top_k_per_row_prefill(logits, FakeTensor((5, 1), dtype="int32"), ends, indices, 5, 40064, 1, 2048)


def test_deepgemm_compatible_prefill_logits_allocate_and_pass_through(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch", fake_torch())
    calls = []
    monkeypatch.setattr(fi, "mqa_logits", lambda *a, **kw: calls.append((a, kw)))
    q, keys, scales = FakeTensor((9, 64, 128)), FakeTensor((700, 128)), FakeTensor((700,))
    out = fi.fp8_mqa_logits(q, (keys, scales), "w", "ks", "ke")
    assert out.shape == (9, 700) and out.dtype == "float32" and out.device == "cuda:0"
    (args, kw), = calls
    assert args == (q, keys, scales, "w", "ks", "ke", out) and kw == {"fill_masked": True, "compressed": False}
    fi.fp8_mqa_logits(q, (keys, scales), "w", "ks", "ke", clean_logits=False)
    assert calls[-1][1] == {"fill_masked": False, "compressed": False}
    out = fi.fp8_mqa_logits(q, (keys, scales), "w", "ks", "ke", clean_logits=False, max_seqlen_k=300)
    assert out.shape == (9, 300) and calls[-1][1] == {"fill_masked": False, "compressed": True}
    with pytest.raises(ValueError, match="clean_logits: expected False"):
        fi.fp8_mqa_logits(q, (keys, scales), "w", "ks", "ke", max_seqlen_k=4096)


def test_fp8_queries_cross_as_their_bytes(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch", fake_torch())

    class Fp8Tensor(FakeTensor):
        def view(self, dtype):
            return ("bytes of", self, dtype)

    q = Fp8Tensor((1, 1, 64, 128), dtype="torch.float8_e4m3fn")
    assert fi._fp8_bytes(q) == ("bytes of", q, "uint8")
    other = FakeTensor((2, 2), dtype="torch.float32")
    assert fi._fp8_bytes(other) is other
    # uint8 bytes are accepted where q is FP8: a CPU array is still refused for being on the CPU.
    with pytest.raises(ValueError, match="paged_mqa_logits: q: expected a CUDA tensor"):
        z = np.zeros(4, np.int32)
        fi.paged_mqa_logits(np.zeros((1, 1, 64, 128), np.uint8), z, z, z, z, z, stream=0)
    # The MXFP4 query's exponents are checked as the other arguments are.
    with pytest.raises(ValueError, match="paged_mqa_logits: q_scales: expected a CUDA tensor"):
        fi.paged_mqa_logits(np.zeros((1, 1, 64, 64), np.uint8), z, z, z, z, z, stream=0,
                            q_scales=np.zeros((1, 1, 64), np.int32))


def test_model_presets():
    presets = fi.indexer_presets()
    names = [p["name"] for p in presets]
    assert len(names) == len(set(names)) and "deepseek-v4-flash" in names and "glm-5" in names
    flash = fi.indexer_preset("V4-Flash")
    assert flash["name"] == "deepseek-v4-flash" and flash["k"] == 512 and flash["kv"] == "mxfp4"
    with pytest.raises(ValueError, match="indexer_preset: name: no preset 'v5'"):
        fi.indexer_preset("v5")
    # Every preset is a configuration the plan takes (its memory is known without a GPU).
    fields = ("heads", "head_dim", "k", "kv", "next_n", "max_context")
    for p in presets:
        assert fi.DecodePlan.required_bytes(max_batch=1, **{key: p[key] for key in fields}) > 0
    # from_preset passes the keywords given beside the preset on to the plan, in place of its fields.
    with pytest.raises(ValueError, match="config.k: expected 1..4096, got 4097"):
        fi.DecodePlan.from_preset("glm-5", max_batch=1, k=4097)
    with pytest.raises(ValueError, match="no preset 'glm-6'"):
        fi.DecodePlan.from_preset("glm-6", max_batch=1)
