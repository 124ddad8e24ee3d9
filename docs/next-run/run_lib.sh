# Sourced by the device scripts here (r178.sh on): RUN names the call; its logs go to $OUT/$RUN
# ($L), the kernel cache to .cache-dev, and `ok N` is true while fewer than N seconds have passed.
set -u
L=$OUT/$RUN; mkdir -p "$L"
export FLASH_INDEXER_CACHE_DIR=$PWD/.cache-dev
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
stamp() { echo "$1 $(el) s" >> "$L/times.txt"; }
ok() { [ "$(el)" -lt "$1" ]; }
