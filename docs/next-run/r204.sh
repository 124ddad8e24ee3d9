#!/usr/bin/env bash
# Run 204 (issue 12; twenty-sixth session): the paged kernels' shared-memory histogram in 1, 2 or 4 copies
# (kSm90HistogramCopies; builds .device-C1, -C2, -C4 of main add4aba + the copies + `bench logits
# --input`), on the benchmark's random bytes (83 % of the scores in the two end bins) and on DeepGEMM's
# N(0, 1) inputs: the FP8 grid with and without the histogram C1 C2 C4 C4 C2 C1, MXFP4 C1 C4, then C4's tests.
RUN=r204; . docs/next-run/run_lib.sh
for d in C1 C2 C4; do timeout 60 .device-$d/bin/flash-indexer warm --arch sm_90a --jobs 16 --manifest docs/next-run/bench-logits-manifest.json > $L/warm-$d.txt 2>&1; stamp "warm $d"; done
P="--heads 32,64 --next-n 1,2,3,4 --batch 1,8,32,64,128 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0,1 --input bytes,normal"
g() { timeout 60 .device-$1/bin/flash-indexer bench logits $P --json $L/g-$1-$2.json > $L/g-$1-$2.txt 2>&1; stamp "grid $1 $2"; }
g C1 1; g C2 1; g C4 1; g C4 2; g C2 2; g C1 2
for d in C2 C4; do echo "== $d / C1"; python3 tools/bench_ab.py --a $L/g-C1-1.json --a $L/g-C1-2.json --b $L/g-$d-1.json --b $L/g-$d-2.json --group input,next_n,heads,histogram --show 0.05 2>&1 | tail -45; done
X="--heads 32,64 --next-n 1,2,4 --batch 8,64 --lengths 32768,131072 --dtype f32 --kv mxfp4 --cold-l2 --fixed-length --replays 20 --hist 0,1"
for d in C1 C4; do timeout 40 .device-$d/bin/flash-indexer bench logits $X --json $L/x-$d.json > $L/x-$d.txt 2>&1; done; stamp mxfp4
python3 tools/bench_ab.py --a $L/x-C1.json --b $L/x-C4.json --group next_n,heads,histogram 2>&1 | grep -E "^\s+\(|^all"
mkdir -p $L/v; OUT=$L/v timeout 300 tools/device_verify.sh .device-C4 logits-sm90 logits-other > $L/verify.txt 2>&1; stamp verify
cat $L/times.txt $L/verify.txt
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
