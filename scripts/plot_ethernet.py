#!/usr/bin/env python3
"""Plots scripts/ethernet_bench.sh's CSV: time (out-of-place) vs fp32 input
size, one line per contender, one panel per (ranks, link rate).
   plot_ethernet.py ethernet.csv ethernet.png"""
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, dst):
    series = defaultdict(lambda: defaultdict(list))  # (n, rate) -> contender -> [(MiB, ms)]
    with open(src) as f:
        for row in csv.DictReader(f):
            mib = int(row["count"]) * 4 / 2**20  # the fp32 input the contender stands for
            series[(int(row["nranks"]), row["rate"])][row["contender"]].append((mib, float(row["time_us"]) / 1e3))
    panels = sorted(series)
    if not panels:
        sys.exit("no rows in " + src)
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.5), squeeze=False)
    for ax, key in zip(axes[0], panels):
        for name, pts in sorted(series[key].items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("fp32 input per rank (MiB)")
        ax.set_ylabel("time per all-reduce (ms)")
        ax.set_title(f"N = {key[0]}, {key[1]} links")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
