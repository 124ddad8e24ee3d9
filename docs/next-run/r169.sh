#!/usr/bin/env bash
# Run 169: R3 (chunk ids loaded unrolled; the ranges form only in the ranges grid, the split grid keeps main's kernel) (the four-consumer FP8 kernels take ranges of blocks across requests; one CTA per SM splits
# B x width evenly where the splits need more than a wave; weights in shared memory) against main M.
set -u
L=$OUT/r169; mkdir -p $L
export FLASH_INDEXER_CACHE_DIR=$PWD/.cache-dev
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
stamp() { echo "$1 $(el) s" >> $L/times.txt; }
ok() { [ $(el) -lt $1 ]; }
for d in M R; do timeout 90 .device-$d/bin/flash-indexer warm --arch sm_90a --jobs 16 > $L/warm-$d.txt 2>&1; stamp "warm $d"; done
P="--batch 1,8,32,64,128 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0,1"
b() { ok 200 || return
  timeout 25 .device-$1/bin/flash-indexer bench logits --heads 64 --next-n 2 $P --json $L/l-$1-$2-a.json > $L/l-$1-$2-a.txt 2>&1
  timeout 25 .device-$1/bin/flash-indexer bench logits --heads 32 --next-n 3,4 $P --json $L/l-$1-$2-b.json > $L/l-$1-$2-b.txt 2>&1
  stamp "logits $1 $2"; }
b M 1; b R 1; b R 2; b M 2

python3 tools/bench_ab.py --a $L/l-M-1-a.json --a $L/l-M-2-a.json --a $L/l-M-1-b.json --a $L/l-M-2-b.json --b $L/l-R-1-a.json --b $L/l-R-2-a.json --b $L/l-R-1-b.json --b $L/l-R-2-b.json --group next_n,heads,hist --show 0.5 > $L/ab.txt 2>&1
cat $L/ab.txt
(cd $OUT && tar czf r169a.tgz r169)
med=$(grep -o "median [0-9.]*" $L/ab.txt | tail -1 | cut -d' ' -f2)
if python3 -c "import sys; sys.exit(0 if float('${med:-9}') < 0.99 else 1)"; then
  if ok 90; then mkdir -p $L/vR; OUT=$L/vR timeout 200 tools/device_verify.sh .device-R logits-sm90 > $L/verify-R.txt 2>&1; stamp "verify R"; cat $L/verify-R.txt; fi
elif false; then
  mkdir -p $L/dg; OUT=$L/dg DG_BENCH_BUDGET_S=40 DG_BENCH_ARGS="--quick" timeout 100 bash .anchors/deepgemm/run.sh > $L/dg.txt 2>&1; stamp dg-build
  timeout 90 ncu --set full --clock-control none --warp-sampling-interval 0 -k regex:sm90_fp8_paged_mqa_logits --launch-skip 1 --launch-count 1 \
    -o $L/dg1 python3 .device-run/dg_one.py --batch 64 --length 131072 --next-n 2 --heads 64 > $L/ncu-dg.log 2>&1; stamp ncu-dg
  ncu -i $L/dg1.ncu-rep --page raw --csv > $L/raw-dg1.csv 2>&1
  ncu -i $L/dg1.ncu-rep --page details --print-details all > $L/details-dg1.txt 2>&1
  ncu -i $L/dg1.ncu-rep --page source --csv --print-source sass > $L/source-dg1.csv 2>&1
  rm -f $L/dg1.ncu-rep; stamp export
fi
cd $OUT && tar czf r169.tgz r169 && rm -rf r169
