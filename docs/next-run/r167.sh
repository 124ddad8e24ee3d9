#!/usr/bin/env bash
# Run 167: ncu at the real clock (--clock-control none) of main's and P's next_n 2 H 64 kernels, B 64 x 128K.
set -u
L=$OUT/r167; mkdir -p $L
export FLASH_INDEXER_CACHE_DIR=$PWD/.cache-dev
echo '{"kernels":["paged_mqa_logits.sm90.n2.h64.d128.bs64.hist0.out-f32.kv-fp8"]}' > /tmp/m.json
for d in M P; do
  timeout 60 .device-$d/bin/flash-indexer warm --arch sm_90a --manifest /tmp/m.json --jobs 4 > $L/warm-$d.txt 2>&1
  timeout 60 ncu --set full --clock-control none --warp-sampling-interval 0 -k regex:fi_paged_mqa_logits_sm90_n2_h64 --launch-skip 2 --launch-count 1 \
    -o $L/$d .device-$d/bin/flash-indexer bench logits --heads 64 --next-n 2 --batch 64 --lengths 131072 --dtype f32 --hist 0 --fixed-length --replays 3 > $L/ncu-$d.log 2>&1
  ncu -i $L/$d.ncu-rep --page source --csv --print-source sass > $L/source-$d.csv 2>&1
  ncu -i $L/$d.ncu-rep --page raw --csv > $L/raw-$d.csv 2>&1
  rm -f $L/$d.ncu-rep
done
cd $OUT && tar czf r167.tgz r167 && rm -rf r167
