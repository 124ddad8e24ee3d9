#!/usr/bin/env bash
# Run 200 (issue 12; twenty-fifth session): more ring stages for the one-TMA four-consumer FP8 kernels
# (n2 H 64, n3 H 32, n4 H 32). Run 199 (ncu, B 64 x 128K n2 H 64): with the ranges form the producer
# thread waits for free stages about 45 % of its samples and the consumers still wait for data in 13 %
# of all samples, DRAM at 78 % (DeepGEMM 83 %): the ring may hold too few bytes in flight now (run 164
# tried 16 / 20 stages when the producer thread was the bound). S16 / S20: 16 / 20 stages of 9 KB
# (experiment builds; L: 12). Cells L S20 S16 S16 S20 L, the whole FP8 grid L S20 S20 L, then the tests
# of the four-consumer configurations on the better of S16 / S20 if it gains.
RUN=r200; . docs/next-run/run_lib.sh
W="--heads 32,64 --next-n 2,3,4 --batch 8,32,64,128 --lengths 32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0,1"
w() { timeout 40 .device-$1/bin/flash-indexer bench logits $W --json $L/w-$1-$2.json > $L/w-$1-$2.txt 2>&1; stamp "cells $1 $2"; }
w L 1; w S20 1; w S16 1; w S16 2; w S20 2; w L 2
P="--heads 32,64 --next-n 1,2,3,4 --batch 1,8,32,64,128 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0"
g() { ok 150 || return; timeout 40 .device-$1/bin/flash-indexer bench logits $P --json $L/g-$1-$2.json > $L/g-$1-$2.txt 2>&1; stamp "grid $1 $2"; }
g L 1; g S20 1; g S20 2; g L 2
ab() { python3 tools/bench_ab.py --a $L/$1-L-1.json --a $L/$1-L-2.json --b $L/$1-$2-1.json --b $L/$1-$2-2.json --group $3 2>&1 | grep -E "^\s+\(|^all"; }
for s in S16 S20; do echo "$s / L, cells"; ab w $s next_n,heads,histogram | tee $L/ab-$s.txt; done
echo "S20 / L, whole grid"; ab g S20 next_n,heads
med() { sed -n 's/^all .*median \([0-9.]*\).*/\1/p' $L/ab-$1.txt; }
best=$(python3 -c "m={'S16':float('$(med S16)' or 9),'S20':float('$(med S20)' or 9)}; b=min(m,key=m.get); print(b if m[b]<0.99 else '')")
echo "best: ${best:-none}"
if [ -n "$best" ] && ok 90; then
  timeout 150 .device-$best/bin/flash_indexer_tests "gpu paged_mqa_logits.sm90.n2.h64*,gpu paged_mqa_logits.sm90.n3.h32*,gpu paged_mqa_logits.sm90.n4.h32*,gpu: sm90 logits bytes do not depend on the split,gpu: a CUDA graph captured once replays correctly with new lengths and block tables" > $L/tests-$best.txt 2>&1
  echo "tests $best rc=$?: $(tail -2 $L/tests-$best.txt | tr '\n' ' ')"; stamp "tests $best"
fi
cat $L/times.txt
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
