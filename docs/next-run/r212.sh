#!/usr/bin/env bash
# Run 212 (issue 12; twenty-seventh session): U = main + n3 H 64 (N = 192) in two wgmma parts too, the
# first query row then the other two (Tile::scores_and_head_sums now takes the later chunks as one
# wgmma; n4 H 64's SASS is unchanged), against main (.device-M6): n3 H 64 over the grid with and without
# the histogram M6 U U M6, then U's n3 H 64 tests.
RUN=r212; . docs/next-run/run_lib.sh
for d in M6 U; do timeout 60 .device-$d/bin/flash-indexer warm --arch sm_90a --jobs 16 --manifest docs/next-run/bench-logits-manifest.json > $L/warm-$d.txt 2>&1; stamp "warm $d"; done
G="--heads 64 --next-n 3 --batch 1,8,32,64,128 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0,1"
echo "== U / M6"; ab_logits M6 U g 40 $G
export FLASH_INDEXER_CACHE_DIR=$PWD/.cache-dev
timeout 60 .device-U/bin/flash_indexer_tests "gpu paged_mqa_logits.sm90.n3.h64*" > $L/t-n3h64.txt 2>&1; echo "n3.h64 tests rc=$? $(tail -2 $L/t-n3h64.txt | head -1)"; stamp tests
cat $L/times.txt
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
