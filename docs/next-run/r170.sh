#!/usr/bin/env bash
# Run 170 (prepared in the nineteenth session, not run). Main M against:
#   FR  docs/next-run/fma-relu.patch: half of the consumers' ReLUs on the FMA pipe, exactly, with its tests;
#   W   docs/next-run/sm90-wait-suspend.patch: mbarrier waits sleep with CUTLASS's suspend hint;
#   PE  docs/next-run/paged-producers-early-release.patch: one producer warp per consumer and the stage
#       released right after the wgmma (DeepGEMM's pairing; each half alone was neutral, runs 163, 165).
# The SM clock and power are logged beside every window (tools/clock_windows.py); FR's tests run; then
# DeepGEMM's kernel under ncu at the real clock. Build each patch here and install it as .device-FR,
# .device-W, .device-PE; copy dg_one.py and mma_probe.py into .device-run; carry .device-M .device-FR
# .device-W .device-PE .device-run .anchors/deepgemm.
RUN=r170; . docs/next-run/run_lib.sh
warm_builds M FR W PE
nvidia-smi --query-gpu=timestamp,clocks.current.sm,power.draw,clocks_event_reasons.active --format=csv -lms 100 > $L/smi.csv 2>&1 &
smi=$!
P="--batch 1,8,32,64,128 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0,1"
b() { ok 200 || return
  echo "begin $1 $2 $(date +%H:%M:%S.%N)" >> $L/marks.txt
  timeout 25 .device-$1/bin/flash-indexer bench logits --heads 64 --next-n 1,2 $P --json $L/l-$1-$2-a.json > $L/l-$1-$2-a.txt 2>&1
  timeout 25 .device-$1/bin/flash-indexer bench logits --heads 32 --next-n 2,3,4 $P --json $L/l-$1-$2-b.json > $L/l-$1-$2-b.txt 2>&1
  echo "end $1 $2 $(date +%H:%M:%S.%N)" >> $L/marks.txt; stamp "logits $1 $2"; }
b M 1; b FR 1; b W 1; b PE 1; b PE 2; b W 2; b FR 2; b M 2
pf() { ok 230 || return; echo "begin P-$1 $2 $(date +%H:%M:%S.%N)" >> $L/marks.txt
  timeout 45 .device-$1/bin/flash-indexer bench prefill --tokens 4096,8192 --lengths 16384,65536,131072 --heads 64 \
    --dtype f16 --replays 20 --json $L/p-$1-$2.json > $L/p-$1-$2.txt 2>&1
  echo "end P-$1 $2 $(date +%H:%M:%S.%N)" >> $L/marks.txt; stamp "prefill $1 $2"; }
timeout 60 python3 .device-run/mma_probe.py > $L/probe-1.txt 2>&1
pf M 1; pf FR 1; pf FR 2; pf M 2
timeout 60 python3 .device-run/mma_probe.py > $L/probe-2.txt 2>&1
kill $smi
python3 tools/clock_windows.py $L/smi.csv $L/marks.txt > $L/clocks.txt 2>&1; cat $L/clocks.txt
(cd $OUT && tar czf r170a.tgz r170)
if ok 200; then mkdir -p $L/vFR; OUT=$L/vFR timeout 200 tools/device_verify.sh .device-FR logits-sm90 prefill > $L/verify-FR.txt 2>&1; stamp "verify FR"; cat $L/verify-FR.txt; fi
if ok 420; then
  mkdir -p $L/dg; OUT=$L/dg DG_BENCH_BUDGET_S=40 DG_BENCH_ARGS="--quick" timeout 100 bash .anchors/deepgemm/run.sh > $L/dg.txt 2>&1; stamp dg-build
  timeout 90 ncu --set full --clock-control none --warp-sampling-interval 0 -k regex:sm90_fp8_paged_mqa_logits --launch-skip 1 --launch-count 1 \
    -o $L/dg1 python3 .device-run/dg_one.py --batch 64 --length 131072 --next-n 2 --heads 64 > $L/ncu-dg.log 2>&1; stamp ncu-dg
  ncu -i $L/dg1.ncu-rep --page raw --csv > $L/raw-dg1.csv 2>&1
  ncu -i $L/dg1.ncu-rep --page details --print-details all > $L/details-dg1.txt 2>&1
  rm -f $L/dg1.ncu-rep; stamp export
fi
cd $OUT && tar czf r170.tgz r170 && rm -rf r170
