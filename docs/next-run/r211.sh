#!/usr/bin/env bash
# Run 211 (issue 12; twenty-seventh session): main f5d90ce as landed (.device-M6): the GPU test families
# of the kernels this session touched (logits-sm90, prefill, plan).
RUN=r211; . docs/next-run/run_lib.sh
timeout 90 .device-M6/bin/flash-indexer warm --arch sm_90a --jobs 16 > $L/warm.txt 2>&1; stamp warm
mkdir -p $L/v; OUT=$L/v timeout 420 tools/device_verify.sh .device-M6 logits-sm90 prefill plan > $L/verify.txt 2>&1; stamp verify
cat $L/times.txt $L/verify.txt
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
