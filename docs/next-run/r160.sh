#!/usr/bin/env bash
# Run 160: paged sm90 kernels with four consumers storing directly (D) against main (M); D's sm90 logits tests.
set -u
L=$OUT/r160; mkdir -p $L
export FLASH_INDEXER_CACHE_DIR=$PWD/.cache-dev
t0=$(date +%s)
stamp() { echo "$1 $(( $(date +%s) - t0 )) s" >> $L/times.txt; }
for d in M D; do timeout 60 .device-$d/bin/flash-indexer warm --arch sm_90a --jobs 16 > $L/warm-$d.txt 2>&1; done
stamp warm
G="--batch 1,8,32,64,128 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20"
b() { # build pass hist
  timeout 25 .device-$1/bin/flash-indexer bench logits --heads 64 --next-n 2 $G --hist $3 --json $L/$1-$2-a-h$3.json > $L/$1-$2-a-h$3.txt 2>&1
  timeout 25 .device-$1/bin/flash-indexer bench logits --heads 32 --next-n 3,4 $G --hist $3 --json $L/$1-$2-b-h$3.json > $L/$1-$2-b-h$3.txt 2>&1
  stamp "bench $1 $2 $3"
}
b M 1 0; b D 1 0; b D 2 0; b M 2 0
mkdir -p $L/v; OUT=$L/v timeout 100 tools/device_verify.sh .device-D logits-sm90 > $L/verify-D.txt 2>&1
stamp verify
cd $OUT && tar czf r160.tgz r160 && rm -rf r160
