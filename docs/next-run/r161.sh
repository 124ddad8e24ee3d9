#!/usr/bin/env bash
# Prefill: main (M) against the two-tiles form (T, docs/next-run/prefill-two-tiles.patch) and the scales
# by TMA (S, prefill-scales-tma.patch); T's and S's prefill tests. Carry .device-M .device-T .device-S .device-run.
set -u
L=$OUT/r161; mkdir -p $L
export FLASH_INDEXER_CACHE_DIR=$PWD/.cache-dev
t0=$(date +%s)
stamp() { echo "$1 $(( $(date +%s) - t0 )) s" >> $L/times.txt; }
for d in M T S; do timeout 90 .device-$d/bin/flash-indexer warm --arch sm_90a --jobs 16 > $L/warm-$d.txt 2>&1; done
stamp warm
python3 .device-run/mma_probe.py > $L/probe.txt 2>&1
G="--tokens 4096,8192 --lengths 16384,65536,131072 --heads 64 --dtype f16 --replays 20"
pf() { local d=$1 n=$2; shift 2; timeout 60 .device-$d/bin/flash-indexer bench prefill "$@" --json $L/$d-$n.json > $L/$d-$n.txt 2>&1; stamp "bench $d $n"; }
pf M 1 $G; pf T 1 $G; pf S 1 $G; pf S 2 $G; pf T 2 $G; pf M 2 $G
H="--tokens 4096 --lengths 65536 --heads 16,32 --dtype f16 --replays 20"
pf M h $H; pf T h $H; pf S h $H
for d in T S; do mkdir -p $L/v$d; OUT=$L/v$d timeout 120 tools/device_verify.sh .device-$d prefill > $L/verify-$d.txt 2>&1; stamp "verify $d"; done
cd $OUT && tar czf r161.tgz r161 && rm -rf r161
