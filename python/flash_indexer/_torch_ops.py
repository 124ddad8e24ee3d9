"""The ops as torch custom ops in the `flash_indexer` namespace, so that torch.compile traces them and
engines can call them the way they call their own (`torch.ops.flash_indexer.top_k_per_row_decode(...)`).
Schemas mirror the peers' where the op is a drop-in (vLLM's `_C.top_k_per_row_*`, DeepGEMM's
`fp8_paged_mqa_logits`); each has a fake (meta) implementation giving the output's shape and dtype.
Registered when flash_indexer is imported in a process where torch is importable."""
from typing import Optional

import torch

import flash_indexer as fi  # the package being imported: its functions are defined by now

_NS = "flash_indexer"


@torch.library.custom_op(f"{_NS}::top_k_per_row_decode", mutates_args=("indices",))
def top_k_per_row_decode(logits: torch.Tensor, next_n: int, seq_lens: torch.Tensor, indices: torch.Tensor,
                         num_rows: int, stride0: int, stride1: int, top_k: int) -> None:
    """vLLM's top_k_per_row_decode (flash_indexer.top_k_per_row_decode), writing `indices`."""
    fi.top_k_per_row_decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1, top_k)


@top_k_per_row_decode.register_fake
def _(logits, next_n, seq_lens, indices, num_rows, stride0, stride1, top_k):
    return None


@torch.library.custom_op(f"{_NS}::top_k_per_row_prefill", mutates_args=("indices",))
def top_k_per_row_prefill(logits: torch.Tensor, row_starts: torch.Tensor, row_ends: torch.Tensor,
                          indices: torch.Tensor, num_rows: int, stride0: int, stride1: int, top_k: int) -> None:
    """vLLM's top_k_per_row_prefill (flash_indexer.top_k_per_row_prefill), writing `indices`."""
    fi.top_k_per_row_prefill(logits, row_starts, row_ends, indices, num_rows, stride0, stride1, top_k)


@top_k_per_row_prefill.register_fake
def _(logits, row_starts, row_ends, indices, num_rows, stride0, stride1, top_k):
    return None


@torch.library.custom_op(f"{_NS}::fp8_paged_mqa_logits", mutates_args=())
def fp8_paged_mqa_logits(q: torch.Tensor, kv_cache: torch.Tensor, weights: torch.Tensor, context_lens: torch.Tensor,
                         block_table: torch.Tensor, schedule_meta: torch.Tensor, max_context_len: int,
                         clean_logits: bool = False) -> torch.Tensor:
    """DeepGEMM's fp8_paged_mqa_logits (flash_indexer.fp8_paged_mqa_logits): new float32 logits."""
    return fi.fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                                   clean_logits)


@fp8_paged_mqa_logits.register_fake
def _(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, clean_logits=False):
    return q.new_empty((q.shape[0] * q.shape[1], max_context_len), dtype=torch.float32)


@torch.library.custom_op(f"{_NS}::fp8_fp4_paged_sparse_mqa_logits", mutates_args=())
def fp8_fp4_paged_sparse_mqa_logits(q: torch.Tensor, q_sf: Optional[torch.Tensor], kv_cache: torch.Tensor,
                                    weights: torch.Tensor, metadata: torch.Tensor, num_max_sparse_blocks: int,
                                    sparse_block_kv: int) -> torch.Tensor:
    """DeepGEMM's fp8_fp4_paged_sparse_mqa_logits (flash_indexer.fp8_fp4_paged_sparse_mqa_logits), the query
    as two arguments: new bfloat16 logits."""
    return fi.fp8_fp4_paged_sparse_mqa_logits((q, q_sf), kv_cache, weights, metadata, num_max_sparse_blocks,
                                              sparse_block_kv)


@fp8_fp4_paged_sparse_mqa_logits.register_fake
def _(q, q_sf, kv_cache, weights, metadata, num_max_sparse_blocks, sparse_block_kv):
    return q.new_empty((q.shape[0], num_max_sparse_blocks * sparse_block_kv), dtype=torch.bfloat16)


@torch.library.custom_op(f"{_NS}::topk", mutates_args=())
def topk(logits: torch.Tensor, k: int, lengths: torch.Tensor) -> torch.Tensor:
    """The exact top-k column indices (int32 [rows, k], -1 padding) of each row of `logits` among its first
    lengths[r] columns, in a tensor from torch's allocator (flash_indexer.topk_indices)."""
    return fi.topk_indices(logits, k, lengths)


@topk.register_fake
def _(logits, k, lengths):
    return logits.new_empty((logits.shape[0], k), dtype=torch.int32)
