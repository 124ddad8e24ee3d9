#include "usage.hpp"

namespace flash_indexer::cli {

const char* const kMainUsage = R"(usage: flash-indexer <command> [options]

The kernel cache and the kernels of FlashIndexer (paged MQA logits and top-k selection of the
DeepSeek Sparse Attention indexer), from the command line.

commands:
  warm    compile and cache a set of kernel configurations (works without a GPU with --arch)
  list    list the cached kernels
  clear   remove every cached kernel
  info    NVRTC and driver versions, GPUs, cache directory and size
  check   run the kernels on the GPU against the CPU reference and print a table
  recall  top-k recall of FP16 / BF16 logits against FP32 logits on synthetic indexer inputs
  bench   benchmark on the GPU: bench logits | bench topk | bench decode | bench prefill
  presets the models' indexer shapes (heads, k, cache, next_n, context) that bench decode --preset takes

Run 'flash-indexer <command> --help' for the options of a command.
)";

const std::map<std::string, std::string> kUsages = {
    {"warm", R"(usage: flash-indexer warm [--arch ARCH] [--manifest FILE.json] [--jobs N] [--cache-dir DIR]

Compiles every configuration of the manifest (default: every configuration the library supports) for
ARCH and stores it in the cache. Entries already cached are hits and are not compiled again.

  --arch ARCH        target such as sm_90a (H100/H200), sm_80, sm_86, sm_89; default: the GPU present
  --manifest FILE    JSON {"kernels": ["paged_mqa_logits.portable.n1.h64.d128.bs64.hist0.out-f16.kv-fp8",
                     "topk.split1.in-f16", ...]}
                     (keys without the arch take ARCH; keys ending in an arch keep theirs)
  --jobs N           parallel compiles (default: the number of CPUs)
  --cache-dir DIR    cache directory (default: FLASH_INDEXER_CACHE_DIR, XDG_CACHE_HOME, ~/.cache)
)"},
    {"presets", R"(usage: flash-indexer presets [--json]

Lists the model presets (DeepSeek-V3.2, V4-Flash, V4-Pro, V4.1-Flash, GLM-5): indexer heads, head
dimension, k, index cache format, next_n (1 + the model's draft tokens) and the index keys of a row at
the model's longest context. `bench decode --preset NAME` and Python's DecodePlan.from_preset take them
(the "deepseek-" prefix may be left out; case does not matter).

  --json             one JSON array on stdout
)"},
    {"list", R"(usage: flash-indexer list [--json] [--cache-dir DIR]

Lists the cached kernels: key, arch, size, registers, spill bytes, compile milliseconds.

  --json             one JSON array on stdout (each entry's meta.json, without the ptxas log)
  --cache-dir DIR    cache directory
)"},
    {"clear", R"(usage: flash-indexer clear [--cache-dir DIR]

Removes every cached kernel (and leftover temporary directories and lock files).
)"},
    {"info", R"(usage: flash-indexer info [--cache-dir DIR]

Prints the NVRTC and driver versions, the GPUs present, the cache directory, its entry count and size.
)"},
    {"check", R"(usage: flash-indexer check [--quick]

Runs the paged MQA logits kernel (with and without the fused histogram), the top-k selector and the
prefill logits kernels (sm90 where it applies, and the portable one; exact-arithmetic inputs, windows
of every kind) on fresh random inputs on GPU 0, compares each result with the CPU reference and prints
one table row per case. Exits 1 if any case fails.

  --quick            a few small cases instead of the full table
)"},
    {"bench", R"(usage: flash-indexer bench logits [--batch LIST] [--lengths LIST] [--next-n LIST] [--heads LIST]
                               [--hist LIST] [--dtype LIST] [--kv LIST] [--replays N] [--cold-l2]
                               [--fixed-length] [--resident-blocks N] [--input LIST]
                               [--compare portable] [--variant V] [--json FILE]
       flash-indexer bench topk   [--rows LIST] [--lengths LIST] [--k LIST] [--dtype LIST] [--hist LIST]
                               [--ragged LIST] [--split LIST] [--input LIST] [--width W] [--replays N]
                               [--json FILE]
       flash-indexer bench decode [--preset NAME] [--batch LIST] [--lengths LIST] [--next-n LIST] [--heads LIST]
                               [--hist LIST] [--dtype LIST] [--kv LIST] [--pdl LIST] [--k K] [--replays N]
                               [--input bytes|normal] [--ragged 0|1] [--dcp D] [--dcp-interleave I]
                               [--two-level C] [--candidate-block 8|16] [--json FILE]
       flash-indexer bench prefill [--tokens LIST] [--lengths LIST] [--heads LIST] [--dtype LIST] [--k K]
                               [--replays N] [--json FILE]

Everything is timed with CUDA events around CUDA-graph replays (the median), next to the read
bandwidth a streaming-read kernel reaches in the same run.

logits: paged_mqa_logits (the kernel the library picks: sm90 on H100/H200 for next_n <= 6), lengths
uniform in [0.7, 1.3] L, KV blocks drawn shuffled from a pool larger than L2. Per cell: microseconds,
bytes moved (KV blocks with scales, logits written, q, weights, block table), GB/s and the fraction of
the read bandwidth, TFLOP/s, and the floor max(bytes / read bandwidth, FLOPs / 1600 TFLOP/s).
  --batch LIST       batch sizes (default 1,8,32,64,128)
  --lengths LIST     context lengths L (default 8192,32768,65536,131072; topk: ...,262144)
  --next-n LIST      default 1,2,3,4 (decode: 1,2,4)
  --heads LIST       default 32,64 (D = 128)
  --hist LIST        0 and/or 1 (default 0,1): the fused histogram / the histogram given to top-k
  --dtype LIST       logits dtypes among f32,f16,bf16 (default f32,f16)
  --kv LIST          key caches among fp8,mxfp4 (default fp8; MXFP4 runs H 32/64, next_n <= 6 on sm90,
                     <= 4 elsewhere; decode: a cell the plan rejects is skipped with its reason, and
                     --dcp runs FP8 only)
  --replays N        timed replays per cell (default 50; decode 30)
  --cold-l2          overwrite 256 MiB before each replay (outside the timed window)
  --fixed-length     every request exactly L (as DeepGEMM's benchmark draws them), not [0.7, 1.3] L
  --resident-blocks N  logits: every block table entry one of N pool blocks (N x 8448 bytes at D 128;
                     2048 of them, 17 MB, stay in L2), so a cell times what the SM computes, not
                     what HBM delivers; not with --cold-l2
  --input LIST       logits: FP8 values among bytes (default: every byte random; most scores lie
                     beyond +-223, in the histogram's two end bins) and normal (q and keys N(0, 1), the
                     keys scaled per token, MXFP4 per 32 values, weights N(0, 1): DeepGEMM's test)
  --compare portable also time the portable kernel and print the speed-up (FP8, or with --variant sm90)
  --variant V        auto (the library's choice, default), portable or sm90 (forced)
  --json FILE        write every row as JSON

topk: the selector on indexer-like rows (ReLU-weighted scores); per cell microseconds and the bytes
(live logits + indices + histogram) per second; the split and selector launched ("sel": str streaming, flt filter,
res resident, wide its 1024-thread form, reg the register selector, regw its 1024-thread form; "a8":
the automatic choice was split 8); and from the row reports how many rows were selected from a sampled
cutoff ("sampled") and how many needed extra narrowing passes ("passes").
  --rows LIST        default 1,4,8,32,64,128,512
  --k LIST           default 512,1024,2048
  --ragged LIST      0: every row L long; 1: lengths uniform in [L/2, L] (default 0,1)
  --split LIST       CTAs per row: 0 (the automatic choice, default), 1, 2, 4, 8
  --input LIST       relu (indexer-like rows, default) and/or randn (standard normal: the peers' rows)
  --width W          logits width (row stride) for every cell, >= L: one graph captured at the maximum
                     context and replayed with live lengths L (default: the width is L)

decode: DecodePlan::run end to end ("us": histogram zeroed, logits + histogram, top-k; no histogram where
the top-k rows stay resident) and in one pass ("one_us": DecodeStep::one_pass where it applies, else 0),
beside the logits kernel alone without the histogram ("x_lgt" = us / logits_us); the KV floor is KV
bytes / read bandwidth; KiB/row, one_KiB: the plan's and the one-pass plan's device memory per query row.
  --preset NAME      a model's indexer (flash-indexer presets: deepseek-v4-flash, glm-5, ...): its heads,
                     next_n, k and key cache, each unless its own option is given
  --pdl LIST         0 and/or 1 (default 0): DecodePlanConfig::pdl, the plan's kernels launched as
                     programmatic dependents (the top-k scheduled while the logits kernel ends)
  --k K              default 2048
  --input V          bytes (default) or normal, as for logits (one of them)
  --ragged 0|1       1: lengths uniform in [L/2, L] instead of [0.7, 1.3] L
  --dcp D            DcpDecodePlan on GPUs 0..D-1 (D >= 2, one thread each, NCCL: libnccl.so.2 or
                     FLASH_INDEXER_NCCL), every request exactly L long: per cell the slowest rank's step,
                     its DecodePlan alone (local_us; gather_us = the all-gather and merge), one DecodePlan
                     over the whole cache on GPU 0 (one_gpu), and the floor of one rank's KV share
  --dcp-interleave I the DCP interleave (default 1; 64 for block-interleaved shards)
  --two-level C      the two-level mode (docs/design/two-level.md): beside the full-context plan ("us",
                     "logits_us"), the second level over C candidate blocks per query row drawn at random
                     from its context: DecodePlan::run_second_level as two kernels, the sparse logits
                     with masked columns NaN and one topk call mapping to positions ("two_us"), and as
                     the sparse decode step where it applies ("step_us", 0 elsewhere); the sparse logits
                     alone ("sparse_us"); the live candidates' key and scale bytes over the streaming
                     bandwidth ("cand_floor"; x_two, x_step: the times over it) and those candidates
                     gathered by a probe that reads nothing else ("cand_read"); and the first level: the
                     logits alone, then top_blocks publishing each row's C best blocks with the newest
                     forced ("first_us", against "logits_us"). V4.1: --two-level 2048 --k 512
  --candidate-block B  positions per candidate block, 8 (default) or 16

prefill: mqa_logits over causal windows (token t of T sees keys [0, N - T + t + 1)) with its TFLOP/s and
the cost of the fused histogram, and PrefillPlan::run end to end (logits in chunks of at most 1 GiB,
then top-k) with the device memory it holds, against the same work as two separate calls (mqa_logits
over the whole [T, N], then topk over the windows), per T x N (D = 128).
  --tokens LIST      T (default 4096,8192)
  --lengths LIST     N (default 16384,65536,131072)
  --heads LIST       default 64
  --dtype LIST       default f16
)"},
    {"recall", R"(usage: flash-indexer recall [--k K] [--heads H] [--rows N] [--lengths L1,L2,...] [--seed S] [--kv mxfp4]

On synthetic indexer inputs (FP8 q and k from N(0, 4), per-head weights of mixed sign, next_n = 1),
computes the logits as FP32, FP16 and BF16 with the fused histogram, selects the exact top-k of each,
and prints the recall of the FP32 set per context length: mean, median, worst row, and the number of
indices per row that differ. With --kv mxfp4: the same keys and queries quantized to MXFP4 (per 32
values the exponent that fits the largest, each value the nearest E2M1), FP32 logits, and the recall of
the FP8 cache's set.

  --k K              top-k size (default 2048)
  --heads H          16, 32 or 64 (default 64)
  --rows N           requests per length (default 16)
  --lengths LIST     context lengths (default 8192,32768,65536,131072)
  --seed S           input seed (default 1)
  --kv mxfp4         compare the MXFP4 cache with the FP8 cache instead (heads 32 or 64)
)"},
};

}  // namespace flash_indexer::cli
