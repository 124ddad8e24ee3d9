"""GPU tests through torch (skipped without torch and a CUDA device): the ops against the CPU reference
on fresh random tensors with exact-arithmetic values (small integers, power-of-two scales), so the GPU
logits equal the reference bit for bit, and a CUDA-graph capture of DecodePlan.run."""
import math

import numpy as np
import pytest

import flash_indexer as fi

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def make_paged_inputs(rng, B, n, H, D, lengths, spare_blocks=3):
    """Exact-arithmetic inputs: q and k in -4..4, weights in steps of 1/8, scales 2^-4..2^-11."""
    small = np.array([0x00, 0x38, 0x40, 0x44, 0x48, 0xB8, 0xC0, 0xC4, 0xC8], np.uint8)  # 0, +-1, +-2, +-3, +-4
    need = [(lengths[b] + 63) // 64 for b in range(B)]
    blocks = sum(need) + spare_blocks
    max_blocks = max(need) + 1
    q = rng.choice(small, (B, n, H, D)).astype(np.uint8)
    kv = np.zeros((blocks, 64, 1, D + 4), np.uint8)
    flat = kv.reshape(blocks, -1)
    flat[:, : 64 * D] = rng.choice(small, (blocks, 64 * D))
    scales = (2.0 ** -rng.integers(4, 12, (blocks, 64))).astype(np.float32)
    flat[:, 64 * D:] = scales.view(np.uint8).reshape(blocks, -1)
    weights = (rng.integers(-16, 17, (B * n, H)) / 8).astype(np.float32)
    pool = rng.permutation(blocks)
    table = np.full((B, max_blocks), -1, np.int32)
    at = 0
    for b in range(B):
        table[b, : need[b]] = pool[at: at + need[b]]
        at += need[b]
    lens = np.array(lengths, np.int32)
    return q, kv, weights, lens, table


def to_cuda(a, dtype=None):
    t = torch.from_numpy(np.ascontiguousarray(a)).cuda()
    return t.view(dtype) if dtype is not None else t


def reference_topk_sets(logits, lengths, k):
    idx, _ = fi.reference.topk(logits.astype(np.float32), lengths, k)
    return [sorted(int(i) for i in row if i >= 0) for row in idx]


def test_prefill_topk_equals_the_reference_over_windows():
    rng = np.random.default_rng()
    rows, width, k = 7, 9000, 256
    logits = rng.integers(-40, 40, (rows, width)).astype(np.float32) / 4  # many ties
    starts = np.array([0, 1, 333, 5000, 8990, 4000, 100], np.int32)
    ends = np.array([9000, 8999, 4000, 5200, 9000, 4000, 50], np.int32)  # row 5 empty, row 6 ends before it starts
    t = to_cuda(logits)
    indices = torch.full((rows, k), 0x7D7D7D7D, dtype=torch.int32, device="cuda")
    fi.top_k_per_row_prefill(t, to_cuda(starts), to_cuda(ends), indices, rows, t.stride(0), t.stride(1), k)
    torch.cuda.synchronize()
    got = indices.cpu().numpy()
    for r in range(rows):
        window = logits[r, starts[r]: max(starts[r], ends[r])]
        want = reference_topk_sets(window[None, :], [len(window)], k)[0]  # offsets from the window start
        row = [int(i) for i in got[r]]
        chosen = [i for i in row if i >= 0]
        assert chosen == want, r  # ascending offsets, the reference's set
        assert row[len(chosen):] == [-1] * (k - len(chosen)), r


def test_decode_topk_of_a_broadcast_row_equals_the_reference():
    # One row expanded to all rows (row stride 0), as vLLM's tests pass it, each row with its own length.
    rng = np.random.default_rng()
    rows, width, k = 6, 7000, 512
    row = rng.integers(-60, 60, width).astype(np.float32) / 8  # many ties
    t = to_cuda(row[None, :]).expand(rows, width)
    assert t.stride(0) == 0
    lens = np.array([7000, 6999, 4000, 512, 100, 0], np.int32)
    indices = torch.full((rows, k), 0x7D7D7D7D, dtype=torch.int32, device="cuda")
    fi.top_k_per_row_decode(t, 1, to_cuda(lens), indices, rows, t.stride(0), t.stride(1), k)
    torch.cuda.synchronize()
    want = reference_topk_sets(np.repeat(row[None, :], rows, 0), lens, k)
    for r, got in enumerate(indices.cpu().numpy()):
        assert sorted(int(i) for i in got if i >= 0) == want[r], r
        assert (got >= 0).sum() == min(k, lens[r]), r


def test_prefill_logits_equal_the_reference():
    rng = np.random.default_rng()
    T, H, D, N = 13, 32, 64, 333
    small = np.array([0x00, 0x38, 0x40, 0x44, 0x48, 0xB8, 0xC0, 0xC4, 0xC8], np.uint8)  # 0, +-1, +-2, +-3, +-4
    q = rng.choice(small, (T, H, D)).astype(np.uint8)
    kv = rng.choice(small, (N, D)).astype(np.uint8)
    scales = (2.0 ** -rng.integers(4, 12, N)).astype(np.float32)
    weights = (rng.integers(-16, 17, (T, H)) / 8).astype(np.float32)
    ke = np.array([N - T + t + 1 for t in range(T)], np.int32)  # causal
    ks = np.maximum(ke - 100, 0).astype(np.int32)
    ks[3], ke[3] = 50, 50  # an empty window
    logits = fi.fp8_mqa_logits(to_cuda(q, torch.float8_e4m3fn), (to_cuda(kv, torch.float8_e4m3fn), to_cuda(scales)),
                               to_cuda(weights), to_cuda(ks), to_cuda(ke))
    torch.cuda.synchronize()
    want = fi.reference.mqa_logits(q, kv, scales, weights, ks, ke)
    assert logits.shape == (T, N) and logits.dtype == torch.float32
    assert np.array_equal(logits.cpu().numpy().astype(np.float64), want.astype(np.float32).astype(np.float64))

def test_cpu_tensor_is_refused():
    logits = torch.zeros(2, 100)
    with pytest.raises(ValueError, match="logits: expected a CUDA tensor, got a CPU tensor"):
        fi.topk(logits, torch.zeros(2, dtype=torch.int32), torch.zeros(2, 4, dtype=torch.int32),
                torch.zeros(64, dtype=torch.uint8))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_topk_equals_the_reference(dtype):
    rng = np.random.default_rng()
    rows, width, k = 6, 5000, 512
    host = rng.standard_normal((rows, width)).astype(np.float32)
    host[1] = np.round(host[1] * 2)  # ties
    host[2, ::7] = np.nan
    lengths = [width, width, width, 0, 513, 4000]
    logits = torch.from_numpy(host).cuda().to(dtype)
    stored = logits.float().cpu().numpy()  # the values as stored
    indices = torch.full((rows, k), 0x7D7D7D7D, dtype=torch.int32, device="cuda")
    workspace = torch.empty(fi.topk_workspace_bytes(rows), dtype=torch.uint8, device="cuda")
    fi.topk(logits, torch.tensor(lengths, dtype=torch.int32, device="cuda"), indices, workspace)
    torch.cuda.synchronize()
    got = [sorted(int(i) for i in row if i >= 0) for row in indices.cpu().numpy()]
    assert got == reference_topk_sets(stored, lengths, k)


@pytest.mark.parametrize("logits_dtype", [torch.float32, torch.float16])
def test_paged_mqa_logits_and_histogram_equal_the_reference(logits_dtype):
    rng = np.random.default_rng()
    B, n, H, D = 3, 2, 32, 128
    lengths = [700, 0, 129]
    q, kv, weights, lens, table = make_paged_inputs(rng, B, n, H, D, lengths)
    width = 768
    logits = torch.full((B * n, width), float("nan"), dtype=logits_dtype, device="cuda")
    hist = torch.zeros(B * n, 1024, dtype=torch.int32, device="cuda")
    fi.paged_mqa_logits(to_cuda(q, torch.float8_e4m3fn), to_cuda(kv), to_cuda(weights), to_cuda(lens),
                        to_cuda(table), logits, fill_masked=True, histogram=hist)
    torch.cuda.synchronize()
    want = fi.reference.paged_mqa_logits(q, kv, weights, lens, table, width)
    got = logits.float().cpu().numpy().astype(np.float64)
    want_stored = torch.from_numpy(want).to(logits_dtype).double().numpy()
    assert np.array_equal(np.isneginf(got), np.isneginf(want_stored))
    live = ~np.isneginf(want_stored)
    assert np.array_equal(got[live], want_stored[live])
    row_lengths = [max(0, lengths[r // n] - n + r % n + 1) for r in range(B * n)]
    name = "float32" if logits_dtype == torch.float32 else "float16"
    assert np.array_equal(hist.cpu().numpy(), fi.reference.coarse_histogram(want, row_lengths, name))


@pytest.mark.parametrize("block", [8, 16])
def test_sparse_paged_mqa_logits_equal_the_reference_at_the_candidates(block):
    rng = np.random.default_rng()
    B, n, H, D = 3, 2, 64, 128
    lengths = [700, 0, 129]
    q, kv, weights, lens, table = make_paged_inputs(rng, B, n, H, D, lengths)
    width = 768
    want = fi.reference.paged_mqa_logits(q, kv, weights, lens, table, width)
    rows, C = B * n, 50
    row_lengths = [max(0, lengths[r // n] - n + r % n + 1) for r in range(rows)]
    candidates = rng.integers(-2, 700 // block + 3, (rows, C)).astype(np.int32)
    logits = fi.sparse_paged_mqa_logits(to_cuda(q, torch.float8_e4m3fn), to_cuda(kv), to_cuda(weights), to_cuda(lens),
                                        to_cuda(table), to_cuda(candidates), block)
    torch.cuda.synchronize()
    assert logits.shape == (rows, C * block) and logits.dtype == torch.float32
    got = logits.cpu().numpy().astype(np.float64)
    for r in range(rows):
        blocks = -(-row_lengths[r] // block)
        for c in range(C):
            for o in range(block):
                pos = int(candidates[r, c]) * block + o
                live = 0 <= candidates[r, c] < blocks and pos < row_lengths[r]
                assert got[r, c * block + o] == (want[r, pos] if live else -np.inf), (r, c, o)


@pytest.mark.parametrize("block", [8, 16])
def test_second_level_topk_in_one_call_writes_live_context_positions(block):
    rng = np.random.default_rng()
    B, n, H, D, k = 2, 1, 64, 128, 40
    lengths = [900, 30]
    q, kv, weights, lens, table = make_paged_inputs(rng, B, n, H, D, lengths)
    want = fi.reference.paged_mqa_logits(q, kv, weights, lens, table, 1024).astype(np.float32)
    rows, C = B * n, 12
    # Unique blocks of each row, some past it and -1; row 1 has fewer than k live positions.
    candidates = np.full((rows, C), -1, dtype=np.int32)
    for r in range(rows):
        picks = rng.permutation(-(-lengths[r] // block) + 2)[:C - 2]
        candidates[r, :len(picks)] = picks
    logits = fi.sparse_paged_mqa_logits(to_cuda(q, torch.float8_e4m3fn), to_cuda(kv), to_cuda(weights), to_cuda(lens),
                                        to_cuda(table), to_cuda(candidates), block, masked_nan=True)
    indices = torch.full((rows, k), 12345, dtype=torch.int32, device="cuda")
    workspace = torch.empty(fi.topk_workspace_bytes(rows), dtype=torch.uint8, device="cuda")
    width = torch.full((rows,), C * block, dtype=torch.int32, device="cuda")
    fi.topk(logits, width, indices, workspace, block_table=to_cuda(candidates), block_size=block)
    # DecodePlan's second level does both in one call: the same bytes.
    plan = fi.DecodePlan(max_batch=B, next_n=n, heads=H, head_dim=D, k=k, logits=logits.dtype, candidates=C,
                         candidate_block=block)
    from_plan = torch.full_like(indices, 12345)
    plan.run(to_cuda(q, torch.float8_e4m3fn), to_cuda(kv), to_cuda(weights), to_cuda(lens), to_cuda(table), from_plan,
             candidates=to_cuda(candidates))
    torch.cuda.synchronize()
    assert torch.equal(from_plan, indices)
    got = indices.cpu().numpy()
    for r in range(rows):
        live = sorted({int(c) * block + o for c in candidates[r] if 0 <= c < -(-lengths[r] // block)
                       for o in range(block) if int(c) * block + o < lengths[r]})
        scores = sorted((want[r, p] for p in live), reverse=True)[:k]
        picked = [int(p) for p in got[r] if p != -1]
        assert set(picked) <= set(live) and len(picked) == len(set(picked)) == min(k, len(live))
        assert sorted((want[r, p] for p in picked), reverse=True) == scores
        assert list(got[r]).count(-1) == k - len(picked)


def make_mxfp4_paged_inputs(rng, B, H, lengths, spare_blocks=3):
    """Random MXFP4 bytes (every E2M1 code) with exponents 2^-8..2^2, D 128, next_n 1; the table as
    make_paged_inputs'."""
    need = [(length + 63) // 64 for length in lengths]
    blocks = sum(need) + spare_blocks
    kv = np.zeros((blocks, 64, 1, 68), np.uint8)
    flat = kv.reshape(blocks, -1)
    flat[:, : 64 * 64] = rng.integers(0, 256, (blocks, 64 * 64))
    flat[:, 64 * 64:] = rng.integers(119, 130, (blocks, 64 * 4))
    q = rng.integers(0, 256, (B, 1, H, 64)).astype(np.uint8)
    q_sf = rng.integers(119, 130, (B, 1, H, 4)).astype(np.uint8).view(np.int32).reshape(B, 1, H)
    weights = (rng.integers(-16, 17, (B, H)) / 8).astype(np.float32)
    pool = rng.permutation(blocks)
    table = np.full((B, max(need) + 1), -1, np.int32)
    at = 0
    for b in range(B):
        table[b, : need[b]] = pool[at: at + need[b]]
        at += need[b]
    return q, q_sf, kv, weights, np.array(lengths, np.int32), table


def deepgemm_sparse_rows(rng, lengths, C, block, padding):
    """DeepGEMM's candidate rows: the first min(C, ceil(len / block)) entries unique, ascending blocks of the
    row, the rest `padding` (None: repeats of the last block, as DeepGEMM's test pads)."""
    rows = np.zeros((len(lengths), C), np.int32)
    for r, length in enumerate(lengths):
        blocks = -(-length // block)
        live = sorted(rng.choice(blocks, size=min(C, blocks), replace=False)) if blocks else []
        rows[r, : len(live)] = live
        rows[r, len(live):] = (live[-1] if live else 0) if padding is None else padding
    return rows


@pytest.mark.parametrize("block", [8, 16])
def test_deepgemm_sparse_drop_ins_equal_the_full_context_logits(block):
    # fp8_fp4_paged_sparse_mqa_logits over get_paged_sparse_mqa_logits_metadata, by DeepGEMM's keywords: at
    # each live candidate position the MXFP4 full-context logits bit for bit, -inf where DeepGEMM writes
    # nothing (entries past a token's count, positions past its length), bfloat16 weights as DeepGEMM's.
    rng = np.random.default_rng()
    H, C = 32, 24
    lengths = [700, 0, 129, 5, 3000]
    q, q_sf, kv, weights, lens, table = make_mxfp4_paged_inputs(rng, len(lengths), H, lengths)
    T = len(lengths)
    width = (max(lengths) + 63) // 64 * 64
    tq, tsf, tkv, tw = to_cuda(q), to_cuda(q_sf), to_cuda(kv), to_cuda(weights)
    dense = fi.fp8_fp4_paged_mqa_logits((tq, tsf), tkv, tw, to_cuda(lens), to_cuda(table), None, width,
                                        logits_dtype=torch.bfloat16).view(torch.int16).cpu().numpy()
    for padding in (None, -1, 2**31 - 1):
        sparse = deepgemm_sparse_rows(rng, lengths, C, block, padding)
        meta = fi.get_paged_sparse_mqa_logits_metadata(
            context_lens=to_cuda(lens), block_table=to_cuda(table), indices=torch.arange(T, dtype=torch.int32,
                                                                                        device="cuda"),
            page_kv=64, sparse_kv_block_indices=to_cuda(sparse), qk_dtype=torch.int8, sparse_block_kv=block)
        logits = fi.fp8_fp4_paged_sparse_mqa_logits(q=(tq.view(torch.int8), tsf), kv_cache=tkv,
                                                    weights=tw.to(torch.bfloat16), metadata=meta,
                                                    num_max_sparse_blocks=C, sparse_block_kv=block)
        torch.cuda.synchronize()
        assert logits.shape == (T, C * block) and logits.dtype == torch.bfloat16
        got = logits.view(torch.int16).cpu().numpy()
        minus_inf = np.array([0xFF80], np.uint16).view(np.int16)[0]
        for r in range(T):
            count = min(C, -(-lengths[r] // block))
            for c in range(C):
                for o in range(block):
                    pos = int(sparse[r, c]) * block + o
                    want = dense[r, pos] if c < count and pos < lengths[r] else minus_inf
                    assert got[r, c * block + o] == want, (padding, r, c, o)


def test_deepgemm_sparse_drop_in_with_the_fp8_cache_and_under_torch_compile():
    # (q, None) with the FP8 cache: the CPU reference, rounded once to bfloat16; the same through
    # torch.compile(fullgraph=True) (the metadata's torch ops and the custom op's fake).
    rng = np.random.default_rng()
    H, C, block = 64, 20, 8
    lengths = [500, 77, 0]
    T = len(lengths)
    q, kv, weights, lens, table = make_paged_inputs(rng, T, 1, H, 128, lengths)
    sparse = deepgemm_sparse_rows(rng, lengths, C, block, None)
    masked = sparse.copy()
    for r in range(T):
        masked[r, min(C, -(-lengths[r] // block)):] = -1
    want = fi.reference.sparse_paged_mqa_logits(q, kv, weights, lens, table, masked, block)
    want = torch.from_numpy(want.astype(np.float32)).to(torch.bfloat16)
    args = (to_cuda(q, torch.float8_e4m3fn), to_cuda(kv), to_cuda(weights), to_cuda(lens), to_cuda(table),
            to_cuda(sparse))

    def step(q_, kv_, w_, lens_, table_, sparse_):
        meta = fi.get_paged_sparse_mqa_logits_metadata(lens_, table_, None, 64, sparse_, q_.dtype, block)
        return torch.ops.flash_indexer.fp8_fp4_paged_sparse_mqa_logits(q_, None, kv_, w_, meta, C, block)

    for fn in (step, torch.compile(step, fullgraph=True)):
        logits = fn(*args)
        torch.cuda.synchronize()
        assert torch.equal(logits.cpu().view(torch.int16), want.view(torch.int16))


@pytest.mark.parametrize("keep_newest", [False, True])
def test_top_blocks_equal_the_reference_and_feed_the_second_level(keep_newest):
    # The first level on the GPU: reference.top_blocks' ids for rows with ties, NaN and +-inf, in float32
    # and bfloat16; its ids are the candidates sparse_paged_mqa_logits takes.
    rng = np.random.default_rng()
    rows, width, block, k = 6, 5000, 8, 64
    scores = rng.integers(-20, 21, (rows, width)).astype(np.float32) / 4
    scores[rng.random((rows, width)) < 0.05] = np.nan
    scores[rng.random((rows, width)) < 0.02] = np.inf
    scores[rng.random((rows, width)) < 0.02] = -np.inf
    lengths = np.array([0, 1, 9, 700, width, 4999], np.int32)
    for dtype in (torch.float32, torch.bfloat16):
        logits = torch.from_numpy(scores).to(dtype).cuda()
        want = fi.reference.top_blocks(logits.float().cpu().numpy(), [int(x) for x in lengths], block, k,
                                       keep_newest=keep_newest)
        blocks = torch.full((rows, k), 12345, dtype=torch.int32, device="cuda")
        fi.top_blocks(logits, to_cuda(lengths), block, blocks, keep_newest=keep_newest)
        torch.cuda.synchronize()
        assert np.array_equal(blocks.cpu().numpy(), want)


def test_decode_plan_publishes_the_first_level_of_its_step():
    # plan.top_blocks after plan.run: the reference's blocks of the reference logits, the MTP rule's lengths.
    rng = np.random.default_rng()
    B, n, H, D, k, block, k_blocks = 2, 2, 64, 128, 128, 8, 50
    lengths = [1000, 300]
    q, kv, weights, lens, table = make_paged_inputs(rng, B, n, H, D, lengths)
    plan = fi.DecodePlan(max_batch=B, next_n=n, heads=H, head_dim=D, k=k, logits="float32", max_context=1024)
    indices = torch.empty((B * n, k), dtype=torch.int32, device="cuda")
    plan.run(to_cuda(q, torch.float8_e4m3fn), to_cuda(kv), to_cuda(weights), to_cuda(lens), to_cuda(table), indices)
    blocks = torch.full((B * n, k_blocks), 12345, dtype=torch.int32, device="cuda")
    plan.top_blocks(to_cuda(lens), block, blocks)
    torch.cuda.synchronize()
    want = fi.reference.paged_mqa_logits(q, kv, weights, lens, table, plan.width).astype(np.float32)
    row_lengths = [lengths[r // n] - n + r % n + 1 for r in range(B * n)]
    assert np.array_equal(blocks.cpu().numpy(),
                          fi.reference.top_blocks(want, row_lengths, block, k_blocks, keep_newest=True))


@pytest.mark.parametrize("pdl", [False, True])
def test_decode_plan_replays_under_a_cuda_graph(pdl):
    rng = np.random.default_rng()
    B, n, H, D, k, max_context = 4, 1, 64, 128, 256, 4096
    plan = fi.DecodePlan(max_batch=B, next_n=n, heads=H, head_dim=D, k=k, logits=torch.float32,
                         max_context=max_context, pdl=pdl)
    # The plan works in a buffer of torch's caching allocator, exactly its required size.
    need = fi.DecodePlan.required_bytes(max_batch=B, next_n=n, heads=H, head_dim=D, k=k, logits="float32",
                                        max_context=max_context)
    assert isinstance(plan.memory, torch.Tensor) and plan.memory.dtype == torch.uint8 and plan.memory.is_cuda
    assert plan.memory.numel() == need == plan.workspace_bytes
    q, kv, weights, lens, table = make_paged_inputs(rng, B, n, H, D, [max_context] * B)
    tq, tkv, tw = to_cuda(q, torch.float8_e4m3fn), to_cuda(kv), to_cuda(weights)
    tlens, ttable = to_cuda(lens), to_cuda(table)
    indices = torch.empty(B * n, k, dtype=torch.int32, device="cuda")
    plan.run(tq, tkv, tw, tlens, ttable, indices)  # loads nothing new: the plan warmed its kernels
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        plan.run(tq, tkv, tw, tlens, ttable, indices)
    for replay in range(3):
        new_lens = rng.integers(0, max_context + 1, B).astype(np.int32)
        new_lens[replay] = 0
        tlens.copy_(torch.from_numpy(new_lens))
        indices.fill_(0x7D7D7D7D)
        graph.replay()
        torch.cuda.synchronize()
        ref = fi.reference.paged_mqa_logits(q, kv, weights, new_lens, table, plan.width)
        row_lengths = [int(x) for x in new_lens]
        want = reference_topk_sets(ref, row_lengths, k)
        got = [sorted(int(i) for i in row if i >= 0) for row in indices.cpu().numpy()]
        assert got == want, replay
        assert math.isfinite(float(indices.float().sum()))


def test_decode_plan_takes_the_callers_memory_and_checks_it():
    config = dict(max_batch=2, next_n=1, heads=64, head_dim=128, k=512, max_context=2048)
    need = fi.DecodePlan.required_bytes(**config)
    buffer = torch.empty(need + 512, dtype=torch.uint8, device="cuda")
    plan = fi.DecodePlan(**config, memory=buffer[:need])
    assert plan.memory.data_ptr() == buffer.data_ptr()
    with pytest.raises(ValueError, match="memory.bytes: expected at least"):
        fi.DecodePlan(**config, memory=buffer[: need - 256])
    with pytest.raises(ValueError, match="memory.data: expected a 256-byte aligned"):
        fi.DecodePlan(**config, memory=buffer[16: need + 16])
    with pytest.raises(ValueError, match="memory: expected a contiguous, non-empty 1-D uint8"):
        fi.DecodePlan(**config, memory=buffer.view(torch.int32))


def test_topk_merge_equals_the_reference():
    rng = np.random.default_rng()
    D, rows, k_in, k = 4, 6, 256, 300
    values = (np.round(rng.standard_normal((D, rows, k_in)) * 4) / 4).astype(np.float32)
    positions = np.stack([np.stack([rng.permutation(D * k_in)[:k_in] * D + d for _ in range(rows)]) for d in range(D)])
    positions = positions.astype(np.int32)
    positions[2, 0, :100] = -1
    want, want_values = fi.reference.topk_merge(values, positions, k, sorted=True)
    indices = torch.full((rows, k), 0x7D7D7D7D, dtype=torch.int32, device="cuda")
    merged = torch.empty(rows, k, dtype=torch.float32, device="cuda")
    owned = torch.empty(rows, k, dtype=torch.int32, device="cuda")
    fi.topk_merge(to_cuda(values).half(), to_cuda(positions), indices, out_values=merged, owned=owned, ranks=D,
                  rank=1, interleave=1)
    torch.cuda.synchronize()
    assert np.array_equal(indices.cpu().numpy(), want)  # the values are exact in FP16
    assert np.array_equal(merged.cpu().numpy(), want_values)
    for r in range(rows):
        mine = [int(p) // D for p in want[r] if p >= 0 and p % D == 1]
        assert list(owned[r].cpu().numpy()) == mine + [-1] * (k - len(mine)), r


def test_topk_with_a_dcp_layout_writes_global_positions():
    rng = np.random.default_rng()
    D, r, I, rows, width, k = 2, 1, 64, 3, 20000, 512
    logits = torch.from_numpy((np.round(rng.standard_normal((rows, width)) * 8) / 8).astype(np.float32)).cuda()
    global_lengths = np.array([0, 2 * width - 100, 5000], np.int32)
    group = D * I
    local = [int(L // group * I + min(max(L % group - r * I, 0), I)) for L in global_lengths]
    workspace = torch.empty(fi.topk_workspace_bytes(rows), dtype=torch.uint8, device="cuda")
    got = torch.empty(rows, k, dtype=torch.int32, device="cuda")
    want = torch.empty(rows, k, dtype=torch.int32, device="cuda")
    fi.topk(logits, to_cuda(global_lengths), got, workspace, dcp=(D, r, I))
    fi.topk(logits, to_cuda(np.array(local, np.int32)), want, workspace)
    torch.cuda.synchronize()
    w = want.cpu().numpy().astype(np.int64)
    mapped = np.where(w >= 0, w // I * group + r * I + w % I, -1)
    assert np.array_equal(got.cpu().numpy(), mapped)


def test_engine_drop_ins_equal_the_reference():
    rng = np.random.default_rng()
    B, n, H, D, k = 2, 2, 64, 128, 128
    lengths = [1000, 300]
    q, kv, weights, lens, table = make_paged_inputs(rng, B, n, H, D, lengths)
    tq = to_cuda(q, torch.float8_e4m3fn)
    meta = fi.get_paged_mqa_logits_metadata(to_cuda(lens), 64, torch.cuda.get_device_properties(0).multi_processor_count)
    logits = fi.fp8_paged_mqa_logits(tq, to_cuda(kv), to_cuda(weights), to_cuda(lens), to_cuda(table), meta, 1024,
                                      clean_logits=True)
    torch.cuda.synchronize()
    want = fi.reference.paged_mqa_logits(q, kv, weights, lens, table, 1024)
    assert logits.shape == (B * n, 1024) and logits.dtype == torch.float32
    assert np.array_equal(logits.cpu().numpy().astype(np.float64), want.astype(np.float32).astype(np.float64))
    indices = torch.empty(B * n, k, dtype=torch.int32, device="cuda")
    fi.top_k_per_row_decode(logits, n, to_cuda(lens), indices, B * n, logits.stride(0), logits.stride(1), k)
    torch.cuda.synchronize()
    row_lengths = [lengths[r // n] - n + r % n + 1 for r in range(B * n)]
    got = [sorted(int(i) for i in row if i >= 0) for row in indices.cpu().numpy()]
    assert got == reference_topk_sets(want, row_lengths, k)


def test_torch_ops_trace_under_torch_compile_and_equal_the_reference():
    # torch.ops.flash_indexer.*: the same step eager and through torch.compile(fullgraph=True), whose
    # tracing runs the fake implementations; both equal the CPU reference.
    rng = np.random.default_rng()
    B, n, H, D, k = 2, 2, 64, 128, 128
    lengths = [900, 333]
    q, kv, weights, lens, table = make_paged_inputs(rng, B, n, H, D, lengths)
    args = (to_cuda(q, torch.float8_e4m3fn), to_cuda(kv), to_cuda(weights), to_cuda(lens), to_cuda(table))
    meta = fi.get_paged_mqa_logits_metadata(args[3], 64, fi.get_num_sms())

    def step(q_, kv_, w_, lens_, table_, meta_, indices_):
        logits = torch.ops.flash_indexer.fp8_paged_mqa_logits(q_, kv_, w_, lens_, table_, meta_, 1024, True)
        torch.ops.flash_indexer.top_k_per_row_decode(logits, n, lens_, indices_, B * n, logits.stride(0),
                                                     logits.stride(1), k)
        return logits

    want = fi.reference.paged_mqa_logits(q, kv, weights, lens, table, 1024)
    row_lengths = [lengths[r // n] - n + r % n + 1 for r in range(B * n)]
    for fn in (step, torch.compile(step, fullgraph=True)):
        indices = torch.full((B * n, k), 0x7D7D7D7D, dtype=torch.int32, device="cuda")
        logits = fn(*args, meta, indices)
        torch.cuda.synchronize()
        assert np.array_equal(logits.cpu().numpy().astype(np.float64), want.astype(np.float32).astype(np.float64))
        got = [sorted(int(i) for i in row if i >= 0) for row in indices.cpu().numpy()]
        assert got == reference_topk_sets(want, row_lengths, k)
    rows = torch.from_numpy(want.astype(np.float32)).cuda()
    row_lens = torch.tensor(row_lengths, dtype=torch.int32, device="cuda")
    out = torch.ops.flash_indexer.topk(rows, k, row_lens)
    assert out.shape == (B * n, k) and out.dtype == torch.int32
    assert [sorted(int(i) for i in r if i >= 0) for r in out.cpu().numpy()] == reference_topk_sets(want, row_lengths, k)
    torch.library.opcheck(torch.ops.flash_indexer.topk.default, (rows, k, row_lens),
                          test_utils=("test_schema", "test_faketensor"))
    # (opcheck's schema test perturbs the inputs with arithmetic torch lacks for float8.)
    torch.library.opcheck(torch.ops.flash_indexer.fp8_paged_mqa_logits.default, (*args, meta, 1024, True),
                          test_utils=("test_faketensor",))
