#!/usr/bin/env bash
# Run 170 (prepared in the nineteenth session, not run): main M against W (docs/next-run/sm90-wait-suspend.patch:
# the mbarrier waits sleep with CUTLASS's suspend hint instead of polling) and PE
# (docs/next-run/paged-producers-early-release.patch: one producer warp per consumer AND the stage released right
# after the wgmma, the pair DeepGEMM uses; each half alone was neutral in runs 163 and 165), with the SM clock and
# power logged; then DeepGEMM's kernel under ncu at the real clock. Build each patch here, install as
# .device-W / .device-PE; carry .device-M .device-W .device-PE .device-run .anchors/deepgemm (dg_one.py in
# .device-run).
set -u
L=$OUT/r170; mkdir -p $L
export FLASH_INDEXER_CACHE_DIR=$PWD/.cache-dev
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
stamp() { echo "$1 $(el) s" >> $L/times.txt; }
ok() { [ $(el) -lt $1 ]; }
for d in M W PE; do timeout 90 .device-$d/bin/flash-indexer warm --arch sm_90a --jobs 16 > $L/warm-$d.txt 2>&1; stamp "warm $d"; done
nvidia-smi --query-gpu=timestamp,clocks.current.sm,power.draw,clocks_event_reasons.active --format=csv -lms 100 > $L/smi.csv 2>&1 &
smi=$!
P="--batch 1,8,32,64,128 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0,1"
b() { ok 200 || return
  echo "begin $1 $2 $(date +%H:%M:%S.%N)" >> $L/marks.txt
  timeout 25 .device-$1/bin/flash-indexer bench logits --heads 64 --next-n 1,2 $P --json $L/l-$1-$2-a.json > $L/l-$1-$2-a.txt 2>&1
  timeout 25 .device-$1/bin/flash-indexer bench logits --heads 32 --next-n 2,3,4 $P --json $L/l-$1-$2-b.json > $L/l-$1-$2-b.txt 2>&1
  echo "end $1 $2 $(date +%H:%M:%S.%N)" >> $L/marks.txt; stamp "logits $1 $2"; }
b M 1; b W 1; b PE 1; b PE 2; b W 2; b M 2
kill $smi
python3 tools/clock_windows.py $L/smi.csv $L/marks.txt > $L/clocks.txt 2>&1; cat $L/clocks.txt
(cd $OUT && tar czf r170a.tgz r170)
if ok 260; then
  mkdir -p $L/dg; OUT=$L/dg DG_BENCH_BUDGET_S=40 DG_BENCH_ARGS="--quick" timeout 100 bash .anchors/deepgemm/run.sh > $L/dg.txt 2>&1; stamp dg-build
  timeout 90 ncu --set full --clock-control none --warp-sampling-interval 0 -k regex:sm90_fp8_paged_mqa_logits --launch-skip 1 --launch-count 1 \
    -o $L/dg1 python3 .device-run/dg_one.py --batch 64 --length 131072 --next-n 2 --heads 64 > $L/ncu-dg.log 2>&1; stamp ncu-dg
  ncu -i $L/dg1.ncu-rep --page raw --csv > $L/raw-dg1.csv 2>&1
  ncu -i $L/dg1.ncu-rep --page details --print-details all > $L/details-dg1.txt 2>&1
  rm -f $L/dg1.ncu-rep; stamp export
fi
cd $OUT && tar czf r170.tgz r170 && rm -rf r170
