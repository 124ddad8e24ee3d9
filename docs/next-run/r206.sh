#!/usr/bin/env bash
# Run 206 (issue 12; prepared in the twenty-sixth session, run in the twenty-seventh): where the
# histogram's 0.7-1.3 µs per call at B 1-8 goes, and the store_value helper. Builds, each installed as
# .device-NAME: M4 (main 819b7b1), NF (+ hist-no-flush.patch: no final flush of the CTA's histogram), NC
# (+ hist-no-count.patch: nothing counted, the zeroing and the flush kept) and S (+
# store-value-helper.patch). NF and NC are for measurement only: their histograms are wrong. NF / M4 and
# NC / M4 with the histogram say what the flush and the per-value count cost at small B (without it both
# 1.0). S / M4 over the whole FP8 grid (S S M4 M4 order via ab_logits), then S's logits-sm90 tests.
RUN=r206; . docs/next-run/run_lib.sh
for d in M4 NF NC S; do timeout 60 .device-$d/bin/flash-indexer warm --arch sm_90a --jobs 16 --manifest docs/next-run/bench-logits-manifest.json > $L/warm-$d.txt 2>&1; stamp "warm $d"; done
P="--heads 32,64 --next-n 1,2,3,4 --batch 1,8 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 50 --hist 0,1"
g() { timeout 40 .device-$1/bin/flash-indexer bench logits $P --json $L/g-$1-$2.json > $L/g-$1-$2.txt 2>&1; stamp "grid $1 $2"; }
g M4 1; g NF 1; g NC 1; g NC 2; g NF 2; g M4 2
for d in NF NC; do echo "== $d / M4"; python3 tools/bench_ab.py --a $L/g-M4-1.json --a $L/g-M4-2.json --b $L/g-$d-1.json --b $L/g-$d-2.json --group next_n,heads,histogram 2>&1 | grep -E "^\s+\(|^all"; done
G="--heads 32,64 --next-n 1,2,3,4 --batch 1,8,32,64,128 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0,1"
echo "== S / M4"; ab_logits M4 S s 60 $G
mkdir -p $L/v; OUT=$L/v timeout 300 tools/device_verify.sh .device-S logits-sm90 > $L/verify.txt 2>&1; stamp verify
cat $L/times.txt $L/verify.txt
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
