"""FlashIndexer: JIT CUDA kernels for the DeepSeek Sparse Attention lightning indexer.

Device tensors are any DLPack arrays (torch, CuPy, JAX). The stream is the caller's: pass
``stream=`` (an integer handle, e.g. ``torch.cuda.current_stream().cuda_stream``), or leave it out
and, when torch is importable, the current torch stream is used. Bad arguments raise ValueError
naming the argument; CUDA, NVRTC and cache failures raise RuntimeError. ``flash_indexer.reference``
is the CPU reference on numpy arrays.
"""

from . import _flash_indexer as _ext
from ._flash_indexer import (
    cache_directory,
    jit_enabled,
    reference,
    set_cache_directory,
    topk_workspace_bytes,
)

__version__ = "0.1.0"

__all__ = [
    "DecodePlan",
    "cache_directory",
    "current_stream",
    "jit_enabled",
    "paged_mqa_logits",
    "reference",
    "set_cache_directory",
    "topk",
    "topk_workspace_bytes",
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


def _dtype_name(dtype):
    """'float32' / 'float16' / 'bfloat16' from a string or a torch / numpy dtype."""
    name = str(dtype).replace("torch.", "")
    aliases = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "half": "float16", "float": "float32"}
    return aliases.get(name, name)


def paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, logits, *, stream=None,
                     fill_masked=False, histogram=None, variant="automatic"):
    """Writes the paged MQA logits (CONTRACT 1, 2, 5) into `logits`, optionally adding the coarse
    histogram into `histogram`. Shapes and dtypes as the C++ paged_mqa_logits."""
    _ext.paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, logits,
                          stream=current_stream(stream), fill_masked=fill_masked, histogram=histogram,
                          variant=variant)
    return logits


def topk(logits, lengths, indices, workspace, *, stream=None, sorted=False, next_n=0, histogram=None,
         values=None, block_table=None, split=0):
    """Writes the exact top-k column indices of each row of `logits` into `indices` (int32
    [rows, k]); `workspace` holds at least topk_workspace_bytes(rows) bytes (uint8)."""
    _ext.topk(logits, lengths, indices, workspace, stream=current_stream(stream), sorted=sorted,
              next_n=next_n, histogram=histogram, values=values, block_table=block_table, split=split)
    return indices


def warm_paged_mqa_logits(next_n, heads, head_dim, *, histogram=False, logits="float32", variant="automatic"):
    """Loads (compiling on a cache miss) a logits kernel in the current CUDA context."""
    _ext.warm_paged_mqa_logits(next_n, heads, head_dim, histogram=histogram, logits=_dtype_name(logits),
                               variant=variant)


def warm_topk(logits="float32"):
    """Loads every top-k selector for this logits dtype in the current CUDA context."""
    _ext.warm_topk(_dtype_name(logits))


class DecodePlan(_ext.DecodePlan):
    """The decode indexer in one capturable call (histogram zeroed, logits + histogram, top-k), with its
    workspace allocated once. Create it with the CUDA device current (e.g. after torch.cuda.init())."""

    def __init__(self, *, max_batch, next_n, heads, head_dim, k, logits="float16", max_context=131072,
                 histogram=True, physical_slots=False, sorted=False):
        super().__init__(max_batch=max_batch, next_n=next_n, heads=heads, head_dim=head_dim, k=k,
                         logits=_dtype_name(logits), max_context=max_context, histogram=histogram,
                         physical_slots=physical_slots, sorted=sorted)

    def run(self, q, kv_cache, weights, context_lens, block_table, indices, *, stream=None):
        """Writes the top-k indices (int32 [B * next_n, k]) of one decode step; returns `indices`.
        Capturable in torch.cuda.graph (the stream defaults to the current torch stream)."""
        super().run(q, kv_cache, weights, context_lens, block_table, indices, stream=current_stream(stream))
        return indices
