#!/usr/bin/env python3
"""Tables and plots of scripts/train_bench.sh's runs (the JSON that examples/train.py's rank 0 writes).

  train_summary.py --one RUN.json                 one line: the run's medians
  train_summary.py [--timed K | --warmup W] [--target-mlp A|auto] [--target-lm L|auto] [--plots DIR] RUNS_DIR

Per (workload, N, rate) and contender: medians over the last K steps of a run (--warmup W: over
every step after the first W, for runs of different lengths in one directory) of forward +
backward, optimizer step and whole step; the communication left exposed (the step minus the
compute-only floor); samples/s; bytes this rank sent per step (the
interface's tx_bytes, every contender; signlion's own payload counter where there is one).
The compute-only floor of a (workload, N): the median of the compute-only contender's timed
steps at every rate together. It sends nothing, so its step does not depend on the link; one
run's median moves with the machine's load, pooling the rates' runs steadies the floor.
The target (auto, the default): the median of DDP + Lion's evaluations over the middle third of
the steps every convergence run has, rounded to the easier side (accuracy down to a whole
percent, loss up to 0.05 nats): a level the reference reaches around half of the run and holds
(a median, not one evaluation, which on a small validation set is noisy), leaving a contender
as many steps again to reach it.
Per (workload, N): the steps each contender took to reach the target (the evaluation curve of
its convergence run; the overlapped variants and allgather-lion use the curve of the update
rule they apply, signlion-mavo's or -average's), the metric at the last step every convergence
run has, and the time to the target at each rate: steps to target x that rate's median step time
(the curve does not depend on the link: every contender is deterministic given its seed). The plots: the validation metric against
that wall time per contender at each rate (train_curves.png) and samples/s against link rate
(train_throughput.png).
"""
import argparse
import glob
import json
import math
import os
import re
import statistics
import sys

RATE_ORDER = {"100mbit": 0, "1gbit": 1, "10gbit": 2, "loopback": 3}
ORDER = ["compute", "ddp-adamw", "ddp-lion", "ddp-fp16-lion", "ddp-bf16-lion", "ddp-powersgd-lion", "allgather-lion",
         "signlion-mavo", "signlion-mavo+overlap", "signlion-mavo+delay", "signlion-average",
         "signlion-average+overlap"]
METRIC = {"mlp": ("accuracy", True), "lm": ("val loss", False)}


def load(path):
    with open(path) as f:
        r = json.load(f)
    m = re.match(r"(conv|time)-(\w+)-n(\d+)-(\w+)-(.+)\.json$", os.path.basename(path))
    r["phase"], r["workload"], r["n"], r["rate"], r["label"] = (m.group(1), m.group(2), int(m.group(3)), m.group(4),
                                                               m.group(5))
    return r


def first_timed(r, timed, warmup=None):
    """The index of a run's first timed step: after `warmup` steps, else the last `timed`."""
    return warmup if warmup is not None else max(len(r["step_s"]) - timed, 0)


def medians(r, timed, warmup=None):
    first = first_timed(r, timed, warmup)
    pick = lambda xs: [x for x in xs[first:] if x is not None]  # noqa: E731
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


def value_at(r, step):
    """The run's evaluation at `step` (None when it did not evaluate there)."""
    return next((v for s, v, _ in r["evals"] if s == step), None)


def steps_to(r, target, higher, last=None):
    """The first evaluated step at or past the target (within the first `last` steps), or None."""
    for step, value, _ in r["evals"]:
        if last is not None and step > last:
            break
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
    ap.add_argument("--warmup", type=int, help="leave out the first W steps of every run instead of --timed")
    ap.add_argument("--target-mlp", default="auto", help="accuracy, or auto (the module's docstring)")
    ap.add_argument("--target-lm", default="auto", help="validation loss, or auto")
    ap.add_argument("--plots")
    a = ap.parse_args()
    if a.one:
        one(a.one, a.timed)
        return 0
    runs = [load(p) for p in sorted(glob.glob(os.path.join(a.runs, "*.json")))]
    if not runs:
        print("no runs in %s" % a.runs)
        return 1
    table = {}  # (wl, n) -> rate -> label -> medians (timed runs)
    conv = {}  # (wl, n) -> label -> convergence run
    for r in runs:
        if r["phase"] == "time":
            table.setdefault((r["workload"], r["n"]), {}).setdefault(r["rate"], {})[r["label"]] = medians(r, a.timed, a.warmup)
        else:
            conv.setdefault((r["workload"], r["n"]), {})[r["label"]] = r
    given = {"mlp": a.target_mlp, "lm": a.target_lm}
    targets = {k: auto_target(k[0], runs_c) if given[k[0]] == "auto" else float(given[k[0]])
               for k, runs_c in conv.items()}
    floors = {}  # (wl, n) -> the compute-only floor (the module's docstring)
    for r in runs:
        if r["phase"] == "time" and r["label"] == "compute":
            first = first_timed(r, a.timed, a.warmup)
            floors.setdefault((r["workload"], r["n"]), []).extend(x for x in r["step_s"][first:] if x is not None)
    floors = {key: {"step": statistics.median(xs)} for key, xs in floors.items() if xs}
    for (wl, n), rates in sorted(table.items()):
        print("\n## %s, N = %d: per-step medians of %s (seconds)"
              % (wl, n, "every step after the first %d" % a.warmup if a.warmup is not None else
                 "the last %d steps" % a.timed))
        floor = floors.get((wl, n))
        if floor:
            print("compute-only floor: %.3f s (the median of its timed steps at every rate)" % floor["step"])
        for rate in sorted(rates, key=lambda x: RATE_ORDER.get(x, 9)):
            rows = rates[rate]
            print("\n%-8s %-26s %8s %8s %8s %8s %7s %9s %11s %11s" % (
                rate, "contender", "fwd+bwd", "optim", "step", "exposed", "x comp", "samples/s", "sent/step",
                "signlion"))
            for label in sorted(rows, key=key_order):
                m = rows[label]
                exposed = m["step"] - floor["step"] if floor else None
                ratio = m["step"] / floor["step"] if floor else None
                print("%-8s %-26s %8.3f %8.3f %8.3f %8s %7s %9.1f %11s %11s" % (
                    rate, label, m["fwd_bwd"], m["opt"], m["step"],
                    "-" if exposed is None else "%.3f" % exposed, "-" if ratio is None else "%.2fx" % ratio,
                    m["samples"], fmt_bytes(m["tx"]), fmt_bytes(m["sent"])))
    for (wl, n), runs_c in sorted(conv.items()):
        rates = table.get((wl, n), {})
        name, higher = METRIC[wl]
        target = targets[(wl, n)]
        if target is None:
            print("\n## %s, N = %d: no target (auto needs ddp-lion's convergence run)" % (wl, n))
            continue
        any_run = runs_c[next(iter(runs_c))]
        common = min(r["args"]["steps"] for r in runs_c.values())  # runs compared at equal steps
        print("\n## %s, N = %d: target %s %s %.3f, evaluated every %d steps, compared over the first %d steps (runs "
              "at %s); time to target = steps x the median step time at each rate; final = %s at step %d"
              % (wl, n, name, ">=" if higher else "<=", target, any_run["args"]["eval_every"], common,
                 any_run["rate"], name, common))
        rate_list = sorted(rates, key=lambda x: RATE_ORDER.get(x, 9))
        labels = sorted(set(runs_c) | {lab for r in rates.values() for lab in r if curve_of(lab) in runs_c},
                        key=key_order)

        def ttt(label, rate):
            if curve_of(label) not in runs_c:
                return None
            s = steps_to(runs_c[curve_of(label)], target, higher, common)
            m = rates.get(rate, {}).get(label)
            return None if s is None or m is None else s * m["step"]

        print("%-26s %-16s %6s %9s %6s  %s" % ("contender", "curve", "steps", "final", "ranks",
                                              "  ".join("%14s" % ("time " + x) for x in rate_list)))
        for label in labels:
            r = runs_c[curve_of(label)]
            s = steps_to(r, target, higher, common)
            times = ["%14s" % ("-" if ttt(label, x) is None else "%.1f s" % ttt(label, x)) for x in rate_list]
            final = value_at(r, common)
            print("%-26s %-16s %6s %9s %6s  %s" % (label, curve_of(label), "-" if s is None else s,
                                                  "-" if final is None else "%.4f" % final,
                                                    "same" if r["identical"] else "differ", "  ".join(times)))
        for rate in rate_list:
            sl = [x for x in labels if x.startswith("signlion") and ttt(x, rate) is not None]
            if not sl or ttt("ddp-lion", rate) is None:
                continue
            best = min(sl, key=lambda x: ttt(x, rate))
            line = "%s: best signlion (%s) reaches the target %.2fx sooner than ddp-lion" % (
                rate, best, ttt("ddp-lion", rate) / ttt(best, rate))
            hooks = [ttt(x, rate) for x in ("ddp-fp16-lion", "ddp-bf16-lion", "ddp-powersgd-lion")
                     if ttt(x, rate) is not None]
            if hooks:
                line += ", %.2fx sooner than the best DDP hook" % (min(hooks) / ttt(best, rate))
            floor, ref = floors.get((wl, n)), rates[rate].get("ddp-lion")
            if floor and ref:
                allowed = ref["step"] / floor["step"]
                got = ref["step"] / rates[rate][best]["step"]
                line += "; per step %.2fx faster than ddp-lion, of the %.2fx a compute-only step allows" % (
                    got, allowed)
            print(line)
    if a.plots:
        plot(table, conv, targets, a.plots)
    return 0


def auto_target(wl, runs_c):
    """The module docstring's rule: the median of DDP + Lion's evaluations over the middle third
    of the common steps, rounded to the easier side; None without its run."""
    ref = runs_c.get("ddp-lion")
    if ref is None:
        return None
    common = min(r["args"]["steps"] for r in runs_c.values())
    middle = [v for s, v, _ in ref["evals"] if common / 3 <= s <= 2 * common / 3]
    if not middle:
        return None
    value = statistics.median(middle)
    if METRIC[wl][1]:
        return math.floor(value * 100) / 100
    return math.ceil(value * 20) / 20


def curve_of(label):
    """The convergence run whose update rule a contender applies (overlap changes when, not what;
    allgather-lion votes as signlion-mavo does)."""
    if label == "allgather-lion":
        return "signlion-mavo"
    return label[:-len("+overlap")] if label.endswith("+overlap") else label


def plot(table, conv, targets, outdir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = sorted(conv)
    if keys:
        rates = sorted({r for k in keys for r in table.get(k, {})}, key=lambda x: RATE_ORDER.get(x, 9))
        fig, axes = plt.subplots(len(keys), max(len(rates), 1), figsize=(5 * max(len(rates), 1), 3.8 * len(keys)),
                                 squeeze=False)
        for i, k in enumerate(keys):
            wl, n = k
            for j, rate in enumerate(rates):
                ax = axes[i][j]
                for label in sorted(table[k].get(rate, {}), key=key_order):
                    if curve_of(label) not in conv[k]:
                        continue
                    m = table[k][rate][label]
                    common = min(r["args"]["steps"] for r in conv[k].values())
                    ev = [e for e in conv[k][curve_of(label)]["evals"] if e[0] <= common]
                    ax.plot([s * m["step"] for s, _, _ in ev], [v for _, v, _ in ev], marker=".", label=label,
                            linestyle="--" if label == "compute" else "-")
                if targets.get(k) is not None:
                    ax.axhline(targets[k], color="grey", linewidth=0.8)
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
    if not keys:  # convergence runs only: no step times to plot
        return
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
