"""FlashIndexer: JIT CUDA kernels for the DeepSeek Sparse Attention lightning indexer.

Device tensors are any DLPack arrays (torch, CuPy, JAX). The stream is the caller's: pass
``stream=`` (an integer handle, e.g. ``torch.cuda.current_stream().cuda_stream``), or leave it out
and, when torch is importable, the current torch stream is used. Bad arguments raise ValueError
naming the argument; CUDA, NVRTC and cache failures raise RuntimeError. ``flash_indexer.reference``
is the CPU reference on numpy arrays.
"""

from . import _flash_indexer as _ext
from ._flash_indexer import (
    MAX_TOPK,
    __version__,
    cache_directory,
    indexer_preset,
    indexer_presets,
    jit_enabled,
    reference,
    set_cache_directory,
    top_blocks_workspace_bytes,
    topk_workspace_bytes,
)

__all__ = [
    "MAX_TOPK",
    "DcpDecodePlan",
    "DecodePlan",
    "cache_directory",
    "current_stream",
    "fp8_fp4_mqa_logits",
    "fp8_fp4_paged_mqa_logits",
    "fp8_fp4_paged_sparse_mqa_logits",
    "fp8_paged_mqa_logits",
    "get_num_sms",
    "get_paged_mqa_logits_metadata",
    "get_paged_sparse_mqa_logits_metadata",
    "indexer_preset",
    "indexer_presets",
    "jit_enabled",
    "paged_mqa_logits",
    "reference",
    "set_cache_directory",
    "set_num_sms",
    "sparse_paged_mqa_logits",
    "top_k_per_row_decode",
    "top_k_per_row_prefill",
    "mqa_logits",
    "fp8_mqa_logits",
    "warm_mqa_logits",
    "topk",
    "topk_indices",
    "topk_merge",
    "topk_workspace_bytes",
    "top_blocks",
    "top_blocks_workspace_bytes",
    "warm_paged_mqa_logits",
    "warm_topk",
]


def current_stream(stream=None):
    """The stream handle to launch on: `stream` when given (an int or an object with .cuda_stream),
    else torch's current CUDA stream when torch is importable, else 0 (the legacy default stream)."""
    if stream is not None:
        return int(getattr(stream, "cuda_stream", stream))
    try:
        import torch
    except ImportError:
        return 0
    if not torch.cuda.is_available():
        return 0
    return int(torch.cuda.current_stream().cuda_stream)


def _fp8_bytes(q):
    """A torch float8 tensor as its uint8 view (the extension reads q's bytes as FP8 E4M3), so that torch
    need not export float8 through DLPack; anything else unchanged."""
    if "float8" in str(getattr(q, "dtype", "")):
        import torch

        return q.view(torch.uint8)
    return q


def _dtype_name(dtype):
    """'float32' / 'float16' / 'bfloat16' from a string or a torch / numpy dtype."""
    name = str(dtype).replace("torch.", "")
    aliases = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "half": "float16", "float": "float32"}
    return aliases.get(name, name)


def paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, logits, *, stream=None,
                     fill_masked=False, histogram=None, variant="automatic", q_scales=None, pdl=False, dcp=None):
    """Writes the paged MQA logits (contract §1, §2, §5) into `logits`, optionally adding the coarse
    histogram into `histogram`. Shapes and dtypes as the C++ paged_mqa_logits. With `q_scales` (int32
    [B, next_n, H]) the cache is MXFP4 (contract §2.2) and q its packed E2M1 query (uint8 [B, next_n, H,
    D / 2]). `pdl=True`: a programmatic dependent launch (sm_90+): the kernel is scheduled while the
    stream's previous kernel ends and waits for it before touching memory. `dcp=(ranks, rank,
    interleave)`: the cache is that rank's shard, context_lens the global lengths (decode context
    parallel: each row gets the rank's columns)."""
    _ext.paged_mqa_logits(_fp8_bytes(q), kv_cache, weights, context_lens, block_table, logits,
                          stream=current_stream(stream), fill_masked=fill_masked, histogram=histogram,
                          variant=variant, q_scales=q_scales, pdl=pdl, dcp=dcp)
    return logits


def sparse_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, candidates, candidate_block, logits=None, *,
                            stream=None, histogram=None, q_scales=None, pdl=False, masked_nan=False,
                            variant="automatic"):
    """The logits of each query row over its candidate blocks only (the second level of DeepSeek-V4.1's
    two-level indexing, docs/design/two-level.md). `candidates` (int32 [B * next_n, C]) lists blocks of
    `candidate_block` (8 or 16) positions of each row's context, in any order; column c * candidate_block
    + o of the result is position candidates[r][c] * candidate_block + o, or -inf where the candidate is
    not one of the row's blocks (-1, negative, past the row) or the position is past the row's length;
    NaN there with `masked_nan=True`, so that topk(..., block_table=candidates, block_size=candidate_block)
    selects live positions only and writes them as context positions (the second level's top-k).
    `variant`: "automatic" (the sm90 kernel on H100/H200), "sm90" or "portable", whose live values are
    bitwise those of paged_mqa_logits with the same variant.
    The other arguments as for paged_mqa_logits (H 32 or 64, D 128). Writes into `logits` (float32,
    float16 or bfloat16 [B * next_n, C * candidate_block]), or a new float32 tensor, and returns it."""
    if logits is None:
        import torch
        logits = torch.empty(candidates.shape[0], candidates.shape[1] * candidate_block, dtype=torch.float32,
                             device=candidates.device)
    _ext.sparse_paged_mqa_logits(_fp8_bytes(q), kv_cache, weights, context_lens, block_table, candidates, candidate_block,
                                 logits, stream=current_stream(stream), histogram=histogram, q_scales=q_scales, pdl=pdl,
                                 masked_nan=masked_nan, variant=variant)
    return logits


def mqa_logits(q, kv, kv_scales, weights, ks, ke, logits, *, stream=None, fill_masked=False, histogram=None,
               pdl=False, compressed=False):
    """Writes the ragged (prefill) MQA logits into `logits` ([T, N]): token t scores the keys
    [ks[t], ke[t]) of kv (float8_e4m3fn [N, D]) with kv_scales (float32 [N]); other columns are left
    alone, or -inf with fill_masked. Optionally adds the coarse histogram of each window into `histogram`
    (int32 [T, 1024]). `compressed=True`: logits is [T, W] and row t's column c holds key ks[t] + c
    (DeepGEMM's max_seqlen_k layout; keys past ks[t] + W are dropped; not with fill_masked). Shapes and
    dtypes as the C++ mqa_logits; `pdl` as for paged_mqa_logits."""
    _ext.mqa_logits(_fp8_bytes(q), _fp8_bytes(kv), kv_scales, weights, ks, ke, logits, stream=current_stream(stream),
                    fill_masked=fill_masked, histogram=histogram, pdl=pdl, compressed=compressed)
    return logits


def topk(logits, lengths, indices, workspace, *, stream=None, sorted=False, next_n=0, histogram=None,
         values=None, block_table=None, split=0, row_starts=None, relative=False, pdl=False, dcp=None, block_size=64):
    """Writes the exact top-k column indices of each row of `logits` into `indices` (int32
    [rows, k]); `workspace` holds at least topk_workspace_bytes(rows) bytes (uint8). With
    `row_starts` (int32 [rows]) row r selects from [row_starts[r], lengths[r]) (prefill windows);
    `relative=True` then writes offsets from the window start; `pdl` and `dcp` as for paged_mqa_logits
    (with `dcp` the lengths are global and the indices global positions, for topk_merge). With
    `block_table` the indices are slots block_table[b][i // block_size] * block_size + i % block_size
    (block_size 64 for paged_mqa_logits' tables; the candidate block for sparse_paged_mqa_logits' candidates)."""
    _ext.topk(logits, lengths, indices, workspace, stream=current_stream(stream), sorted=sorted,
              next_n=next_n, histogram=histogram, values=values, block_table=block_table, split=split,
              row_starts=row_starts, relative=relative, pdl=pdl, dcp=dcp, block_size=block_size)
    return indices


def topk_merge(values, positions, indices, *, stream=None, out_values=None, owned=None, ranks=1, rank=0,
               interleave=1, pdl=False):
    """Writes the exact top-k of the union of candidate lists into `indices` (int32 [rows, k], ascending
    positions, -1 padding): `values` (float32/float16/bfloat16) and `positions` (int32 global positions,
    negative: no candidate) are [D, rows, k_in], e.g. each DCP rank's local top-k gathered. `owned`
    (int32 [rows, k]) gets the share of rank `rank` of the DCP layout (ranks = D, interleave) as its
    local columns; `out_values` (float32 [rows, k]) the merged values."""
    _ext.topk_merge(values, positions, indices, stream=current_stream(stream), out_values=out_values, owned=owned,
                    ranks=ranks, rank=rank, interleave=interleave, pdl=pdl)
    return indices


def warm_paged_mqa_logits(next_n, heads, head_dim, *, histogram=False, logits="float32", variant="automatic",
                          arch=None):
    """Loads (compiling on a cache miss) a logits kernel in the current CUDA context, device 0's primary
    context where the thread has none (torch's, once torch has used the GPU). With `arch` (e.g.
    "sm_90a"), compiles it for that target into the kernel cache only: no GPU or context needed."""
    _ext.warm_paged_mqa_logits(next_n, heads, head_dim, histogram=histogram, logits=_dtype_name(logits),
                               variant=variant, arch=arch)


def warm_mqa_logits(heads, head_dim, *, histogram=False, logits="float32", variant="automatic", arch=None):
    """Loads (compiling on a cache miss) a prefill logits kernel in the current CUDA context, device 0's
    primary context where the thread has none. With `arch` (e.g. "sm_90a"), compiles it for that target
    into the kernel cache only: no GPU or context needed."""
    _ext.warm_mqa_logits(heads, head_dim, histogram=histogram, logits=_dtype_name(logits), variant=variant,
                         arch=arch)


def warm_topk(logits="float32", *, arch=None):
    """Loads every top-k selector for this logits dtype in the current CUDA context, device 0's primary
    context where the thread has none. With `arch` (e.g. "sm_90a"), compiles them for that target into
    the kernel cache only: no GPU or context needed."""
    _ext.warm_topk(_dtype_name(logits), arch=arch)


def _torch_buffer(bytes_needed):
    """A uint8 buffer of bytes_needed() bytes from torch's caching allocator on the current device, so the
    engine's memory accounting sees it; None without torch or CUDA (the caller then allocates)."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return torch.empty(bytes_needed(), dtype=torch.uint8, device=torch.device("cuda", torch.cuda.current_device()))


class DecodePlan(_ext.DecodePlan):
    """The decode indexer in one capturable call (histogram zeroed, logits + histogram, top-k), with its
    workspace allocated once. Create it with the CUDA device current (e.g. after torch.cuda.init()).
    `pdl=True`: the plan's kernels are programmatic dependent launches (DecodePlanConfig::pdl);
    `dcp=(ranks, rank, interleave)`: this GPU's shard of a DCP cache (DecodePlanConfig::dcp);
    `step`: "automatic", "two_kernels" or "one_pass" (DecodePlanConfig::step; the full-context one pass is
    opt-in, docs/design/decode-step.md; "automatic" takes the second level's one kernel where it is faster,
    docs/design/two-level.md);
    `candidates=C`, `candidate_block=8|16`: two-level indexing's second level (DecodePlanConfig::candidates,
    docs/design/two-level.md): run() then takes `candidates` (int32 [B * next_n, C], blocks of each row's
    context) and writes the top-k context positions among them, -1 padding."""

    def __init__(self, *, max_batch, next_n, heads, head_dim, k, logits="float16", max_context=131072,
                 histogram=True, physical_slots=False, sorted=False, kv="fp8", pdl=False, dcp=None, memory=None,
                 step="automatic", candidates=0, candidate_block=8):
        """`memory`: the uint8 CUDA tensor the plan works in (DecodePlan.required_bytes(...) bytes, 256-byte
        aligned), kept alive by the plan; by default one from torch's caching allocator on the current
        device where torch has CUDA, else the plan allocates its own."""
        config = dict(max_batch=max_batch, next_n=next_n, heads=heads, head_dim=head_dim, k=k,
                      logits=_dtype_name(logits), max_context=max_context, histogram=histogram,
                      physical_slots=physical_slots, sorted=sorted, kv=kv, pdl=pdl, dcp=dcp, step=step,
                      candidates=candidates, candidate_block=candidate_block)
        if memory is None:
            memory = _torch_buffer(lambda: _ext.DecodePlan.required_bytes(**config))
        super().__init__(**config, memory=memory)
        self.memory = memory  # the buffer lives as long as the plan (None: the plan's own allocation)
        self._logits = config["logits"]

    @classmethod
    def from_preset(cls, name, *, max_batch, **options):
        """The plan of a model's indexer (`flash_indexer.indexer_presets()`: "deepseek-v4-flash",
        "glm-5", ...) for up to `max_batch` requests: its heads, head_dim, k, kv, next_n and max_context,
        each replaced by a keyword of the same name in `options`, which also takes every other keyword
        of DecodePlan (logits, histogram, memory, ...)."""
        preset = indexer_preset(name)
        config = {key: preset[key] for key in ("heads", "head_dim", "k", "kv", "next_n", "max_context")}
        config.update(options)
        return cls(max_batch=max_batch, **config)

    def run(self, q, kv_cache, weights, context_lens, block_table, indices, *, stream=None, q_scales=None,
            candidates=None):
        """Writes the top-k indices (int32 [B * next_n, k]) of one decode step; returns `indices`.
        Capturable in torch.cuda.graph (the stream defaults to the current torch stream). A plan with
        kv="mxfp4" takes the packed E2M1 query and its exponents (`q_scales`, int32 [B, next_n, H]); a
        second-level plan (candidates=C) its candidate blocks (`candidates`), and writes positions."""
        super().run(_fp8_bytes(q), kv_cache, weights, context_lens, block_table, indices,
                    stream=current_stream(stream), q_scales=q_scales, candidates=candidates)
        return indices

    def top_blocks(self, context_lens, block, blocks, *, keep_newest=True, stream=None, workspace=None):
        """The first level of two-level indexing over the logits of the last run(), on its stream: each
        row's best blocks of `block` keys (flash_indexer.top_blocks, with that run's context_lens) into
        `blocks` (int32 [B * next_n, k_blocks]); returns `blocks`. A full-context plan without DCP only.
        `workspace` as top_blocks takes it, else one kept per device and reused."""
        if workspace is None:
            workspace = _top_blocks_workspace(blocks.shape[0], self.width, block, self._logits, blocks.device)
        super().top_blocks(context_lens, block, blocks, workspace, stream=current_stream(stream),
                           keep_newest=keep_newest)
        return blocks


class DcpDecodePlan(_ext.DcpDecodePlan):
    """One rank's decode indexer under decode context parallelism: its shard's logits and local top-k, an
    NCCL all-gather of every rank's candidates and their exact merge, in one capturable call (C++
    DcpDecodePlan). `comm`: the group's ncclComm_t as an int (e.g. vLLM's PyNcclCommunicator.comm.value),
    `dcp=(ranks, rank, interleave)`: this rank's layout, matching `comm`. libnccl is loaded at run time
    (libnccl.so.2, or the file FLASH_INDEXER_NCCL names)."""

    def __init__(self, *, comm, dcp, max_batch, next_n, heads, head_dim, k, logits="float16",
                 max_context=131072, histogram=True, sorted=False, kv="fp8", pdl=False):
        super().__init__(comm=int(getattr(comm, "value", comm) or 0), dcp=tuple(dcp), max_batch=max_batch,
                         next_n=next_n, heads=heads, head_dim=head_dim, k=k, logits=_dtype_name(logits),
                         max_context=max_context, histogram=histogram, sorted=sorted, kv=kv, pdl=pdl)

    def run(self, q, kv_cache, weights, context_lens, block_table, indices, *, owned=None, stream=None,
            q_scales=None):
        """Writes the global top-k (int32 [B * next_n, k], the same on every rank) and, with `owned`
        (int32 [B * next_n, k]), this rank's share as local columns; returns `indices`. Every rank of
        the group calls it with the same B."""
        super().run(_fp8_bytes(q), kv_cache, weights, context_lens, block_table, indices,
                    stream=current_stream(stream), owned=owned, q_scales=q_scales)
        return indices


# ---- drop-in replacements for what engines call today (torch tensors) ----------------------------

def _round_up(x, to):
    return (x + to - 1) // to * to


_num_sms = None


def get_num_sms():
    """DeepGEMM's get_num_sms: the SM count set by set_num_sms, else the current torch device's."""
    if _num_sms is not None:
        return _num_sms
    import torch

    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def set_num_sms(num_sms):
    """DeepGEMM's set_num_sms: the count get_num_sms returns. FlashIndexer's kernels size their grids from
    the device and the shapes, so it changes nothing else."""
    global _num_sms
    if int(num_sms) < 1:
        raise ValueError(f"set_num_sms: num_sms: expected 1 or more, got {num_sms}")
    _num_sms = int(num_sms)


def _check_indices(op, indices, tokens, next_n=1):
    """DeepGEMM's varlen form: `indices` (int32 [tokens]) names each query token's request, the tokens of
    a request consecutive, with next_n 1 and a context length and block-table row per token. The ids let
    DeepGEMM read a request's keys once for all its tokens; every token's logits are those of its own
    row, which is what scoring each token as its own request gives, so they are checked and not needed."""
    if indices is None:
        return
    if next_n != 1:
        raise ValueError(f"{op}: indices: expected next_n = 1 with per-token request indices, got next_n {next_n}")
    dtype = str(getattr(indices, "dtype", "")).replace("torch.", "")
    if getattr(indices, "dim", lambda: -1)() != 1 or indices.shape[0] != tokens or dtype != "int32":
        raise ValueError(f"{op}: indices: expected int32 [{tokens}] (the request of each query token), got "
                         f"{dtype or type(indices).__name__} {list(getattr(indices, 'shape', []))}")


def get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms, indices=None):
    """DeepGEMM's scheduling-metadata call, for engines that swap the import: FlashIndexer schedules on
    the device from the lengths, so this returns a placeholder of DeepGEMM's shape (int32 [num_sms + 1,
    2]) that the logits calls accept and ignore."""
    import torch

    if block_kv != 64:
        raise ValueError(f"get_paged_mqa_logits_metadata: block_kv: expected 64, got {block_kv}")
    _check_indices("get_paged_mqa_logits_metadata", indices, context_lens.shape[0])
    return torch.zeros((int(num_sms) + 1, 2), dtype=torch.int32, device=context_lens.device)


def fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                         clean_logits=False, indices=None, *, logits_dtype=None, histogram=None):
    """DeepGEMM's fp8_paged_mqa_logits: returns new logits [B * next_n, max_context_len] (float32 unless
    `logits_dtype` says float16 / bfloat16) of q (float8_e4m3fn [B, next_n, H, D]) against the paged FP8
    cache (uint8 [num_blocks, 64, 1, D + 4]), on the current torch stream. Columns past a row's length
    are unspecified, or -inf with clean_logits=True. `schedule_meta` is accepted and ignored; `indices`
    (DeepGEMM's varlen form, int32 [B] request ids with next_n 1) is checked, the result is the same;
    `histogram` (int32 [B * next_n, 1024], zeroed by the caller) receives the coarse-bin counts."""
    import torch

    del schedule_meta  # the kernel schedules itself
    _check_indices("fp8_paged_mqa_logits", indices, q.shape[0], q.shape[1])
    dtype = torch.float32 if logits_dtype is None else logits_dtype
    rows = q.shape[0] * q.shape[1]
    logits = torch.empty((rows, int(max_context_len)), dtype=dtype, device=q.device)
    paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, logits, fill_masked=clean_logits,
                     histogram=histogram)
    return logits


def fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                             clean_logits=False, logits_dtype=None, indices=None, *, histogram=None):
    """DeepGEMM's fp8_fp4_paged_mqa_logits: q is (values, scales). (float8_e4m3fn [B, next_n, H, D], None)
    with the FP8 cache (uint8 [num_blocks, 64, 1, D + 4]); (packed E2M1 uint8 [B, next_n, H, D / 2], int32
    [B, next_n, H] exponents) with the MXFP4 cache (uint8 [num_blocks, 64, 1, 68] at D 128). Returns new
    logits [B * next_n, max_context_len], float32 unless `logits_dtype` says bfloat16 / float16."""
    import torch

    del schedule_meta  # the kernel schedules itself
    values, scales = q if isinstance(q, (tuple, list)) else (q, None)
    _check_indices("fp8_fp4_paged_mqa_logits", indices, values.shape[0], values.shape[1])
    dtype = torch.float32 if logits_dtype is None else logits_dtype
    rows = values.shape[0] * values.shape[1]
    logits = torch.empty((rows, int(max_context_len)), dtype=dtype, device=values.device)
    paged_mqa_logits(values, kv_cache, weights, context_lens, block_table, logits, fill_masked=clean_logits,
                     histogram=histogram, q_scales=scales)
    return logits


def _int32_tensor(op, name, t, ranks, rows=None):
    """`t` as an int32 tensor of one of `ranks`, with `rows` rows where given; else ValueError naming it."""
    dtype = str(getattr(t, "dtype", "")).replace("torch.", "")
    shape = list(getattr(t, "shape", []))
    if dtype != "int32" or len(shape) not in ranks or (rows is not None and shape[0] != rows):
        want = f"[{rows}, ...]" if rows is not None else "a tensor"
        raise ValueError(f"{op}: {name}: expected int32 of rank {' or '.join(map(str, ranks))}, {want}; got "
                         f"{dtype or type(t).__name__} {shape}")


def get_paged_sparse_mqa_logits_metadata(context_lens, block_table, indices, page_kv, sparse_kv_block_indices, qk_dtype,
                                         sparse_block_kv):
    """DeepGEMM's get_paged_sparse_mqa_logits_metadata (two-level indexing's second level, next_n 1): what
    fp8_fp4_paged_sparse_mqa_logits reads, as one uint8 tensor built on the device (no sync, capturable):
    each query token's length, its candidate blocks and its block-table row, int32. As DeepGEMM's, a row's
    candidates are the first min(C, ceil(len / sparse_block_kv)) entries of its `sparse_kv_block_indices`
    row (the rest are ignored: -1 here, never read), and the metadata must be rebuilt whenever any input
    changes. `indices` (the request of each token) is checked and not needed: every token uses its own
    block-table row. `page_kv` is 64 (the cache's block); `qk_dtype` the query's: torch.int8 / uint8 for
    packed E2M1 (MXFP4 cache), float8_e4m3fn for FP8 queries with the FP8 cache (q_sf None)."""
    import torch

    op = "get_paged_sparse_mqa_logits_metadata"
    if page_kv != 64:
        raise ValueError(f"{op}: page_kv: expected 64 (the cache's block of keys), got {page_kv}")
    if sparse_block_kv not in (8, 16):
        raise ValueError(f"{op}: sparse_block_kv: expected 8 or 16, got {sparse_block_kv}")
    if str(qk_dtype).replace("torch.", "") not in ("int8", "uint8", "float8_e4m3fn"):
        raise ValueError(f"{op}: qk_dtype: expected torch.int8 / torch.uint8 (packed E2M1) or torch.float8_e4m3fn, "
                         f"got {qk_dtype}")
    _int32_tensor(op, "sparse_kv_block_indices", sparse_kv_block_indices, (2,))
    tokens, blocks = sparse_kv_block_indices.shape
    if blocks < 1:
        raise ValueError(f"{op}: sparse_kv_block_indices: expected at least one column, got {blocks}")
    _int32_tensor(op, "context_lens", context_lens, (1, 2), tokens)
    if context_lens.dim() == 2 and context_lens.shape[1] != 1:
        raise ValueError(f"{op}: context_lens: expected [{tokens}] or [{tokens}, 1] (next_n 1), got "
                         f"{list(context_lens.shape)}")
    _int32_tensor(op, "block_table", block_table, (2,), tokens)
    if block_table.shape[1] < 1:
        raise ValueError(f"{op}: block_table: expected at least one column, got {list(block_table.shape)}")
    _check_indices(op, indices, tokens)
    lens = context_lens.reshape(-1)
    live = (lens.clamp(min=0) + (sparse_block_kv - 1)) // sparse_block_kv
    column = torch.arange(blocks, dtype=torch.int32, device=lens.device)
    candidates = torch.where(column[None, :] < live[:, None], sparse_kv_block_indices, -1)
    return torch.cat([lens, candidates.reshape(-1), block_table.reshape(-1)]).view(torch.uint8)


def _sparse_metadata_parts(op, metadata, tokens, blocks):
    """The lengths [T], candidates [T, C] and block table [T, P] of get_paged_sparse_mqa_logits_metadata's
    tensor, checked against the call's T and C from its shape (no sync)."""
    import torch

    dtype = str(getattr(metadata, "dtype", "")).replace("torch.", "")
    words = metadata.numel() // 4 if dtype == "uint8" and metadata.dim() == 1 else -1
    pages = words // tokens - 1 - blocks if tokens > 0 and words >= 0 else -1
    if words * 4 != metadata.numel() or pages < 1 or words != tokens * (1 + blocks + pages):
        raise ValueError(f"{op}: metadata: expected get_paged_sparse_mqa_logits_metadata's uint8 tensor for {tokens} "
                         f"query tokens and num_max_sparse_blocks = {blocks}, got {dtype} {list(metadata.shape)}")
    words = metadata.view(torch.int32)
    lens = words[:tokens]
    candidates = words[tokens:tokens * (1 + blocks)].view(tokens, blocks)
    return lens, candidates, words[tokens * (1 + blocks):].view(tokens, pages)


def fp8_fp4_paged_sparse_mqa_logits(q, kv_cache, weights, metadata, num_max_sparse_blocks, sparse_block_kv):
    """DeepGEMM's fp8_fp4_paged_sparse_mqa_logits: new bfloat16 logits [T, C * sparse_block_kv] (C =
    num_max_sparse_blocks) of each query token over its candidate blocks (metadata from
    get_paged_sparse_mqa_logits_metadata); column c * sparse_block_kv + o is position block_c *
    sparse_block_kv + o of the token's context. q is (packed E2M1 int8 / uint8 [T, 1, H, D / 2], int32
    [T, 1, H] exponents) with the MXFP4 cache (uint8 [num_blocks, 64, 1, 68]), or (float8_e4m3fn [T, 1, H,
    D], None) with the FP8 cache (uint8 [num_blocks, 64, 1, D + 4]); H 32 or 64, D 128. `weights` is
    [T, H], bfloat16 (DeepGEMM's) or float32. The values are sparse_paged_mqa_logits' (FP32 sums, rounded
    once to bfloat16; DeepGEMM sums in bfloat16); the columns DeepGEMM leaves unwritten (candidates past
    a token's count, positions past its length) are -inf."""
    import torch

    op = "fp8_fp4_paged_sparse_mqa_logits"
    if not isinstance(q, (tuple, list)) or len(q) != 2:
        raise ValueError(f"{op}: q: expected (values, scales), got {type(q).__name__}")
    values, scales = q
    if "float8" in str(values.dtype) and scales is not None:
        raise ValueError(f"{op}: q: FP8 queries with UE8M0 scales (MXFP8) are not supported; FP8 queries come as "
                         "(q, None) with the FP8 cache (a float32 scale per token)")
    if values.dim() != 4 or values.shape[1] != 1:
        raise ValueError(f"{op}: q: expected [T, 1, H, D] values (next_n 1), got {list(values.shape)}")
    if sparse_block_kv not in (8, 16):
        raise ValueError(f"{op}: sparse_block_kv: expected 8 or 16, got {sparse_block_kv}")
    tokens, blocks = values.shape[0], int(num_max_sparse_blocks)
    if blocks < 1:
        raise ValueError(f"{op}: num_max_sparse_blocks: expected 1 or more, got {num_max_sparse_blocks}")
    lens, candidates, table = _sparse_metadata_parts(op, metadata, tokens, blocks)
    if str(values.dtype) == "torch.int8":
        values = values.view(torch.uint8)  # DeepGEMM's packed-E2M1 dtype; the kernels read the bytes
    if str(getattr(weights, "dtype", "")) != "torch.float32":
        weights = weights.float()
    logits = torch.empty((tokens, blocks * sparse_block_kv), dtype=torch.bfloat16, device=values.device)
    return sparse_paged_mqa_logits(values, kv_cache, weights, lens, table, candidates, sparse_block_kv, logits,
                                   q_scales=scales)


_workspaces = {}


def fp8_fp4_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=True, max_seqlen_k=0,
                       logits_dtype=None, schedule_meta=None):
    """DeepGEMM's fp8_fp4_mqa_logits over FP8 inputs: q = (float8_e4m3fn [T, H, D], None), kv = (keys
    float8_e4m3fn [N, D], scales float32 [N]). Returns new logits [T, N], float32 unless `logits_dtype`
    says bfloat16 / float16, token t scoring keys [cu_seq_len_k_start[t], cu_seq_len_k_end[t]); the other
    columns are -inf with clean_logits=True. With max_seqlen_k > 0 (at least the longest window), the
    compressed layout: logits [T, max_seqlen_k], row t's column c the key cu_seq_len_k_start[t] + c, the
    columns past the window unspecified, clean_logits must be False (DeepGEMM's rules)."""
    import torch

    del schedule_meta  # the kernel schedules itself
    values, scales = q if isinstance(q, (tuple, list)) else (q, None)
    if scales is not None:
        raise ValueError("fp8_fp4_mqa_logits: q: FP4 queries are not supported in prefill; pass (q, None)")
    keys, key_scales = kv
    dtype = torch.float32 if logits_dtype is None else logits_dtype
    logits = _prefill_logits("fp8_fp4_mqa_logits", values.shape[0], keys.shape[0], max_seqlen_k, clean_logits, dtype,
                             values.device)
    mqa_logits(values, keys, key_scales, weights, cu_seq_len_k_start, cu_seq_len_k_end, logits, fill_masked=clean_logits,
               compressed=max_seqlen_k > 0)
    return logits


def _prefill_logits(op, tokens, keys, max_seqlen_k, clean_logits, dtype, device):
    """DeepGEMM's prefill output: [T, N], or the compressed [T, max_seqlen_k] (max_seqlen_k > 0, which
    DeepGEMM allows only with clean_logits=False)."""
    import torch

    if max_seqlen_k < 0:
        raise ValueError(f"{op}: max_seqlen_k: expected 0 ([T, N]) or the longest window, got {max_seqlen_k}")
    if max_seqlen_k > 0 and clean_logits:
        raise ValueError(f"{op}: clean_logits: expected False with max_seqlen_k > 0 (a compressed row's columns past "
                         "its window belong to no key)")
    return torch.empty((tokens, max_seqlen_k if max_seqlen_k > 0 else keys), dtype=dtype, device=device)


def fp8_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=True, max_seqlen_k=0):
    """DeepGEMM's fp8_mqa_logits: returns new float32 logits [T, N] of q (float8_e4m3fn [T, H, D]) against
    kv = (keys float8_e4m3fn [N, D], scales float32 [N]), token t scoring keys
    [cu_seq_len_k_start[t], cu_seq_len_k_end[t]), on the current torch stream; the other columns are -inf
    with clean_logits=True, unspecified otherwise; with max_seqlen_k > 0 the compressed layout, as
    fp8_fp4_mqa_logits."""
    import torch

    keys, scales = kv
    logits = _prefill_logits("fp8_mqa_logits", q.shape[0], keys.shape[0], max_seqlen_k, clean_logits, torch.float32,
                             q.device)
    mqa_logits(q, keys, scales, weights, cu_seq_len_k_start, cu_seq_len_k_end, logits, fill_masked=clean_logits,
               compressed=max_seqlen_k > 0)
    return logits


def _topk_workspace(device, rows):
    """A top-k workspace per device, grown on demand and reused, so that repeated (and graph-captured)
    calls do not allocate."""
    import torch

    key = str(device)
    need = topk_workspace_bytes(rows)
    ws = _workspaces.get(key)
    if ws is None or ws.numel() < need:
        ws = torch.empty(_round_up(need, 1 << 16), dtype=torch.uint8, device=device)
        _workspaces[key] = ws
    return ws


def topk_indices(logits, k, lengths, *, stream=None, sorted=False):
    """The exact top-k column indices of each row of `logits` (float32 / float16 / bfloat16 [rows,
    width]) among its first lengths[r] columns (int32 [rows]), as a new int32 [rows, k] tensor from torch's
    allocator (-1 padding where a row has fewer than k columns); the workspace is kept per device and
    reused. torch.ops.flash_indexer.topk is this op for torch.compile."""
    import torch

    indices = torch.empty((logits.shape[0], int(k)), dtype=torch.int32, device=logits.device)
    topk(logits, lengths, indices, _topk_workspace(logits.device, logits.shape[0]), stream=stream, sorted=sorted)
    return indices


def _top_blocks_workspace(rows, width, block, dtype, device):
    """A top_blocks workspace per device, grown on demand and reused, as _topk_workspace."""
    import torch

    need = top_blocks_workspace_bytes(rows, width, block, dtype)
    key = f"top_blocks:{device}"
    ws = _workspaces.get(key)
    if ws is None or ws.numel() < need:
        ws = torch.empty(_round_up(need, 1 << 16), dtype=torch.uint8, device=device)
        _workspaces[key] = ws
    return ws


def top_blocks(logits, lengths, block, blocks, workspace=None, *, stream=None, keep_newest=False, next_n=0):
    """The first level of DeepSeek-V4.1's two-level indexing (docs/design/two-level.md): writes each row's
    best blocks of `block` columns of `logits` (float32 / float16 / bfloat16 [rows, width]) among its first
    lengths[r] columns (int32 [rows]), ranked by their largest score, into `blocks` (int32 [rows, k_blocks]):
    ascending block ids, -1 padding, a block with no selectable score never taken, equal maxima to the
    lower block; with keep_newest each row's last block first. With next_n, lengths are per request
    (int32 [B], rows = B * next_n), as DecodePlan's context_lens: row b * next_n + j sees lengths[b] -
    next_n + j + 1 columns. `workspace`: uint8 of at least
    top_blocks_workspace_bytes(rows, width, block, dtype) bytes, else one kept per device and reused. The
    result is the candidates of sparse_paged_mqa_logits and DecodePlan's second level."""
    if workspace is None:
        workspace = _top_blocks_workspace(logits.shape[0], logits.shape[1], block, _dtype_name(logits.dtype),
                                          logits.device)
    _ext.top_blocks(logits, lengths, block, blocks, workspace, stream=current_stream(stream), keep_newest=keep_newest,
                    next_n=next_n)
    return blocks


def _vllm_topk_rows(op, logits, indices, num_rows, stride0, stride1, top_k):
    """The arguments vLLM's top-k calls share, checked; the first num_rows rows of `logits` as a view."""
    if stride1 != 1:
        raise ValueError(f"{op}: stride1: expected 1, got {stride1}")
    if top_k < 1 or top_k > MAX_TOPK:
        raise ValueError(f"{op}: top_k: expected 1..{MAX_TOPK}, got {top_k}")
    if indices.dim() != 2 or indices.shape[0] < num_rows or indices.shape[1] != top_k:
        raise ValueError(f"{op}: indices: expected [>= num_rows = {num_rows}, top_k = {top_k}], got {list(indices.shape)}")
    return logits.as_strided((num_rows, logits.shape[1]), (stride0, 1))


def top_k_per_row_decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1, top_k):
    """vLLM's top_k_per_row_decode: the top_k column indices of each of the first num_rows rows of
    `logits` (float32; float16 / bfloat16 too) into `indices` (int32 [num_rows, top_k], contiguous), on
    the current torch stream. seq_lens is [B] (row r = b * next_n + j sees seq_lens[b] - next_n + j + 1
    columns; [B, 1] reads the same) or [B, next_n]. Exact and deterministic (ties to the lower column, -1
    padding)."""
    rows = _vllm_topk_rows("top_k_per_row_decode", logits, indices, num_rows, stride0, stride1, top_k)
    if seq_lens.dim() == 2 and seq_lens.shape[1] == 1 and next_n > 1:
        seq_lens = seq_lens.reshape(-1)  # vLLM's [B, 1] request lengths: the MTP rule, as [B]
    out = indices[:num_rows]
    topk(rows, seq_lens, out, _topk_workspace(logits.device, num_rows),
         next_n=next_n if seq_lens.dim() == 1 else 0)
    return indices


def top_k_per_row_prefill(logits, row_starts, row_ends, indices, num_rows, stride0, stride1, top_k):
    """vLLM's top_k_per_row_prefill: row r of `logits` (float32; float16 / bfloat16 too) selects the
    top_k of its columns [row_starts[r], row_ends[r]) (int32 [num_rows] each, vLLM's cu_seqlen_ks /
    cu_seqlen_ke) and writes their offsets from row_starts[r] into `indices` (int32 [num_rows, top_k],
    contiguous), on the current torch stream. Exact and deterministic (ties to the lower column, -1
    padding; a window of at most top_k columns gives 0, 1, ... then -1)."""
    rows = _vllm_topk_rows("top_k_per_row_prefill", logits, indices, num_rows, stride0, stride1, top_k)
    for name, t in (("row_starts", row_starts), ("row_ends", row_ends)):
        if t.dim() != 1 or t.shape[0] < num_rows:
            raise ValueError(f"top_k_per_row_prefill: {name}: expected [>= num_rows = {num_rows}], "
                             f"got {list(t.shape)}")
    topk(rows, row_ends[:num_rows], indices[:num_rows], _topk_workspace(logits.device, num_rows),
         row_starts=row_starts[:num_rows], relative=True)
    return indices


def _register_torch_ops():
    """The ops as torch custom ops (torch.ops.flash_indexer.*, traceable by torch.compile) where torch
    imports and has torch.library.custom_op (2.4 and later); elsewhere the package works on any DLPack
    arrays, an older torch's included."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return
    import torch

    if not hasattr(getattr(torch, "library", None), "custom_op"):
        return
    from . import _torch_ops  # noqa: F401


_register_torch_ops()
