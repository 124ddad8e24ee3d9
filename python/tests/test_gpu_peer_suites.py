"""GPU tests (skipped without torch and a CUDA device) that put the package's drop-in calls through the
checks the peers' own test suites apply to their kernels: the same shape grids, cache layout, dtypes,
call forms, tolerance metric and masking rules, on random inputs quantized the way those suites do it.

Mirrored (written from reading the peers' tests; no code taken from them):

- deepseek-ai/DeepGEMM tests/test_attention.py
  - test_paged_mqa_logits: bf16 random q and keys cast to FP8 (keys per token, FP32 scale, fused
    [blocks, 64, 1, D + 4] cache), H 64 (H 32 in newer grids), D 128, B 256, next_n 1, 2, 4, average
    context 8192 and 32768 (lengths drawn from 0.7x to 1.3x of it, two empty requests in the middle),
    logits width 111 * 1024, float32 and bfloat16 logits; context_lens 2-D [B, next_n] with
    clean_logits=False (the current form) and 1-D [B] with the MTP rule and clean_logits=True (the
    older form); the relative difference 1 - 2 sum(xy) / sum(x^2 + y^2) over live positions below 1e-3
    against the unquantized inputs and below 5e-6 against the dequantized ones; -inf exactly at the
    masked positions with clean_logits; repeated calls bitwise equal.
  - test_sparse_mqa_logits, paged form (get_paged_sparse_mqa_logits_metadata,
    fp8_fp4_paged_sparse_mqa_logits): the MXFP4 cache in 512-byte-aligned pages, H 32, candidate rows
    sorted and unique, padded with their last block, blocks of 8 and 16; bitwise the dense op's values
    at every valid entry, repeated calls bitwise equal.
  - test_mqa_logits: seq_len 2048 and 4096 against seq_len_kv 4096 and 8192, H 64, D 128, float32
    and bfloat16 logits, causal windows and the zigzag context-parallel windows, with the same metric,
    mask and repeat checks.
- vllm-project/vllm tests/kernels/attention/test_deepgemm_attention.py
  (test_deepgemm_fp8_paged_mqa_logits, test_deepgemm_fp8_mqa_logits): H 32, D 128; paged B 4 with
  next_n 1 and B 2 with next_n 2 at average context 2048, width 4096; prefill 512 tokens against 1024
  keys; the metric below 1e-3 against the unquantized inputs.
- vllm-project/vllm tests/kernels/test_top_k_per_row.py: top_k_per_row_prefill over num_rows 1, 32,
  2050 and top_k_per_row_decode over batch 1, 2, 2048 x next_n 1, 8 x random / "10 low bits" (many
  ties) data x clean_logits, at vocabulary 20000 and 300000; per-row [B, next_n] lengths with a dirty
  tail; lengths shorter than next_n; an offset row view; one row expanded to every row (row stride 0);
  window-local prefill indices. The comparison is theirs: the selected set may differ from
  torch.topk's only among equal values, so the selected values' multiset must equal torch.topk's.

Skipped, with the reason in each skip: head_dim 32 in the paged op (its kernels are built for D 64 and 128)
and block_kv 32 (the cache block is 64 tokens, contract §2), both from DeepGEMM's SM100 grid (its SM90
kernels take neither). Also mirrored from that grid: the varlen `indices` form. Not mirrored: DeepGEMM's
MXFP8 format, its MXFP4 dense cases, the contiguous sparse form, and the timing parts of both suites. The grids are subsampled (each subsample is named where the cases are
listed) to keep the module near a minute on an H100 once its kernels are in the kernel cache.
"""
import collections

import pytest

import flash_indexer as fi

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

BLOCK = 64  # tokens per cache block (contract §2)
FP8_MAX = 448.0  # the largest finite FP8 E4M3FN value
DEEPGEMM_WIDTH = 111 * 1024  # the logits width DeepGEMM's paged test uses
SKIP_HEAD_DIM_32 = ("head_dim 32 is not supported in the paged op: its kernels are built for D 64 and 128 (contract §1.1); "
                    "DeepGEMM takes it on SM100 only")


@pytest.fixture(autouse=True)
def _fp32_reference_matmuls():
    """The references multiply in full FP32: TF32 would add more error than the tolerances allow."""
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = saved


# ---- helpers --------------------------------------------------------------------------------------

class RelativeDiff:
    """The peers' tolerance metric, 1 - 2 * sum(x * y) / sum(x * x + y * y), accumulated in float64 over
    the positions added (0 when nothing was added)."""

    def __init__(self):
        self.xy = 0.0
        self.squares = 0.0

    def add(self, got, want):
        x, y = got.double(), want.double()
        self.xy = self.xy + (x * y).sum()
        self.squares = self.squares + (x * x + y * y).sum()

    def value(self):
        squares = float(self.squares)
        return 0.0 if squares == 0.0 else 1.0 - 2.0 * float(self.xy) / squares


def quantize_fp8_rows(x):
    """FP8 E4M3 per row of the last dimension with one FP32 scale per row: the row's largest magnitude
    (at least 1e-4) maps to 448. Returns (float8_e4m3fn values, float32 scales)."""
    wide = x.float()
    scales = wide.abs().amax(dim=-1).clamp_min(1e-4) / FP8_MAX
    return (wide / scales.unsqueeze(-1)).to(torch.float8_e4m3fn), scales


def fused_fp8_cache(keys):
    """keys [num_blocks, 64, D] -> the FP8 cache uint8 [num_blocks, 64, 1, D + 4] of contract §2.1: per
    block, the 64 tokens' E4M3 values token-major, then their 64 FP32 scales."""
    blocks, slots, dim = keys.shape
    values, scales = quantize_fp8_rows(keys)
    cache = torch.empty((blocks, slots * (dim + 4)), dtype=torch.uint8, device=keys.device)
    cache[:, : slots * dim] = values.view(torch.uint8).reshape(blocks, slots * dim)
    cache[:, slots * dim:] = scales.contiguous().view(torch.uint8).reshape(blocks, slots * 4)
    return cache.view(blocks, slots, 1, dim + 4)


def dequantized_keys(cache, block_ids, dim):
    """The keys of `block_ids` (in order) as float32 [len(block_ids) * 64, dim], decoded from the cache
    bytes: E4M3 value times the token's FP32 scale."""
    raw = cache.view(cache.shape[0], -1)[block_ids.long()]
    values = raw[:, : BLOCK * dim].contiguous().view(torch.float8_e4m3fn).float().view(-1, BLOCK, dim)
    scales = raw[:, BLOCK * dim:].contiguous().view(torch.float32)
    return (values * scales.unsqueeze(-1)).reshape(-1, dim)


def score(q_rows, keys, weights_rows):
    """sum_h w[j, h] * relu(q[j, h] . k[s]) in float32: q_rows [n, H, D], keys [L, D], weights_rows
    [n, H] -> [n, L]."""
    n, heads, dim = q_rows.shape
    dots = (q_rows.reshape(n * heads, dim) @ keys.t()).view(n, heads, -1)
    return (dots.relu_() * weights_rows.unsqueeze(-1)).sum(dim=1)


def prefill_reference(q, keys, weights, ks, ke):
    """The ragged logits [T, N] in float32, one head at a time to bound the memory, and the window mask
    (ks[t] <= s < ke[t])."""
    tokens, heads, _ = q.shape
    keys_t = keys.t().contiguous()
    out = torch.zeros((tokens, keys.shape[0]), dtype=torch.float32, device=q.device)
    for h in range(heads):
        out.addcmul_((q[:, h, :] @ keys_t).relu_(), weights[:, h: h + 1])
    cols = torch.arange(keys.shape[0], device=q.device)
    inside = (cols[None, :] >= ks[:, None]) & (cols[None, :] < ke[:, None])
    return out, inside


def prefill_windows(seq_len, seq_len_kv, disable_cp):
    """The two window patterns of DeepGEMM's prefill test, ks = 0 in both. Causal: token t sees the keys
    before seq_len_kv - seq_len + t. Zigzag context parallel: the keys form 2 * ranks chunks of seq_len / 2
    (ranks = seq_len_kv / seq_len); the rank ranks // 3 holds query chunks `rank` and
    `2 * ranks - 1 - rank`, and the token at offset i of chunk c sees the keys before c * seq_len / 2 + i."""
    if disable_cp:
        ke = torch.arange(seq_len_kv - seq_len, seq_len_kv, dtype=torch.int32, device="cuda")
        return torch.zeros_like(ke), ke
    assert seq_len % 2 == 0 and seq_len_kv % seq_len == 0
    half, ranks = seq_len // 2, seq_len_kv // seq_len
    rank = ranks // 3
    offsets = torch.arange(half, dtype=torch.int32, device="cuda")
    ke = torch.cat([rank * half + offsets, (2 * ranks - 1 - rank) * half + offsets])
    return torch.zeros_like(ke), ke


def assert_exact_topk(logits, indices, starts, ends, k, relative=False):
    """vLLM's rule, checked for all rows at once: each row holds min(k, its window) distinct columns of
    the window [start, end) (offsets from start when `relative`), then -1; and the multiset of the
    selected values equals torch.topk's on the window, so two answers may differ only among ties."""
    rows, width = logits.shape
    device = logits.device
    ends = ends.long().clamp(0, width)
    starts = torch.minimum(starts.long().clamp(0, width), ends)
    want = (ends - starts).clamp_max(k)
    idx = indices[:rows].long()
    slots = torch.arange(k, device=device)
    valid = idx >= 0
    assert torch.equal(valid, slots[None, :] < want[:, None]), "count of selected columns or -1 padding"
    assert bool((idx[~valid] == -1).all()), "padding other than -1"
    cols = idx + starts[:, None] if relative else idx
    outside = valid & ((cols < starts[:, None]) | (cols >= ends[:, None]))
    assert not bool(outside.any()), "a column outside its row's window"
    distinct = torch.where(valid, cols, -1 - slots[None, :]).sort(dim=1).values
    assert bool((distinct[:, 1:] != distinct[:, :-1]).all()), "a column selected twice"
    positions = torch.arange(width, device=device)
    visible = logits.float().masked_fill((positions[None, :] < starts[:, None]) | (positions[None, :] >= ends[:, None]),
                                         float("-inf"))
    kk = min(k, width)
    expected = visible.topk(kk, dim=1).values
    picked = logits.float().gather(1, cols.clamp(0, max(width - 1, 0))).masked_fill(~valid, float("-inf"))
    picked = picked.sort(dim=1, descending=True).values
    assert torch.equal(picked[:, :kk], expected), "selected values differ from torch.topk's"
    assert bool(torch.isneginf(picked[:, kk:]).all())


# ---- paged logits: DeepGEMM test_paged_mqa_logits, vLLM test_deepgemm_fp8_paged_mqa_logits ---------------

PagedCase = collections.namedtuple(
    "PagedCase", "api lens clean logits batch next_n heads head_dim avg_kv spread width block_kv")


def paged_case(case_id, *, api="fp8_fp4", lens="2d", clean=False, logits="float32", batch=256, next_n=1, heads=64,
               head_dim=128, avg_kv=8192, spread=0.3, width=DEEPGEMM_WIDTH, block_kv=64):
    return pytest.param(PagedCase(api, lens, clean, logits, batch, next_n, heads, head_dim, avg_kv, spread, width,
                                  block_kv), id=case_id)


# DeepGEMM's paged grid on SM90 is B 256 x next_n 1, 2 (and 4 in newer versions) x H 64 (and 32 in
# newer versions) x average context 8192, 32768 x logits float32, bfloat16; its older form took 1-D
# lengths at B 64 and 128. The subsample keeps each value at least once and takes B 64 at average
# context 32768 to bound the cache size. "fp8_fp4": fp8_fp4_paged_mqa_logits((q, None), ...) by keyword as DeepGEMM calls it;
# "fp8": fp8_paged_mqa_logits(q, ...) positionally as vLLM and DeepGEMM's older test call it.
PAGED_CASES = [
    paged_case("deepgemm-2d-n1-h64-f32-8k"),
    paged_case("deepgemm-2d-n2-h64-bf16-8k", next_n=2, logits="bfloat16"),
    paged_case("deepgemm-2d-n4-h64-f32-32k-clean", next_n=4, clean=True, batch=64, avg_kv=32768),
    paged_case("deepgemm-2d-n2-h32-bf16-32k", next_n=2, heads=32, logits="bfloat16", batch=64, avg_kv=32768),
    paged_case("deepgemm-1d-n1-h64-f32-8k-clean", api="fp8", lens="1d", clean=True, batch=128),
    paged_case("deepgemm-1d-n2-h64-bf16-32k-clean", lens="1d", clean=True, next_n=2, logits="bfloat16", batch=64,
               avg_kv=32768),
    paged_case("deepgemm-block-kv-32", block_kv=32),
    paged_case("deepgemm-head-dim-32", head_dim=32),
    paged_case("vllm-b4-n1-h32", api="fp8", lens="1d", batch=4, heads=32, avg_kv=2048, spread=0.2, width=4096),
    paged_case("vllm-b2-n2-h32", api="fp8", lens="1d", batch=2, next_n=2, heads=32, avg_kv=2048, spread=0.2,
               width=4096),
]


@pytest.mark.parametrize("case", PAGED_CASES)
def test_paged_mqa_logits_as_the_peers_check_them(case):
    if case.block_kv != BLOCK:
        with pytest.raises(ValueError, match="block_kv"):
            fi.get_paged_mqa_logits_metadata(torch.zeros((4, 1), dtype=torch.int32, device="cuda"), case.block_kv,
                                             fi.get_num_sms())
        pytest.skip(f"block_kv {case.block_kv} is not supported: the cache block is 64 tokens (contract §2); "
                    "DeepGEMM takes it on SM100 only")
    if case.head_dim == 32:
        pytest.skip(SKIP_HEAD_DIM_32)
    torch.manual_seed(0)
    dev = "cuda"
    B, n, H, D = case.batch, case.next_n, case.heads, case.head_dim
    logits_dtype = getattr(torch, case.logits)

    lens = torch.randint(int((1 - case.spread) * case.avg_kv), int((1 + case.spread) * case.avg_kv), (B,),
                         dtype=torch.int32, device=dev)
    if B >= 8:
        lens[B // 2: B // 2 + 2] = 0  # empty requests between live ones, as DeepGEMM's newer grid has
    lens_list = lens.tolist()
    assert max(lens_list) <= case.width
    need = [(L + BLOCK - 1) // BLOCK for L in lens_list]
    total_blocks = sum(need) + 8  # a few blocks no request uses
    keys = torch.randn((total_blocks, BLOCK, D), dtype=torch.bfloat16, device=dev)
    cache = fused_fp8_cache(keys)
    pool = torch.randperm(total_blocks, dtype=torch.int32, device=dev)
    table = torch.zeros((B, max(max(need), 1)), dtype=torch.int32, device=dev)
    at = 0
    for b, blocks in enumerate(need):
        table[b, :blocks] = pool[at: at + blocks]
        at += blocks

    q = torch.randn((B, n, H, D), dtype=torch.bfloat16, device=dev)
    q_fp8 = q.to(torch.float8_e4m3fn)
    weights = torch.randn((B * n, H), dtype=torch.float32, device=dev)

    if case.lens == "2d":
        # Row j of request b sees a random prefix of the request's keys; the last row sees them all.
        lens_arg = (torch.rand((B, n), device=dev) * (lens.unsqueeze(1) + 1).float()).to(torch.int32)
        lens_arg = torch.minimum(lens_arg, lens.unsqueeze(1))
        lens_arg[:, -1] = lens
        row_lens = lens_arg.reshape(-1)
    else:
        lens_arg = lens  # the MTP rule: draft token j sees L - next_n + j + 1 keys
        row_lens = (lens.unsqueeze(1) - n + 1 + torch.arange(n, dtype=torch.int32, device=dev)).clamp_min(0).reshape(-1)

    # DeepGEMM sizes the schedule for two-CTA clusters at next_n 4 on SM90; the placeholder ignores it.
    num_sms = fi.get_num_sms() // (2 if n == 4 else 1)
    meta = fi.get_paged_mqa_logits_metadata(lens_arg, case.block_kv, num_sms)
    assert meta.shape == (num_sms + 1, 2) and meta.dtype == torch.int32

    def call():
        if case.api == "fp8":
            assert logits_dtype == torch.float32
            return fi.fp8_paged_mqa_logits(q_fp8, cache, weights, lens_arg, table, meta, case.width,
                                           clean_logits=case.clean)
        return fi.fp8_fp4_paged_mqa_logits(q=(q_fp8, None), kv_cache=cache, weights=weights, context_lens=lens_arg,
                                           block_table=table, schedule_meta=meta, max_context_len=case.width,
                                           clean_logits=case.clean, logits_dtype=logits_dtype, indices=None)

    logits = call()
    torch.cuda.synchronize()
    assert logits.shape == (B * n, case.width) and logits.dtype == logits_dtype
    got = logits.float()
    live = torch.arange(case.width, device=dev)[None, :] < row_lens[:, None]
    if case.clean:
        assert torch.equal(torch.isneginf(got), ~live)
    assert bool(torch.isfinite(got[live]).all())

    q_deq, q_orig = q_fp8.float(), q.float()
    against_dequantized, against_original = RelativeDiff(), RelativeDiff()
    for b, L in enumerate(lens_list):
        if L == 0:
            continue
        ids = table[b, : need[b]]
        rows = slice(b * n, (b + 1) * n)
        mask = live[rows, :L]
        x = got[rows, :L][mask]
        against_dequantized.add(x, score(q_deq[b], dequantized_keys(cache, ids, D)[:L], weights[rows])[mask])
        against_original.add(x, score(q_orig[b], keys[ids.long()].reshape(-1, D)[:L].float(), weights[rows])[mask])
    assert against_dequantized.value() < 5e-6, against_dequantized.value()
    assert against_original.value() < 1e-3, against_original.value()

    # DeepGEMM repeats each call and requires the same bits at the live positions (fewer repeats here).
    for _ in range(2):
        again = call()
        assert torch.equal(again.masked_fill(~live, 0), logits.masked_fill(~live, 0))


def test_paged_mqa_logits_varlen_indices_as_deepgemm_builds_them():
    # DeepGEMM's varlen form (its SM100 grid; SM90 DeepGEMM refuses it): 1-6 query tokens per request, the
    # request id of each token, next_n 1, each token its own causal length and its request's block-table
    # row. Each token's logits are those of its own row, so they must be the per-token call's (checked
    # against the references above) bit for bit, at the live positions.
    torch.manual_seed(0)
    dev, B, H, D, width = "cuda", 12, 64, 128, 8192
    per = torch.randint(1, 7, (B,), device=dev)
    indices = torch.arange(B, dtype=torch.int32, device=dev).repeat_interleave(per)
    tokens = indices.numel()
    first = torch.cumsum(per, 0) - per  # each request's first token
    offset = torch.arange(tokens, device=dev) - first.repeat_interleave(per)
    lens = (torch.randint(1000, width - 8, (B,), device=dev).repeat_interleave(per) + offset).to(torch.int32)
    lens = lens.clamp_max(width).reshape(tokens, 1)
    blocks = (width + BLOCK - 1) // BLOCK
    cache = fused_fp8_cache(torch.randn((B * blocks, BLOCK, D), dtype=torch.bfloat16, device=dev))
    table = torch.randperm(B * blocks, dtype=torch.int32, device=dev).reshape(B, blocks).repeat_interleave(per, 0)
    q = torch.randn((tokens, 1, H, D), dtype=torch.bfloat16, device=dev).to(torch.float8_e4m3fn)
    weights = torch.randn((tokens, H), dtype=torch.float32, device=dev)
    meta = fi.get_paged_mqa_logits_metadata(lens, BLOCK, fi.get_num_sms(), indices)
    got = fi.fp8_fp4_paged_mqa_logits((q, None), cache, weights, lens, table, meta, width, False, torch.float32,
                                      indices)
    want = fi.fp8_fp4_paged_mqa_logits((q, None), cache, weights, lens, table, meta, width, False, torch.float32)
    torch.cuda.synchronize()
    live = torch.arange(width, device=dev)[None, :] < lens
    assert got.shape == (tokens, width) and torch.equal(got[live], want[live])
    with pytest.raises(ValueError, match="indices: expected int32"):
        fi.fp8_fp4_paged_mqa_logits((q, None), cache, weights, lens, table, meta, width, False, torch.float32,
                                    indices.long())


def test_paged_mqa_logits_metadata_has_deepgemms_shape_for_empty_requests():
    # DeepGEMM checks that all-empty lengths give a schedule of [num_sms + 1, 2].
    num_sms = fi.get_num_sms()
    meta = fi.get_paged_mqa_logits_metadata(torch.zeros((32, 1), dtype=torch.int32, device="cuda"), 64, num_sms)
    torch.cuda.synchronize()
    assert meta.shape == (num_sms + 1, 2) and meta.dtype == torch.int32 and meta.device.type == "cuda"


# ---- prefill logits: DeepGEMM test_mqa_logits, vLLM test_deepgemm_fp8_mqa_logits ------------------------

def check_prefill(seq_len, seq_len_kv, heads, head_dim, logits_dtype, disable_cp, api, compressed=False):
    torch.manual_seed(0)
    q = torch.randn((seq_len, heads, head_dim), dtype=torch.bfloat16, device="cuda")
    kv = torch.randn((seq_len_kv, head_dim), dtype=torch.bfloat16, device="cuda")
    weights = torch.randn((seq_len, heads), dtype=torch.float32, device="cuda")
    ks, ke = prefill_windows(seq_len, seq_len_kv, disable_cp)
    q_fp8 = q.to(torch.float8_e4m3fn)
    k_fp8, k_scales = quantize_fp8_rows(kv)

    lengths = (ke - ks).clamp(min=0)
    max_seqlen_k = int(lengths.max()) if compressed else 0

    def call():
        if api == "fp8":
            assert logits_dtype == torch.float32
            return fi.fp8_mqa_logits(q_fp8, (k_fp8, k_scales), weights, ks, ke)  # clean_logits defaults to True
        return fi.fp8_fp4_mqa_logits((q_fp8, None), (k_fp8, k_scales), weights, ks, ke, not compressed, max_seqlen_k,
                                     logits_dtype)

    logits = call()
    torch.cuda.synchronize()
    if compressed:
        # DeepGEMM's check of the compressed form: row t's first ke - ks columns go back to keys [ks, ke) of a
        # full -inf row; the columns past a window are unspecified, so the repeat check masks them.
        assert logits.shape == (seq_len, max_seqlen_k) and logits.dtype == logits_dtype
        live = torch.arange(max_seqlen_k, device="cuda")[None, :] < lengths[:, None]
        logits = logits.masked_fill(~live, 0)
        full = torch.full((seq_len, seq_len_kv), float("-inf"), dtype=torch.float32, device="cuda")
        for t in range(seq_len):
            full[t, int(ks[t]):int(ke[t])] = logits[t, : int(lengths[t])].float()
        got = full
    else:
        assert logits.shape == (seq_len, seq_len_kv) and logits.dtype == logits_dtype
        got = logits.float()
    want_orig, inside = prefill_reference(q.float(), kv.float(), weights, ks, ke)
    assert torch.equal(torch.isneginf(got), ~inside)  # clean_logits: -inf exactly outside the windows
    assert bool(torch.isfinite(got[inside]).all())
    against_original = RelativeDiff()
    against_original.add(got[inside], want_orig[inside])
    del want_orig
    want_deq, _ = prefill_reference(q_fp8.float(), k_fp8.float() * k_scales.unsqueeze(1), weights, ks, ke)
    against_dequantized = RelativeDiff()
    against_dequantized.add(got[inside], want_deq[inside])
    assert against_dequantized.value() < 5e-6, against_dequantized.value()
    assert against_original.value() < 1e-3, against_original.value()
    for _ in range(2):  # DeepGEMM's self-consistency check, fewer repeats
        again = call()
        assert torch.equal(again.masked_fill(~live, 0) if compressed else again, logits)


# DeepGEMM's SM90 prefill grid, whole: seq_len x seq_len_kv x logits dtype x window pattern x full or
# compressed layout, H 64, D 128.
@pytest.mark.parametrize("compressed", [False, True], ids=["full", "compressed"])
@pytest.mark.parametrize("disable_cp", [True, False], ids=["causal", "zigzag-cp"])
@pytest.mark.parametrize("logits_dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("seq_len_kv", [4096, 8192])
@pytest.mark.parametrize("seq_len", [2048, 4096])
def test_mqa_logits_as_deepgemm_checks_them(seq_len, seq_len_kv, logits_dtype, disable_cp, compressed):
    check_prefill(seq_len, seq_len_kv, 64, 128, getattr(torch, logits_dtype), disable_cp, "fp8_fp4", compressed)


@pytest.mark.parametrize("head_dim", [32, 64])
def test_mqa_logits_other_head_dims(head_dim):
    # Newer DeepGEMM grids add D 32 and 64 at H 32 and 64; one shape of each here (D 32 on the portable kernel).
    check_prefill(2048, 4096, 64, head_dim, torch.float32, True, "fp8_fp4")


def test_mqa_logits_compressed_form_needs_clean_logits_off():
    q = torch.zeros((4, 64, 128), dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
    kv = (torch.zeros((8, 128), dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn),
          torch.ones(8, device="cuda"))
    ks = torch.zeros(4, dtype=torch.int32, device="cuda")
    ke = torch.full((4,), 8, dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="clean_logits"):
        fi.fp8_fp4_mqa_logits((q, None), kv, torch.ones((4, 64), device="cuda"), ks, ke, True, 8, torch.float32)


@pytest.mark.parametrize("disable_cp", [True, False], ids=["causal", "zigzag-cp"])
def test_mqa_logits_as_vllm_checks_them(disable_cp):
    check_prefill(512, 1024, 32, 128, torch.float32, disable_cp, "fp8")


# ---- top-k: vLLM tests/kernels/test_top_k_per_row.py ----------------------------------------------------

def vllm_logits(rows, width, ends, clean_logits, data):
    """Random float32 logits [rows, width]: standard normal, or "10LSBits" (a fixed float32 pattern with
    random low 10 mantissa bits: only 1024 distinct values, so many ties); with clean_logits the columns at
    and past each row's end are -inf."""
    if data == "random":
        logits = torch.randn((rows, width), dtype=torch.float32, device="cuda")
    else:
        low = torch.randint(0, 1 << 10, (rows, width), dtype=torch.int32, device="cuda")
        logits = (low | 0x3F900000).view(torch.float32)
    if clean_logits:
        cols = torch.arange(width, device="cuda")
        logits.masked_fill_(cols[None, :] >= ends[:, None], float("-inf"))
    return logits


@pytest.mark.parametrize("clean_logits", [True, False])
@pytest.mark.parametrize("top_k", [2048, 3000])
@pytest.mark.parametrize("num_rows", [1, 32, 2050])
def test_top_k_per_row_prefill_as_vllm_checks_it(num_rows, top_k, clean_logits):
    torch.manual_seed(0)
    starts = torch.zeros(num_rows, dtype=torch.int32, device="cuda")
    ends = torch.arange(1, num_rows + 1, dtype=torch.int32, device="cuda")
    logits = vllm_logits(num_rows, num_rows, ends, clean_logits, "random")
    indices = torch.empty((num_rows, top_k), dtype=torch.int32, device="cuda")
    fi.top_k_per_row_prefill(logits, starts, ends, indices, num_rows, logits.stride(0), logits.stride(1), top_k)
    torch.cuda.synchronize()
    assert_exact_topk(logits, indices, starts, ends, top_k)


def test_top_k_per_row_prefill_writes_window_local_indices():
    # vLLM's prefill indices count from each row's start (its sequence-local-indices check).
    logits = torch.randn((3, 32), dtype=torch.float32, device="cuda")
    starts = torch.tensor([1, 6, 20], dtype=torch.int32, device="cuda")
    ends = torch.tensor([3, 18, 23], dtype=torch.int32, device="cuda")
    indices = torch.empty((3, 4), dtype=torch.int32, device="cuda")
    fi.top_k_per_row_prefill(logits, starts, ends, indices, 3, logits.stride(0), logits.stride(1), 4)
    torch.cuda.synchronize()
    assert_exact_topk(logits, indices, starts, ends, 4, relative=True)
    assert indices[0, 2:].tolist() == [-1, -1]


def check_decode(batch, next_n, top_k, vocab, clean_logits, data):
    torch.manual_seed(0)
    rows = batch * next_n
    seq_lens = torch.randint(next_n, vocab, (batch,), dtype=torch.int32, device="cuda")
    offsets = torch.arange(next_n, dtype=torch.int32, device="cuda")
    ends = (seq_lens.unsqueeze(1) - next_n + 1 + offsets).reshape(-1)
    logits = vllm_logits(rows, int(ends.max()), ends, clean_logits, data)
    indices = torch.empty((rows, top_k), dtype=torch.int32, device="cuda")
    fi.top_k_per_row_decode(logits, next_n, seq_lens, indices, rows, logits.stride(0), logits.stride(1), top_k)
    torch.cuda.synchronize()
    assert_exact_topk(logits, indices, torch.zeros_like(ends), ends, top_k)


# vLLM's decode grid, whole: top_k x batch x next_n x clean_logits x data, vocabulary 20000.
@pytest.mark.parametrize("data", ["random", "10LSBits"])
@pytest.mark.parametrize("clean_logits", [True, False])
@pytest.mark.parametrize("next_n", [1, 8])
@pytest.mark.parametrize("batch", [1, 2, 2048])
@pytest.mark.parametrize("top_k", [2048, 3000])
def test_top_k_per_row_decode_as_vllm_checks_it(top_k, batch, next_n, clean_logits, data):
    check_decode(batch, next_n, top_k, 20000, clean_logits, data)


@pytest.mark.parametrize("clean_logits", [True, False])
def test_top_k_per_row_decode_large_vocabulary(clean_logits):
    check_decode(2, 2, 2048, 300000, clean_logits, "random")


@pytest.mark.parametrize("next_n", [1, 4])
def test_top_k_per_row_decode_per_row_lengths_with_a_dirty_tail(next_n):
    # vLLM's [B, next_n] lengths form: each row its own end, huge values past it that must not be picked.
    torch.manual_seed(0)
    batch, top_k = 4, 2048
    rows = batch * next_n
    ends = torch.randint(4000, 16000, (rows,), dtype=torch.int32, device="cuda")
    width = (int(ends.max()) + 255) // 256 * 256
    logits = torch.randn((rows, width), dtype=torch.float32, device="cuda")
    logits.masked_fill_(torch.arange(width, device="cuda")[None, :] >= ends[:, None], 1e30)
    indices = torch.full((rows, top_k), -2, dtype=torch.int32, device="cuda")
    fi.top_k_per_row_decode(logits, next_n, ends.reshape(batch, next_n), indices, rows, logits.stride(0),
                            logits.stride(1), top_k)
    torch.cuda.synchronize()
    assert_exact_topk(logits, indices, torch.zeros_like(ends), ends, top_k)


def test_top_k_per_row_decode_lengths_shorter_than_next_n():
    # The MTP rule gives negative ends for lengths below next_n; they clamp to 0 (rows with nothing).
    torch.manual_seed(0)
    next_n, top_k, width = 4, 512, 8192
    seq_lens = torch.tensor([2, 6], dtype=torch.int32, device="cuda")
    logits = torch.randn((2 * next_n, width), dtype=torch.float32, device="cuda")
    indices = torch.full((2 * next_n, top_k), -2, dtype=torch.int32, device="cuda")
    fi.top_k_per_row_decode(logits, next_n, seq_lens, indices, 2 * next_n, logits.stride(0), logits.stride(1), top_k)
    torch.cuda.synchronize()
    ends = torch.tensor([0, 0, 1, 2, 3, 4, 5, 6], dtype=torch.int32, device="cuda")
    assert_exact_topk(logits, indices, torch.zeros_like(ends), ends, top_k)


def test_top_k_per_row_decode_on_an_offset_view():
    # A view one element into padded storage (row stride width + 8), ascending scores then a 1e20 tail,
    # lengths from 0 to 16000 under next_n 6, as in one of vLLM's decode checks.
    next_n, width, top_k = 6, 16384, 512
    lengths = torch.tensor([0, 1, 511, 512, 513, 1023, 1024, 16000], dtype=torch.int32, device="cuda")
    rows = lengths.numel() * next_n
    storage = torch.full((rows, width + 8), 1e20, dtype=torch.float32, device="cuda")
    logits = storage[:, 1: width + 1]
    logits[:, :16000] = torch.arange(16000, dtype=torch.float32, device="cuda")
    indices = torch.full((rows, top_k), -777, dtype=torch.int32, device="cuda")
    fi.top_k_per_row_decode(logits, next_n, lengths, indices, rows, logits.stride(0), logits.stride(1), top_k)
    torch.cuda.synchronize()
    ends = (lengths.unsqueeze(1) - next_n + 1 + torch.arange(next_n, device="cuda")).clamp_min(0).reshape(-1)
    assert_exact_topk(logits, indices, torch.zeros_like(ends), ends, top_k)


# A subsample of vLLM's expanded-row cases (rows x row length around its split boundaries).
@pytest.mark.parametrize("rows,row_length", [(128, 65536), (128, 65537), (129, 262145)])
def test_top_k_per_row_decode_of_an_expanded_row(rows, row_length):
    width, top_k = 262145, 512
    logits = torch.arange(width, dtype=torch.float32, device="cuda").expand(rows, -1)
    assert logits.stride(0) == 0
    lengths = torch.full((rows,), row_length, dtype=torch.int32, device="cuda")
    indices = torch.empty((rows, top_k), dtype=torch.int32, device="cuda")
    fi.top_k_per_row_decode(logits, 1, lengths, indices, rows, logits.stride(0), logits.stride(1), top_k)
    torch.cuda.synchronize()
    want = torch.arange(row_length - top_k, row_length, dtype=torch.int32, device="cuda").expand(rows, -1)
    assert torch.equal(indices.sort(dim=1).values, want)


def test_top_k_per_row_decode_b_by_1_lengths_follow_the_mtp_rule():
    torch.manual_seed(0)
    next_n, top_k, width = 4, 512, 1024
    seq_lens = torch.tensor([[2], [513], [700]], dtype=torch.int32, device="cuda")
    rows = seq_lens.shape[0] * next_n
    logits = torch.randn((rows, width), dtype=torch.float32, device="cuda")
    indices = torch.empty((rows, top_k), dtype=torch.int32, device="cuda")
    fi.top_k_per_row_decode(logits, next_n, seq_lens, indices, rows, logits.stride(0), logits.stride(1), top_k)
    torch.cuda.synchronize()
    ends = (seq_lens - next_n + 1 + torch.arange(next_n, device="cuda")).clamp_min(0).reshape(-1)
    assert_exact_topk(logits, indices, torch.zeros_like(ends), ends, top_k)


# DeepGEMM tests/test_attention.py, test_sparse_mqa_logits, paged form, with the MXFP4 cache (the one of its
# formats built here): requests of 1-3 query tokens sharing a block-table row, each token one row (next_n
# flattened, the lengths growing by one per token), pages of 64 keys with the page stride padded to a
# multiple of 512 bytes, sorted unique candidates (all of a row's blocks where they fit, else a sample
# mostly shared by consecutive tokens), padded with the last block; the sparse logits must equal the dense
# op's bit for bit at every valid entry, and repeated calls their first bytes. Subsampled: num_max_sparse_blocks
# 4, 8, 512, 2048 (not 1024, 4096), lengths 0, 1, 639-641 and 16K + 3, three repeats (not 30).
@pytest.mark.parametrize("sparse_block_kv", [8, 16])
@pytest.mark.parametrize("num_max_sparse_blocks", [4, 8, 512, 2048])
def test_paged_sparse_mqa_logits_as_deepgemm_checks_them(num_max_sparse_blocks, sparse_block_kv):
    gen = torch.Generator(device="cpu").manual_seed(1000 * num_max_sparse_blocks + sparse_block_kv)
    heads, nmax, sbk = 32, num_max_sparse_blocks, sparse_block_kv
    requests = [(0, 1), (1, 2), (639, 3), (640, 1), (641, 2), (16 * 1024 + 3, 3)]  # (length of the last token, tokens)
    lengths, request_of = [], []
    for i, (length, tokens) in enumerate(requests):
        for t in range(tokens):
            lengths.append(max(0, length - tokens + t + 1))
            request_of.append(i)
    rows = len(lengths)
    pages_of = [-(-(length) // BLOCK) for length, _ in requests]
    pool = torch.randperm(sum(pages_of) + 4, generator=gen)
    table = torch.zeros((len(requests), max(pages_of) + 1), dtype=torch.int32)
    at = 0
    for i, pages in enumerate(pages_of):
        table[i, :pages] = pool[at:at + pages]
        at += pages
    page_bytes = BLOCK * 68
    stride = -(-page_bytes // 512) * 512
    storage = torch.randint(0, 256, (pool.numel(), stride), dtype=torch.uint8, generator=gen)
    storage[:, BLOCK * 64:page_bytes] = torch.randint(119, 130, (pool.numel(), BLOCK * 4), dtype=torch.uint8, generator=gen)
    storage = storage.cuda()
    cache = storage.as_strided((pool.numel(), BLOCK, 1, 68), (stride, 68, 68, 1))
    q = torch.randint(0, 256, (rows, 1, heads, 64), dtype=torch.uint8, generator=gen).cuda()
    q_sf = torch.randint(119, 130, (rows, 1, heads, 4), dtype=torch.uint8, generator=gen).view(torch.int32).reshape(
        rows, 1, heads).cuda()
    weights = torch.randn((rows, heads), generator=gen).to(torch.bfloat16).cuda()
    row_table = table[request_of].cuda()
    # Candidate rows: sorted, unique; consecutive tokens of a request keep most of the previous sample.
    sparse = torch.zeros((rows, nmax), dtype=torch.int32)
    previous = None
    for r in range(rows):
        blocks = -(-lengths[r] // sbk)
        count = min(nmax, blocks)
        if count == blocks:
            chosen = torch.arange(blocks)
        else:
            keep = [] if previous is None or r == 0 or request_of[r] != request_of[r - 1] else \
                [b for b in previous.tolist() if b < blocks][: count * 4 // 5]
            kept = set(keep)
            rest = torch.tensor([b for b in torch.randperm(blocks, generator=gen).tolist() if b not in kept])
            chosen = torch.tensor(sorted(keep + rest[: count - len(keep)].tolist()), dtype=torch.int64)
        sparse[r, :count] = chosen.to(torch.int32)
        sparse[r, count:] = int(chosen[-1]) if count else 0
        previous = chosen
    lens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    width = max(BLOCK, -(-max(lengths) // BLOCK) * BLOCK)
    dense = fi.fp8_fp4_paged_mqa_logits((q, q_sf), cache, weights.float(), lens, row_table, None, width,
                                        logits_dtype=torch.bfloat16).view(torch.int16).cpu()
    meta = fi.get_paged_sparse_mqa_logits_metadata(lens, row_table, torch.tensor(request_of, dtype=torch.int32, device="cuda"),
                                                   BLOCK, sparse.cuda(), torch.int8, sbk)
    first = None
    for _ in range(3):
        got = fi.fp8_fp4_paged_sparse_mqa_logits((q.view(torch.int8), q_sf), cache, weights, meta, nmax, sbk)
        torch.cuda.synchronize()
        assert got.shape == (rows, nmax * sbk) and got.dtype == torch.bfloat16
        bits = got.view(torch.int16).cpu()
        if first is None:
            first = bits
        assert torch.equal(bits, first)
    for r in range(rows):
        count = min(nmax, -(-lengths[r] // sbk))
        if count == 0:
            continue
        positions = (sparse[r, :count].long()[:, None] * sbk + torch.arange(sbk)).reshape(-1)
        live = positions < lengths[r]
        assert torch.equal(first[r, : count * sbk][live], dense[r, positions[live]]), r
