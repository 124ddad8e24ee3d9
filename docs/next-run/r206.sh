#!/usr/bin/env bash
# Run 206 (issue 12; prepared in the twenty-sixth session, not run): where the histogram's 0.7-1.3 µs per
# call at B 1-8 goes. Three builds, each installed as .device-NAME: M (main), NF (+ hist-no-flush.patch:
# no final flush of the CTA's histogram) and NC (+ hist-no-count.patch: nothing counted, the zeroing and
# the flush kept). Both patches are for measurement only: their histograms are wrong. NF / M and NC / M
# with the histogram say what the flush and the per-value count cost at small B (without it both 1.0).
# Build each in a copy of main (`git archive HEAD | tar -x -C /tmp/nf`, `git apply` there, configure,
# build, `cmake --install build --prefix <repo>/.device-NF`); carry .device-M, .device-NF, .device-NC.
RUN=r206; . docs/next-run/run_lib.sh
for d in M NF NC; do timeout 60 .device-$d/bin/flash-indexer warm --arch sm_90a --jobs 16 --manifest docs/next-run/bench-logits-manifest.json > $L/warm-$d.txt 2>&1; stamp "warm $d"; done
P="--heads 32,64 --next-n 1,2,3,4 --batch 1,8 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 50 --hist 0,1"
g() { timeout 40 .device-$1/bin/flash-indexer bench logits $P --json $L/g-$1-$2.json > $L/g-$1-$2.txt 2>&1; stamp "grid $1 $2"; }
g M 1; g NF 1; g NC 1; g NC 2; g NF 2; g M 2
for d in NF NC; do echo "== $d / M"; python3 tools/bench_ab.py --a $L/g-M-1.json --a $L/g-M-2.json --b $L/g-$d-1.json --b $L/g-$d-2.json --group next_n,heads,histogram 2>&1 | grep -E "^\s+\(|^all"; done
cat $L/times.txt
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
