#!/usr/bin/env python3
"""The cost model at cluster scale, checked first against the emulated star.

   plot_scale.py STAR_PRED.csv MEASURED.csv CLUSTER_PRED.csv OUT.png

STAR_PRED.csv and CLUSTER_PRED.csv come from `scale_predict star` and
`scale_predict cluster` (perf/scale_predict.cc); MEASURED.csv is
docs/ethernet.csv (scripts/ethernet_bench.sh), or several such files joined by
commas (docs/ethernet.csv,docs/ethernet_n16.csv). Prints markdown tables on
stdout: the model's error on every measured point it predicts (per contender
and per N: median and range of predicted/measured), and the predicted time per call at
cluster scale with auto's pick; writes the plot (time per call against N, one
panel per link rate and layout) to OUT.png."""
import csv
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Measured contender -> predicted contender; the measured bytes column is the
# input of that contender's datatype (bf16 rows: half of fp32's), count is
# the element count of both.
PAIRS = {
    "sign-ring": "sign-ring",
    "sign-hd": "sign-hd",
    "sign-allgather": "sign-allgather",
    "fp32-sum": "fp32-ring",
    "bf16-sum": "bf16-ring",
}


def read(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def star_error(pred_rows, measured_rows):
    pred = {}
    for r in pred_rows:
        pred[(int(r["nranks"]), float(r["gbit"]), int(r["count"]), r["contender"])] = float(r["predicted_us"])
    ratios = defaultdict(list)  # (contender, rate) -> [predicted / measured]
    by_n = defaultdict(list)  # (nranks, rate) -> [predicted / measured]
    worst = {}
    for r in measured_rows:
        name = PAIRS.get(r["contender"])
        if name is None:
            continue
        gbit = float(r["rate"].replace("gbit", ""))
        key = (int(r["nranks"]), gbit, int(r["count"]), name)
        if key not in pred:
            continue
        ratio = pred[key] / float(r["time_us"])
        ratios[(r["contender"], r["rate"])].append(ratio)
        by_n[(int(r["nranks"]), r["rate"])].append(ratio)
        w = worst.get(r["contender"])
        if w is None or abs(ratio - 1) > abs(w[0] - 1):
            worst[r["contender"]] = (ratio, key)
    print("| measured contender | link | points | predicted / measured: median | min | max |")
    print("|---|---|---|---|---|---|")
    for (name, rate), rs in sorted(ratios.items()):
        print(f"| {name} | {rate} | {len(rs)} | {statistics.median(rs):.2f} | {min(rs):.2f} | {max(rs):.2f} |")
    print("\n| N | link | points | predicted / measured: median | min | max |")
    print("|---|---|---|---|---|---|")
    for (n, rate), rs in sorted(by_n.items()):
        print(f"| {n} | {rate} | {len(rs)} | {statistics.median(rs):.2f} | {min(rs):.2f} | {max(rs):.2f} |")
    every = [x for rs in ratios.values() for x in rs]
    if every:
        errs = sorted(abs(x - 1) for x in every)
        print(f"\nAll {len(every)} points: median |error| {100 * statistics.median(errs):.0f} %, "
              f"90th percentile {100 * errs[int(0.9 * (len(errs) - 1))]:.0f} %, "
              f"worst {100 * errs[-1]:.0f} %.")
    for name, (ratio, key) in sorted(worst.items()):
        n, gbit, count, _ = key
        print(f"- worst {name}: N = {n}, {gbit:g} Gbit/s, {count * 4 / 2**20:g} MiB of fp32: predicted / measured {ratio:.2f}")


def cluster(rows, png):
    table = defaultdict(dict)  # (perNode, gbit, n) -> contender -> ms
    pick = {}
    for r in rows:
        key = (int(r["ranks_per_node"]), float(r["gbit"]), int(r["nranks"]))
        table[key][r["contender"]] = float(r["predicted_us"]) / 1e3
        pick[key] = r["auto_picks"]
    names = ["sign-ring", "sign-hd", "sign-allgather", "sign-fieldsum", "sign-hier", "fp32-ring", "bf16-ring"]
    print("\n| ranks per node | link | N | " + " | ".join(names) + " | auto picks | auto vs fp32 ring |")
    print("|---|---|---|" + "---|" * (len(names) + 2))
    for key in sorted(table):
        per, gbit, n = key
        t = table[key]
        cells = [f"{t[c]:.1f}" if c in t else "-" for c in names]
        best = t.get("sign-" + pick[key])
        speed = f"{t['fp32-ring'] / best:.1f}x" if best else "-"
        print(f"| {per} | {gbit:g} Gbit/s | {n} | " + " | ".join(cells) + f" | {pick[key]} | {speed} |")

    layouts = sorted({k[0] for k in table})
    rates = sorted({k[1] for k in table})
    fig, axes = plt.subplots(len(layouts), len(rates), figsize=(4.2 * len(rates), 3.8 * len(layouts)), squeeze=False)
    for i, per in enumerate(layouts):
        for j, gbit in enumerate(rates):
            ax = axes[i][j]
            ns = sorted(k[2] for k in table if k[0] == per and k[1] == gbit)
            for c in names:
                pts = [(n, table[(per, gbit, n)][c]) for n in ns if c in table[(per, gbit, n)]]
                if not pts:
                    continue
                style = "--" if c.endswith("-ring") and not c.startswith("sign") else "-"
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", markersize=3, label=c,
                        color=f"C{names.index(c)}")
            autos = [(n, table[(per, gbit, n)]["sign-" + pick[(per, gbit, n)]]) for n in ns]
            ax.plot([p[0] for p in autos], [p[1] for p in autos], "k:", linewidth=2.5, label="auto")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{gbit:g} Gbit/s, {'flat' if per == 1 else f'{per} ranks/node'}", fontsize=10)
            ax.set_xlabel("ranks N")
            if j == 0:
                ax.set_ylabel("predicted ms per call")
            ax.grid(True, which="both", alpha=0.3)
    for row in axes:
        row[0].legend(fontsize=7)
    fig.suptitle("Predicted time per call, 64M fp32 elements (cost model, host executor)")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main(star_pred, measured, cluster_pred, png):
    # measured: one CSV of scripts/ethernet_bench.sh, or several joined by commas.
    star_error(read(star_pred), [r for path in measured.split(",") for r in read(path)])
    cluster(read(cluster_pred), png)


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
