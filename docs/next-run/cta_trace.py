#!/usr/bin/env python3
"""Reads the raw CTA stamps that a build with paged-cta-trace.patch writes under
FLASH_INDEXER_PAGED_TRACE_DIR (trace-b*-l*-n*-h*-s*.bin: 2048 CTAs x 36 u64, %globaltimer ns; slot 0 the
producer's first issue, 1..32 every 64th block issued, 33 thread 0's start, 34 the SM, 35 the last
consumer's end) and prints, per file, where a CTA's time goes (device runs 178-179):

    python3 docs/next-run/cta_trace.py r179/T/trace-*.bin
"""
import collections
import sys

import numpy as np

SLOTS, FIRST, LAST_BLOCK_SLOT, ENTRY, SM, END = 36, 0, 32, 33, 34, 35


def report(path):
    t = np.fromfile(path, dtype=np.uint64).reshape(-1, SLOTS).astype(np.int64)
    v = t[(t[:, FIRST] > 0) & (t[:, END] > 0) & (t[:, ENTRY] > 0)]
    if len(v) == 0:
        print(f"{path}: no complete CTA")
        return
    t0 = v[:, ENTRY].min()
    us = lambda x: (x - t0) / 1e3
    entry, start, end = us(v[:, ENTRY]), us(v[:, FIRST]), us(v[:, END])
    last_issue = us(np.array([r[1:LAST_BLOCK_SLOT + 1][r[1:LAST_BLOCK_SLOT + 1] > 0].max(initial=r[FIRST]) for r in v]))
    per_sm = collections.defaultdict(list)
    for e, x, sm in zip(entry, end, v[:, SM]):
        per_sm[sm].append((e, x))
    gaps, busy, counts = [], [], []
    for spans in per_sm.values():
        spans.sort()
        counts.append(len(spans))
        busy.append(sum(x - e for e, x in spans))
        gaps += [b[0] - a[1] for a, b in zip(spans, spans[1:])]
    steps = [np.median(np.diff(r[:LAST_BLOCK_SLOT + 1][r[:LAST_BLOCK_SLOT + 1] > 0])) / 1e3 for r in v
             if (r[1:LAST_BLOCK_SLOT + 1] > 0).sum() >= 2]
    med = lambda x: float(np.median(x)) if len(x) else float("nan")
    print(f"{path}: {len(v)} CTAs on {len(per_sm)} SMs (CTAs per SM: {dict(collections.Counter(counts))}), span {end.max():.1f} us")
    print(f"  per CTA (medians, us): setup {med(start - entry):.2f}, issuing {med(last_issue - start):.2f} "
          f"({med(steps):.2f} per 64 blocks), drain {med(end - last_issue):.2f}, to the next CTA on its SM {med(gaps):.2f}")
    print(f"  SMs busy {np.mean(busy) / end.max():.1%} of the span; CTA duration min {np.min(end - entry):.1f} "
          f"median {med(end - entry):.1f} max {np.max(end - entry):.1f}")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        report(p)
