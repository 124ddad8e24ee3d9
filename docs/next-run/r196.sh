#!/usr/bin/env bash
# Run 196 (issue 12; prepared in the twenty-fourth session, not run): why the ranges form (R4-R7, runs
# 192-195) is 7-9 % slower than main at n2 H 64 and n3 H 32. ncu (run 195): its consumers wait 3.5x as
# often for the same blocks, and its producer thread spends 90 % of its samples issuing (not waiting for
# a free stage), in about 75 instructions per block against main's 61: the producer is the bound there.
# - R8 (paged-ranges-r8.patch): the producer thread alone in its warp, the ids staged by warp 2 through
#   two 64-id buffers (R4-R7 kept lanes 1-31 of its warp waiting at __syncwarp);
# - R9 (paged-ranges-r9.patch): R8 with a lean issue loop, about 41 instructions per block: one 3-D TMA
#   per block for the keys and the 256 bytes of scales behind them (the 66 / 68-row box of run 167's K,
#   in main's kernel too), the stage and round as counters, the ids checked against the pool by warp 2.
# Both take full waves of one CTA per SM, or with FI_RANGES_ONE_WAVE=1 one CTA per SM for the whole call.
# Builds: .device-M3 (main), .device-R8, .device-R9 (each: the patch applied to a copy of main, built,
# `cmake --install build --prefix <repo>/.device-RN`).
RUN=r196; . docs/next-run/run_lib.sh
warm_builds M3 R8 R9
W="--heads 32,64 --next-n 2,3 --batch 32,64,128 --lengths 65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0,1"
w() { ok 200 || return; timeout 30 .device-$1/bin/flash-indexer bench logits $W --json $L/w-$1-$2.json > $L/w-$1-$2.txt 2>&1; stamp "waves $1 $2"; }
w M3 1; w R8 1; w R9 1; w R9 2; w R8 2; w M3 2
FI_RANGES_ONE_WAVE=1 w R9 o; FI_RANGES_ONE_WAVE=1 w R8 o
# R9 changes main's kernel too (one TMA per block): the whole FP8 grid, M3 R9 R9 M3
P="--heads 32,64 --next-n 1,2,3,4 --batch 1,8,32,64,128 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0"
g() { ok 240 || return; timeout 30 .device-$1/bin/flash-indexer bench logits $P --json $L/g-$1-$2.json > $L/g-$1-$2.txt 2>&1; stamp "grid $1 $2"; }
g M3 1; g R9 1; g R9 2; g M3 2
if ok 300; then mkdir -p $L/vR9; OUT=$L/vR9 timeout 250 tools/device_verify.sh .device-R9 logits-sm90 logits-other > $L/verify-R9.txt 2>&1; stamp "verify R9"; fi
# DeepGEMM's grid in the same call, for the README's table if R9 is kept
if ok 430; then OUT=$L/dg DG_BENCH_BUDGET_S=100 timeout 150 bash .anchors/deepgemm/run.sh > $L/dg.txt 2>&1; stamp "deepgemm"; fi
cat $L/times.txt; cat $L/verify-R9.txt 2>/dev/null
ab() { python3 tools/bench_ab.py --a $L/$1-M3-1.json --a $L/$1-M3-2.json --b $L/$1-$2-1.json --b $L/$1-$2-2.json --group $3 2>&1 | grep -E "^\s+\(|^all"; }
echo "R8 / M3"; ab w R8 next_n,heads,histogram
echo "R9 / M3"; ab w R9 next_n,heads,histogram
for b in R8 R9; do echo "$b one wave / M3"; python3 tools/bench_ab.py --a $L/w-M3-1.json --a $L/w-M3-2.json --b $L/w-$b-o.json --group next_n,heads,histogram 2>&1 | grep -E "^\s+\(|^all"; done
echo "R9 / M3, whole grid"; ab g R9 next_n,heads
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
