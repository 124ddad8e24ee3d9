# Sourced by the device scripts here (r170.sh on): RUN names the call; its logs go to $OUT/$RUN
# ($L), the kernel cache to .cache-dev, and `ok N` is true while fewer than N seconds have passed.
set -u
L=$OUT/$RUN; mkdir -p "$L"
export FLASH_INDEXER_CACHE_DIR=$PWD/.cache-dev
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
stamp() { echo "$1 $(el) s" >> "$L/times.txt"; }
ok() { [ "$(el)" -lt "$1" ]; }
# Warm the kernel cache with each named build (.device-NAME) in turn, 90 s each at most.
warm_builds() {
  for d in "$@"; do timeout 90 ".device-$d/bin/flash-indexer" warm --arch sm_90a --jobs 16 > "$L/warm-$d.txt" 2>&1; stamp "warm $d"; done
}
