#!/usr/bin/env python3
"""Two builds' `flash-indexer bench ... --json` files of one device run, cell by cell: B / A.

    python3 tools/bench_ab.py --a a1.json --a a2.json --b b1.json --b b2.json [--group next_n,heads] [--show 0.01]

Give each build's runs interleaved in the device call (A, B, A, B: the GPU's clock drifts as it warms);
each cell takes the faster of its runs per build. A cell is identified by every field that is not a
measurement (the shape, dtype, histogram, kernel, ...). Prints, per group of cells (by --group fields;
default the first two shape fields the files have among next_n, heads, rows, dtype, logits), the median,
least and largest B / A (below 1: B faster), then every cell off by more than --show, then the totals."""
import argparse
import json
import statistics

# Fields that a run measures (they differ between runs of one build), not part of a cell's identity.
# (Floats never are; these are the integers among them: the top-k rows' reports depend on the build.)
MEASURED = {"us", "sampled_rows", "extra_pass_rows"}
GROUP_CANDIDATES = ("next_n", "heads", "rows", "dtype", "logits", "tokens")


def cells(paths, field="us"):
    best = {}
    for path in paths:
        rows = json.load(open(path))
        rows = rows.get("rows", rows) if isinstance(rows, dict) else rows
        for r in rows:
            key = tuple(sorted((k, v) for k, v in r.items() if k not in MEASURED and not isinstance(v, (float, list, dict))))
            best[key] = min(best.get(key, float("inf")), r[field])
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", action="append", required=True, help="a JSON file of build A (repeat for more runs)")
    ap.add_argument("--b", action="append", required=True, help="a JSON file of build B (repeat for more runs)")
    ap.add_argument("--group", help="comma-separated fields to group the cells by")
    ap.add_argument("--show", type=float, default=0.01, help="list the cells where |B / A - 1| exceeds this")
    ap.add_argument("--time", default="us", help="the field timed (bench prefill: logits_us, hist_us, plan_us)")
    args = ap.parse_args()
    a, b = cells(args.a, args.time), cells(args.b, args.time)
    common = sorted(set(a) & set(b))
    if not common:
        raise SystemExit("no cell is in both builds' files")
    fields = [k for k, _ in common[0]]
    group = args.group.split(",") if args.group else [f for f in GROUP_CANDIDATES if f in fields][:2]
    groups = {}
    for key in common:
        d = dict(key)
        groups.setdefault(tuple(d.get(g) for g in group), []).append(b[key] / a[key])
    print(f"B / A by {', '.join(group)}: median (least, largest), cells")
    for g, ratios in sorted(groups.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        print(f"  {g}: {statistics.median(ratios):.3f} ({min(ratios):.3f}, {max(ratios):.3f}), {len(ratios)}")
    # A cell is named by the fields that vary over the cells (not the kernel key, which follows them).
    varying = [f for f in fields if f != "kernel" and len({dict(k).get(f) for k in common}) > 1]
    off = [(b[k] / a[k], k) for k in common if abs(b[k] / a[k] - 1) > args.show]
    if off:
        print(f"cells off by more than {100 * args.show:g} % (A us, B us, B / A):")
        for ratio, key in sorted(off):
            d = dict(key)
            print(f"  {' '.join(f'{f}={d.get(f)}' for f in varying)}: {a[key]:.2f} {b[key]:.2f} {ratio:.3f}")
    ratios = [b[k] / a[k] for k in common]
    faster = sum(r < 1 - args.show for r in ratios)
    slower = sum(r > 1 + args.show for r in ratios)
    print(f"all {len(ratios)} cells: median {statistics.median(ratios):.3f}, {faster} faster and {slower} slower "
          f"by more than {100 * args.show:g} %")
    missing = len(set(a) ^ set(b))
    if missing:
        print(f"({missing} cells in only one build's files)")


if __name__ == "__main__":
    main()
