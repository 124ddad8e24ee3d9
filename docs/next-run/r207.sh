#!/usr/bin/env bash
# Run 207 (issue 12; twenty-seventh session): F = main (with store_value) + the histogram's end as one
# bulk reduction (cp.reduce.async.bulk ... add.u32 by one thread, kernels/shared_histogram_sm90.cuh) and
# its zeroing in 16-byte stores, against M4 (main 819b7b1, before store_value): the small-B cells at 50
# replays M4 F F M4, the whole FP8 grid with and without the histogram (ab_logits), prefill with the
# histogram, then F's logits-sm90 and prefill tests (the new 8-byte-offset histogram cases among them).
RUN=r207; . docs/next-run/run_lib.sh
for d in M4 F; do timeout 60 .device-$d/bin/flash-indexer warm --arch sm_90a --jobs 16 --manifest docs/next-run/bench-logits-manifest.json > $L/warm-$d.txt 2>&1; stamp "warm $d"; done
P="--heads 32,64 --next-n 1,2,3,4 --batch 1,8 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 50 --hist 0,1"
echo "== small B, F / M4"; ab_logits M4 F b 40 $P
G="--heads 32,64 --next-n 1,2,3,4 --batch 1,8,32,64,128 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0,1"
echo "== grid, F / M4"; ab_logits M4 F g 60 $G
for d in M4 F; do timeout 60 .device-$d/bin/flash-indexer bench prefill --tokens 4096 --lengths 65536 --heads 64 --dtype f16 --replays 10 --json $L/p-$d.json > $L/p-$d.txt 2>&1; done; stamp prefill
for d in M4 F; do echo "== prefill $d"; tail -4 $L/p-$d.txt; done
mkdir -p $L/v; OUT=$L/v timeout 300 tools/device_verify.sh .device-F logits-sm90 prefill > $L/verify.txt 2>&1; stamp verify
cat $L/times.txt $L/verify.txt
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
