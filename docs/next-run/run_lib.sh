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
# `bench logits ARGS...` with builds A and B in the order A B B A (the GPU's clock drifts as it warms),
# each run's JSON as $L/TAG-NAME-N.json, each at most LIMIT seconds; then B / A per cell.
ab_logits() {
  local a=$1 b=$2 tag=$3 limit=$4 run name n
  shift 4
  for run in "$a 1" "$b 1" "$b 2" "$a 2"; do
    name=${run% *} n=${run#* }
    timeout "$limit" ".device-$name/bin/flash-indexer" bench logits "$@" --json "$L/$tag-$name-$n.json" > "$L/$tag-$name-$n.txt" 2>&1
    stamp "$tag $name $n"
  done
  python3 tools/bench_ab.py --a "$L/$tag-$a-1.json" --a "$L/$tag-$a-2.json" --b "$L/$tag-$b-1.json" --b "$L/$tag-$b-2.json" \
    --group next_n,heads,histogram --show 0.03 2>&1 | tail -40
}
