#!/usr/bin/env python3
"""The SM clock and the power while each build's benchmark ran, from a device run's nvidia-smi log.

    python3 tools/clock_windows.py smi.csv marks.txt

smi.csv: `nvidia-smi --query-gpu=timestamp,clocks.current.sm,power.draw,clocks_event_reasons.active
--format=csv -lms 100` running in the background of the device call (docs/next-run/r170.sh).
marks.txt: one line per benchmark window, `begin NAME RUN HH:MM:SS.fraction` and `end NAME RUN ...`,
written with `date +%H:%M:%S.%N` around each build's `bench` commands.

Prints per window: the samples in it, the median and least SM clock (MHz), the mean power (W), and the
clock-event reasons seen (nvidia-smi's bit mask, OR-ed). Device run 167 found the SMs at 1.56-1.62 GHz
under the paged logits kernel, and our time x clock about constant, so an A/B whose builds ran at
different clocks measures the clock as much as the code."""
import argparse
import statistics
import sys


def seconds_of_day(text):
    """HH:MM:SS[.fraction] -> seconds since midnight (the fraction may have up to 9 digits)."""
    hms, _, fraction = text.strip().partition(".")
    h, m, s = (int(x) for x in hms.split(":"))
    return h * 3600 + m * 60 + s + (float("0." + fraction) if fraction else 0.0)


def read_samples(path):
    """(seconds of day, MHz, W or None, reasons or 0) per sample line; the header and bad lines skipped."""
    samples = []
    for line in open(path):
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 2 or not fields[1].endswith("MHz"):
            continue  # the header, or an error line
        try:
            stamp = fields[0].split(" ")[-1]  # "2026/12/03 07:50:01.123"
            mhz = float(fields[1].split()[0])
            watts = float(fields[2].split()[0]) if len(fields) > 2 and fields[2].endswith("W") else None
            reasons = int(fields[3], 16) if len(fields) > 3 and fields[3].startswith("0x") else 0
        except ValueError:
            continue
        samples.append((seconds_of_day(stamp), mhz, watts, reasons))
    return samples


def read_windows(path):
    """(name, begin, end) per window, in the order they began."""
    begins, windows = {}, []
    for line in open(path):
        parts = line.split()
        if len(parts) < 3:
            continue
        kind, name, stamp = parts[0], " ".join(parts[1:-1]), parts[-1]
        if kind == "begin":
            begins[name] = seconds_of_day(stamp)
        elif kind == "end" and name in begins:
            windows.append((name, begins.pop(name), seconds_of_day(stamp)))
    return sorted(windows, key=lambda w: w[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("smi", help="nvidia-smi CSV log")
    ap.add_argument("marks", help="begin / end lines of the benchmark windows")
    args = ap.parse_args()
    samples = read_samples(args.smi)
    if not samples:
        sys.exit(f"{args.smi}: no samples with an SM clock")
    print(f"{'window':<16} {'samples':>7} {'MHz median':>10} {'MHz least':>9} {'W mean':>7}  reasons")
    for name, begin, end in read_windows(args.marks):
        inside = [s for s in samples if begin <= s[0] <= end]
        if not inside:
            print(f"{name:<16} {0:>7}")
            continue
        clocks = [s[1] for s in inside]
        watts = [s[2] for s in inside if s[2] is not None]
        reasons = 0
        for s in inside:
            reasons |= s[3]
        mean_watts = f"{statistics.mean(watts):7.1f}" if watts else f"{'-':>7}"
        print(f"{name:<16} {len(inside):>7} {statistics.median(clocks):>10.0f} {min(clocks):>9.0f} {mean_watts}  0x{reasons:x}")


if __name__ == "__main__":
    main()
