#!/usr/bin/env python3
"""Summaries of the star benchmarks' CSVs, medians over repeated contenders
(a contender listed several times in CONTENDERS, each run with the build
under test and, with BASELINE, with the baseline build: "<name>@base").

  star_summary.py ethernet ethernet.csv
    per (N, rate, size): each sign contender's wall time against its wire time
    (the most bytes a rank put on the wire / the link rate), auto against
    every forced algorithm of the same build, the choice (auto's runs pooled
    with those of the forced algorithm whose schedule it ran, identified by
    identical wire bytes, against the other forced ones), and each contender
    against the baseline build.
  star_summary.py cluster cluster.csv
    per size: hier against the best flat algorithm (ring, halving-doubling),
    wall time and inter-node bytes per node, per build.
Rows with a wrong result are left out. Medians of the out-of-place times."""
import csv
import statistics
import sys
from collections import defaultdict


def rate_bytes_per_s(rate):
    for suffix, mult in (("gbit", 1e9), ("mbit", 1e6)):
        if rate.endswith(suffix):
            return float(rate[: -len(suffix)]) * mult / 8
    raise ValueError("unknown rate " + rate)


def split(label):
    name, _, build = label.partition("@")
    return name, build or "new"


def load(path, key_fields, time_field):
    times = defaultdict(list)  # (key..., name, build) -> [us]
    extra = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            if row["wrong"] not in ("0", "N/A"):
                continue
            name, build = split(row["contender"])
            k = tuple(row[x] for x in key_fields) + (name, build)
            times[k].append(float(row[time_field]))
            extra[k] = row
    return {k: (statistics.median(v), len(v)) for k, v in times.items()}, extra, times


def family(name):
    """(tie rule suffix, transport suffix) of a contender's name, e.g. sign-direct-tie+ucx."""
    base, _, via = name.partition("+")
    return ("-tie" if base.endswith("-tie") else "", "+" + via if via else "")


def ethernet(path):
    med, rows, runs = load(path, ("nranks", "rate", "bytes"), "time_us")
    groups = defaultdict(dict)  # (n, rate, bytes, build) -> name -> (ms, reps)
    for (n, rate, size, name, build), (us, reps) in med.items():
        groups[(n, rate, size, build)][name] = (us / 1e3, reps)
    for (n, rate, size, build) in sorted(groups, key=lambda k: (int(k[0]), k[1], int(k[2]), k[3])):
        g = groups[(n, rate, size, build)]
        head = "N=%s %s %s B [%s]" % (n, rate, size, build)
        for name, (ms, reps) in sorted(g.items()):
            row = rows[(n, rate, size, name, build)]
            # Another plugin's comms (UCX) have no byte counters: 0 there.
            if not name.startswith("sign-") or row["wire_bytes_per_rank"] in ("", "N/A", "0"):
                continue
            wire_ms = float(row["wire_bytes_per_rank"]) / rate_bytes_per_s(rate) * 1e3
            print("wire %s: %s %.1f ms (median of %d), wire %.1f ms: %.2fx of wire time"
                  % (head, name, ms, reps, wire_ms, ms / wire_ms))
        # A family: one transport (a "+ucx" suffix, ethernet_bench.sh TRANSPORTS) and one tie rule
        # ("-tie": another contract, so never compared with exact ties as a choice of algorithm).
        for tie, via in sorted({family(k) for k in g if k.startswith("sign-")}):
            auto_name = "sign-auto" + tie + via
            if auto_name not in g:
                continue
            auto = g[auto_name][0]
            forced = {k: v[0] for k, v in g.items()
                      if k.startswith("sign-") and k != auto_name and family(k) == (tie, via)}
            if forced:
                best = min(forced, key=forced.get)
                parts = ", ".join("%s %.1f ms (auto %.3fx)" % (k, v, auto / v) for k, v in sorted(forced.items()))
                print("auto %s: %s %.1f ms; %s; best forced %s: auto %.3fx, within 5%%: %s"
                      % (head, auto_name, auto, parts, best, auto / forced[best],
                         "yes" if auto <= 1.05 * forced[best] else "NO"))
                choice(head, n, rate, size, build, tie + via, forced, rows, runs)
        if "onebit" in g:  # DeepSpeed's 1-bit pattern over the same links
            for name in sorted(k for k in g if k.startswith("sign-") and "+" not in k):
                ratio = g["onebit"][0] / g[name][0]
                print("onebit %s: %s %.1f ms, onebit %.1f ms: %.2fx %s"
                      % (head, name, g[name][0], g["onebit"][0], ratio if ratio >= 1 else 1 / ratio,
                         "faster" if ratio >= 1 else "slower"))
        for name in sorted(g):
            if name.endswith("+ucx") and name[:-4] in g:
                print("ucx %s: %s %.1f ms over UCX, %.1f ms over sockets: UCX %.2fx the socket time"
                      % (head, name[:-4], g[name][0], g[name[:-4]][0], g[name][0] / g[name[:-4]][0]))
    for (n, rate, size, build), g in sorted(groups.items()):
        if build != "new" or (n, rate, size, "base") not in groups:
            continue
        base = groups[(n, rate, size, "base")]
        for name, (ms, _) in sorted(g.items()):
            if name in base:
                print("vs baseline N=%s %s %s B: %s %.1f ms, baseline %.1f ms: %.2fx faster"
                      % (n, rate, size, name, ms, base[name][0], base[name][0] / ms))


def choice(head, n, rate, size, build, via, forced, rows, runs):
    """Auto runs the schedule of the forced algorithm whose wire bytes it
    matches exactly (the benchmark's byte counters): its runs and that
    algorithm's are runs of one schedule, so their pooled median judges the
    choice against the other forced algorithms with twice the samples. Each
    arm's run count and range are printed; a NO whose ranges overlap the 5 %
    band says so (the repetitions cannot tell it apart from noise)."""
    wire = lambda c: rows[(n, rate, size, c, build)]["wire_bytes_per_rank"]  # noqa: E731
    mine = wire("sign-auto" + via)
    same = [k for k in forced if wire(k) == mine]
    if mine in ("", "N/A", "0") or len(same) != 1:
        print("choice %s: no unique forced algorithm with auto's wire bytes (%s; %s)"
              % (head, mine, ", ".join("%s %s" % (k, wire(k)) for k in sorted(forced))))
        return
    chosen = same[0]
    arms = {k: runs[(n, rate, size, k, build)] for k in forced}
    arms[chosen] = arms[chosen] + runs[(n, rate, size, "sign-auto" + via, build)]
    med = {k: statistics.median(v) / 1e3 for k, v in arms.items()}
    best = min(med, key=med.get)
    ratio = med[chosen] / med[best]
    verdict = "yes" if ratio <= 1.05 else "NO"
    if verdict == "NO" and min(arms[chosen]) <= 1.05 * max(arms[best]):
        verdict = "NO (ranges overlap)"
    spread = lambda k: "%s n=%d %.1f-%.1f" % (k, len(arms[k]), min(arms[k]) / 1e3, max(arms[k]) / 1e3)  # noqa: E731
    print("choice %s: auto runs %s's schedule (same wire bytes), pooled median %.1f ms; best %s %.1f ms: "
          "%.3fx, within 5%%: %s [%s]" % (head, chosen, med[chosen], best, med[best], ratio, verdict,
                                         "; ".join(spread(k) for k in sorted(arms))))


def cluster(path):
    med, rows, _ = load(path, ("bytes",), "time_us")
    builds = sorted({k[-1] for k in med})
    sizes = sorted({int(k[0]) for k in med})
    for build in builds:
        for size in sizes:
            t = {k[1]: v[0] for k, v in med.items() if k[0] == str(size) and k[2] == build}
            if not all(x in t for x in ("sign-hier", "sign-ring", "sign-hd")):
                continue
            flat = min(("sign-ring", "sign-hd"), key=t.get)
            node = lambda c: float(rows[(str(size), c, build)]["internode_bytes_per_node"])  # noqa: E731
            bflat = min(("sign-ring", "sign-hd"), key=node)
            print("summary [%s] %d B: hier inter-node bytes/node %.3fx of the best flat (%s); "
                  "hier %.1f ms, best flat %s %.1f ms (medians): %.2fx faster"
                  % (build, size, node("sign-hier") / node(bflat), bflat, t["sign-hier"] / 1e3, flat,
                     t[flat] / 1e3, t[flat] / t["sign-hier"]))


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("ethernet", "cluster"):
        sys.exit(__doc__)
    (ethernet if sys.argv[1] == "ethernet" else cluster)(sys.argv[2])
