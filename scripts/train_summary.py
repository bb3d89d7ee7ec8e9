#!/usr/bin/env python3
"""Tables and plots of scripts/train_bench.sh's runs (the JSON that examples/train.py's rank 0 writes).

  train_summary.py --one RUN.json                 one line: the run's medians
  train_summary.py [--timed K] [--conv-rate R] [--target-mlp A] [--target-lm L] [--plots DIR] RUNS_DIR

Per (workload, N, rate) and contender: medians over the last K steps of a run of forward +
backward, optimizer step and whole step; the communication left exposed (the step minus the
compute-only contender's step at the same N); samples/s; bytes this rank sent per step (the
interface's tx_bytes, every contender; signlion's own payload counter where there is one).
Per (workload, N): the steps each contender took to reach the target (its evaluation curve at
the convergence rate), the final metric at equal steps, and the time to the target at each
rate: steps to target x that rate's median step time (the curve does not depend on the link:
every contender is deterministic given its seed). The plots: the validation metric against
that wall time per contender at each rate (train_curves.png) and samples/s against link rate
(train_throughput.png).
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys

RATE_ORDER = {"100mbit": 0, "1gbit": 1, "10gbit": 2, "loopback": 3}
ORDER = ["compute", "ddp-adamw", "ddp-lion", "ddp-fp16-lion", "ddp-powersgd-lion", "allgather-lion",
         "signlion-mavo", "signlion-mavo+overlap", "signlion-average", "signlion-average+overlap"]
METRIC = {"mlp": ("accuracy", True), "lm": ("val loss", False)}


def load(path):
    with open(path) as f:
        r = json.load(f)
    m = re.match(r"(\w+)-n(\d+)-(\w+)-(.+)\.json$", os.path.basename(path))
    r["workload"], r["n"], r["rate"], r["label"] = m.group(1), int(m.group(2)), m.group(3), m.group(4)
    return r


def medians(r, timed):
    k = min(timed, len(r["step_s"]))
    pick = lambda xs: [x for x in xs[-k:] if x is not None]  # noqa: E731
    med = lambda xs: statistics.median(pick(xs)) if pick(xs) else None  # noqa: E731
    step = med(r["step_s"])
    return {"fwd_bwd": med(r["fwd_bwd_s"]), "opt": med(r["opt_s"]), "step": step,
            "samples": r["args"]["batch"] * r["world"] / step, "tx": med(r["tx_bytes"]),
            "sent": med(r["sent_bytes"])}


def fmt_bytes(b):
    if b is None:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= scale:
            return "%.2f %s" % (b / scale, unit)
    return "%d B" % b


def one(path, timed):
    r = load(path)
    m = medians(r, timed)
    print("   %s: step %.3f s (fwd+bwd %.3f, optimizer %.3f), %.1f samples/s, sent/step %s (interface) %s "
          "(signlion), final %s %.4f, ranks %s" % (r["label"], m["step"], m["fwd_bwd"], m["opt"], m["samples"],
                                                   fmt_bytes(m["tx"]), fmt_bytes(m["sent"]),
                                                   METRIC[r["workload"]][0], r["final"],
                                                   "identical" if r["identical"] else "differ"))


def steps_to(r, target, higher):
    for step, value, _ in r["evals"]:
        if (value >= target) if higher else (value <= target):
            return step
    return None


def key_order(label):
    return ORDER.index(label) if label in ORDER else len(ORDER)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="?")
    ap.add_argument("--one")
    ap.add_argument("--timed", type=int, default=5)
    ap.add_argument("--conv-rate", default="10gbit")
    ap.add_argument("--target-mlp", type=float, default=0.80)
    ap.add_argument("--target-lm", type=float, default=2.60)
    ap.add_argument("--plots")
    a = ap.parse_args()
    if a.one:
        one(a.one, a.timed)
        return 0
    runs = [load(p) for p in sorted(glob.glob(os.path.join(a.runs, "*.json")))]
    if not runs:
        print("no runs in %s" % a.runs)
        return 1
    table = {}  # (wl, n) -> rate -> label -> medians
    conv = {}  # (wl, n) -> label -> run at the convergence rate
    for r in runs:
        table.setdefault((r["workload"], r["n"]), {}).setdefault(r["rate"], {})[r["label"]] = medians(r, a.timed)
        if r["rate"] == a.conv_rate:
            conv.setdefault((r["workload"], r["n"]), {})[r["label"]] = r
    targets = {"mlp": a.target_mlp, "lm": a.target_lm}
    for (wl, n), rates in sorted(table.items()):
        name, higher = METRIC[wl]
        print("\n## %s, N = %d: per-step medians of the last %d steps" % (wl, n, a.timed))
        for rate in sorted(rates, key=lambda x: RATE_ORDER.get(x, 9)):
            rows = rates[rate]
            floor = rows.get("compute")
            print("\n%s | %-26s %8s %8s %8s %9s %8s %9s %11s %11s" % (
                rate, "contender", "fwd+bwd", "optim", "step", "exposed", "x comp", "samples/s", "sent/step",
                "signlion"))
            for label in sorted(rows, key=key_order):
                m = rows[label]
                exposed = m["step"] - floor["step"] if floor else None
                ratio = m["step"] / floor["step"] if floor else None
                print("%s | %-26s %8.3f %8.3f %8.3f %9s %8s %9.1f %11s %11s" % (
                    rate, label, m["fwd_bwd"], m["opt"], m["step"],
                    "-" if exposed is None else "%.3f" % exposed, "-" if ratio is None else "%.2fx" % ratio,
                    m["samples"], fmt_bytes(m["tx"]), fmt_bytes(m["sent"])))
        runs_c = conv.get((wl, n), {})
        if not runs_c:
            continue
        target = targets[wl]
        print("\n%s, N = %d: target %s %s %.3f (evaluated every %d steps at %s); time to target = steps x median "
              "step time at each rate" % (wl, n, name, ">=" if higher else "<=", target,
                                          runs_c[next(iter(runs_c))]["args"]["eval_every"], a.conv_rate))
        rate_list = sorted(rates, key=lambda x: RATE_ORDER.get(x, 9))
        print("%-26s %8s %10s %7s  %s" % ("contender", "steps", "final", "ranks",
                                          "  ".join("%16s" % ("time " + x) for x in rate_list)))
        for label in sorted(runs_c, key=key_order):
            r = runs_c[label]
            s = steps_to(r, target, higher)
            times = []
            for rate in rate_list:
                m = rates[rate].get(label)
                times.append("%16s" % ("-" if s is None or m is None else "%.1f s" % (s * m["step"])))
            print("%-26s %8s %10.4f %7s  %s" % (label, "-" if s is None else s, r["final"],
                                               "same" if r["identical"] else "differ", "  ".join(times)))
        ddp_lion = runs_c.get("ddp-lion")
        sl = [x for x in runs_c if x.startswith("signlion")]
        if ddp_lion and sl:
            s_ref = steps_to(ddp_lion, target, higher)
            for rate in rate_list:
                def ttt(label):
                    s = steps_to(runs_c[label], target, higher)
                    m = rates[rate].get(label)
                    return None if s is None or m is None else s * m["step"]
                best_sl = min((x for x in sl if ttt(x) is not None), key=ttt, default=None)
                if best_sl is None or ttt("ddp-lion") is None:
                    continue
                hooks = [ttt(x) for x in ("ddp-fp16-lion", "ddp-powersgd-lion") if x in runs_c and ttt(x)]
                floor = rates[rate].get("compute")
                line = "%s: best signlion (%s) reaches the target %.2fx sooner than ddp-lion" % (
                    rate, best_sl, ttt("ddp-lion") / ttt(best_sl))
                if hooks:
                    line += ", %.2fx sooner than the best DDP hook" % (min(hooks) / ttt(best_sl))
                if floor and s_ref:
                    best_possible = rates[rate]["ddp-lion"]["step"] / floor["step"]
                    got = rates[rate]["ddp-lion"]["step"] / rates[rate][best_sl]["step"]
                    line += "; per step %.2fx of the %.2fx that the compute-only step allows (%.0f %%)" % (
                        got, best_possible, 100 * (got - 1) / (best_possible - 1) if best_possible > 1 else 100)
                print(line)
    if a.plots:
        plot(table, conv, targets, a.plots)
    return 0


def plot(table, conv, targets, outdir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = sorted(conv)
    if keys:
        rates = sorted({r for k in keys for r in table[k]}, key=lambda x: RATE_ORDER.get(x, 9))
        fig, axes = plt.subplots(len(keys), len(rates), figsize=(5 * len(rates), 3.8 * len(keys)), squeeze=False)
        for i, k in enumerate(keys):
            wl, n = k
            for j, rate in enumerate(rates):
                ax = axes[i][j]
                for label in sorted(conv[k], key=key_order):
                    m = table[k].get(rate, {}).get(label)
                    if m is None:
                        continue
                    ev = conv[k][label]["evals"]
                    ax.plot([s * m["step"] for s, _, _ in ev], [v for _, v, _ in ev], marker=".", label=label,
                            linestyle="--" if label == "compute" else "-")
                ax.axhline(targets[wl], color="grey", linewidth=0.8)
                ax.set_xscale("log")
                ax.set_title("%s, N = %d, %s" % (wl, n, rate))
                ax.set_xlabel("training time (s): step x median step time")
                ax.set_ylabel(METRIC[wl][0])
                if i == 0 and j == 0:
                    ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(outdir, "train_curves.png"), dpi=90)
        print("plot: %s" % os.path.join(outdir, "train_curves.png"))
    keys = sorted(table)
    fig, axes = plt.subplots(1, len(keys), figsize=(5 * len(keys), 3.8), squeeze=False)
    for i, k in enumerate(keys):
        ax = axes[0][i]
        rates = sorted((r for r in table[k] if r in RATE_ORDER and r != "loopback"), key=lambda x: RATE_ORDER[x])
        labels = sorted({lab for r in rates for lab in table[k][r]}, key=key_order)
        for label in labels:
            pts = [(r, table[k][r][label]["samples"]) for r in rates if label in table[k][r]]
            ax.plot([RATE_ORDER[r] for r, _ in pts], [v for _, v in pts], marker="o", label=label,
                    linestyle="--" if label == "compute" else "-")
        ax.set_xticks([RATE_ORDER[r] for r in rates])
        ax.set_xticklabels(rates)
        ax.set_yscale("log")
        ax.set_title("%s, N = %d" % k)
        ax.set_xlabel("link rate")
        ax.set_ylabel("samples/s")
        if i == 0:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "train_throughput.png"), dpi=90)
    print("plot: %s" % os.path.join(outdir, "train_throughput.png"))


if __name__ == "__main__":
    sys.exit(main())
