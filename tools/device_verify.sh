#!/usr/bin/env bash
# The GPU test families of an installed build, each in a process of its own with its own time limit,
# for a device run (../shared/device/README.md): one summary line per family on stdout, every family's
# full log in one archive, $OUT/verify-logs.tgz (the device tool returns only a few files).
#
#   OUT=$OUT tools/device_verify.sh PREFIX [FAMILY ...]
#
# PREFIX: a `cmake --install` prefix whose cache (PREFIX/cache, warmed for sm_90a) is used unless
# FLASH_INDEXER_CACHE_DIR is set. FAMILY: names below (default: all, in this order). The limits are about
# twice what each family took on the H200 (device runs 126-129), so a limit that is hit means a hang or
# a regression, not a slow reference.
set -u
prefix=${1:?usage: OUT=DIR tools/device_verify.sh PREFIX [FAMILY ...]}
shift
out=${OUT:?set OUT to the folder that comes back}
export FLASH_INDEXER_CACHE_DIR=${FLASH_INDEXER_CACHE_DIR:-$prefix/cache}
tests=$prefix/bin/flash_indexer_tests

# name, limit in seconds, Catch2 test spec (together every [gpu] test case, the two-GPU ones skipping on
# one GPU)
families=(
  "plan 300 [gpu][plan]~[pdl]"
  "pdl 240 [gpu][pdl]"
  "logits-sm90 300 gpu paged_mqa_logits.sm90*"
  "logits-portable 600 gpu paged_mqa_logits.portable*"
  'logits-other 300 [gpu][logits]~"gpu paged_mqa_logits.sm90*"~"gpu paged_mqa_logits.portable*"'
  "prefill 400 [gpu][prefill]"
  "topk 400 [gpu][topk]"
  "validation 240 [gpu][validation]"
)

logs=$(mktemp -d)/verify-logs
mkdir -p "$logs"
start=$(date +%s)
for entry in "${families[@]}"; do
  read -r name limit spec <<<"$entry"
  if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qx "$name"; then continue; fi
  t0=$(date +%s)
  timeout -k 10 "$limit" "$tests" "$spec" >"$logs/$name.log" 2>&1
  rc=$?
  result=$(grep -E "All tests passed|test cases:|No tests ran" "$logs/$name.log" | tail -1)
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && result="cut at the ${limit} s limit; $result"
  printf '%-16s rc=%-3s %4d s  %s\n' "$name" "$rc" "$(($(date +%s) - t0))" "$result" | tee -a "$logs/summary.txt"
done
echo "total $(($(date +%s) - start)) s" | tee -a "$logs/summary.txt"
tar czf "$out/verify-logs.tgz" -C "$(dirname "$logs")" verify-logs
