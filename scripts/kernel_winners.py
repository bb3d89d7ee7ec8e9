#!/usr/bin/env python3
"""The fastest variant of each kernel, from perf/kernel_bench's WINNER lines.

    python3 scripts/kernel_winners.py FILE [--apply] [--margin=0.02] [--table=kernels/variants.cc]

FILE is kernel_bench's output, or the figures.txt that
`scripts/gpu_checks.sh OUT kernel-bench` writes. For every kernel with
variants (kernels/variants.h) it prints the winner (the highest mean ratio to
a device-to-device copy over that kernel's rows), its lowest ratio, and the
default's mean. A winner replaces the default only when its mean beats the
default's by at least --margin (the run-to-run noise of one GPU run is about
that). With --apply, kernels/variants.cc's defaults are rewritten to those
winners; without it nothing is changed. docs/dev/GPU.md, "Choosing kernel
variants", has the whole procedure.
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join(ROOT, "kernels", "variants.cc")
WINNER = re.compile(r"^WINNER (\w+) (\d+) (\S+) mean=([\d.]+) min=([\d.]+) default=(\d+) default_mean=([\d.]+)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--apply", action="store_true", help="rewrite the defaults in kernels/variants.cc")
    ap.add_argument("--margin", type=float, default=0.02, help="mean ratio a winner must gain over the default")
    ap.add_argument("--table", default=TABLE, help="the variant table to rewrite (default: kernels/variants.cc)")
    args = ap.parse_args()
    with open(args.file, encoding="utf-8") as f:
        winners = [m.groups() for m in map(WINNER.match, f) if m]
    if not winners:
        sys.exit("%s: no WINNER lines (is it kernel_bench's output?)" % args.file)
    with open(args.table, encoding="utf-8") as f:
        table = f.read()
    changes = 0
    for kernel, number, name, mean, low, default, default_mean in winners:
        gain = float(mean) - float(default_mean)
        take = number != default and gain >= args.margin
        print("%-16s winner %s %-20s mean %s min %s; default %s mean %s: %s" %
              (kernel, number, name, mean, low, default, default_mean,
               "make it the default" if take else "keep the default"))
        if not take:
            continue
        row = re.compile(r'(\{"%s", )(\d+)(, \{)' % re.escape(kernel))
        if not row.search(table):
            sys.exit("%s: no row for %s" % (args.table, kernel))
        table = row.sub(lambda m: m.group(1) + number + m.group(3), table, count=1)
        changes += 1
    if args.apply and changes:
        with open(args.table, "w", encoding="utf-8") as f:
            f.write(table)
        print("%s: %d default(s) changed; rebuild, run `ctest -L gpu -R GpuKernels` and kernel_bench again" %
              (args.table, changes))
    elif changes:
        print("(--apply writes %d change(s) to %s)" % (changes, args.table))


if __name__ == "__main__":
    main()
