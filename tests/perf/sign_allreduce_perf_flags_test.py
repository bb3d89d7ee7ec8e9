"""sign_allreduce_perf accepts every flag of nccl-tests' all_reduce_perf and
writes nccl-tests' table and closing lines: for each flag, a small run (ranks
as threads on loopback) whose output is parsed (header, column names, every
row's fields, the footer) and checked for what that flag means; flags that
only mean something on a GPU must say so in a "# note:" line; bad values exit
2; --nccl accepts the GPU flags (77 without a GPU).
    sign_allreduce_perf_flags_test.py PATH/TO/sign_allreduce_perf"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

BIN = sys.argv[1]
BASE = ["-t", "2", "-b", "8", "-e", "512", "-f", "8", "-n", "2", "-w", "1"]  # sizes 8, 64, 512
# Only what a case sets: a developer's SIGNLION_ALGO (say) would change what the header and the JSON name.
ENV = {k: v for k, v in os.environ.items() if not k.startswith("SIGNLION_")}
ENV["SIGNLION_SOCKET_IFNAME"] = "lo"
failures = []


def run(args, expect_rc=0):
    p = subprocess.run([BIN] + args, env=ENV, capture_output=True, text=True, timeout=120)
    if p.returncode != expect_rc:
        raise AssertionError("%s: exit %d, expected %d\n%s%s" % (" ".join(args), p.returncode, expect_rc, p.stdout,
                                                                  p.stderr))
    return p.stdout if expect_rc == 0 else p.stderr


def parse(out):
    """The table: {'header': dict, 'columns': [...], 'rows': [dict], 'notes': [...], 'ranks': n, 'footer': dict}."""
    lines = out.splitlines()
    head = next(l for l in lines if l.startswith("# nThread"))
    # nccl-tests' opening: the starting line, then the parameters ending in "unalign: N"
    assert lines[lines.index(head) - 1] == "# Collective test starting: sign_allreduce_perf", lines[:3]
    m = re.match(r"# nThread (\d+) nGpus (\d+) minBytes (\d+) maxBytes (\d+) step: (\d+)\((factor|bytes)\) "
                 r"warmup iters: (\d+) iters: (\d+) agg iters: (\d+) validation: (\d+) graph: (\d+) "
                 r"unalign: (\d+)$", head)
    assert m, "header line: %r" % head
    names_line = next(l for l in lines if re.match(r"#\s+size\s+count\s+type\s+redop\s+root", l))
    columns = names_line[1:].split()
    timestamp = columns[-1] == "timestamp"
    rows = []
    for l in lines:
        if l.startswith("#") or not l.strip():
            continue
        fields = l.split()
        if timestamp:  # "YYYY-MM-DD hh:mm:ss" is two words
            assert re.match(r"\d{4}-\d\d-\d\d$", fields[-2]) and re.match(r"\d\d:\d\d:\d\d$", fields[-1]), l
            fields = fields[:-2] + [fields[-2] + " " + fields[-1]]
        assert len(fields) == len(columns), "row %r has %d fields for %d columns %s" % (l, len(fields), len(columns),
                                                                                     columns)
        row = dict()
        for i, (name, value) in enumerate(zip(columns, fields)):
            key = name if name not in row else name + "_in"  # the in-place repeats of time/algbw/...
            if name in ("type", "redop", "timestamp"):
                row[key] = value
            elif value == "N/A":
                row[key] = None
            else:
                row[key] = float(value)
        rows.append(row)
    oob = [l for l in lines if l.startswith("# Out of bounds values")]
    bw = [l for l in lines if l.startswith("# Avg bus bandwidth")]
    end = [l for l in lines if l.startswith("# Collective test concluded:")]
    assert len(oob) == 1 and re.match(r"# Out of bounds values : (\d+) (OK|FAILED)$", oob[0]), oob
    assert len(bw) == 1 and re.match(r"# Avg bus bandwidth    : [0-9.e+-]+ ?(OK|FAILED)?$", bw[0]), bw
    assert end == ["# Collective test concluded: sign_allreduce_perf"], end
    assert lines.index(oob[0]) < lines.index(bw[0]) < lines.index(end[0]), "closing lines out of order"
    return {
        "header": dict(zip(["nThread", "nGpus", "minBytes", "maxBytes", "step", "stepKind", "warmup", "iters", "agg",
                            "validation", "graph", "unalign"], m.groups())),
        "columns": columns,
        "rows": rows,
        "notes": [l[len("# note: "):] for l in lines if l.startswith("# note: ")],
        "ranks": len([l for l in lines if re.match(r"#  Rank +\d+ Group", l)]),
        "oob": oob[0],
        "text": out,
    }


def sizes(t):
    return [int(r["size"]) for r in t["rows"]]


def check(name, args, verify=None, expect_rc=0):
    try:
        out = run(args, expect_rc)
        if expect_rc == 0:
            t = parse(out)
            assert t["oob"] == "# Out of bounds values : 0 OK", t["oob"]
            for r in t["rows"]:
                assert r.get("#wrong") in (0.0, None) and r.get("#wrong_in") in (0.0, None), r
            if verify:
                verify(t)
        elif verify:
            verify(out)
        print("ok   %-28s %s" % (name, " ".join(args)))
    except Exception as e:  # report every flag, then fail
        failures.append(name)
        print("FAIL %-28s %s\n     %s" % (name, " ".join(args), e))


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def note_about(flag):
    return lambda t: expect(any(flag in n.split(":")[0].split("/") for n in t["notes"]),
                            "no '# note: %s' line in %s" % (flag, t["notes"]))


# Sizes, steps, counts of ranks.
check("-t -b -e -f", BASE, lambda t: expect(sizes(t) == [8, 64, 512] and t["ranks"] == 2, (sizes(t), t["ranks"])))
check("-i (step bytes)", ["-t", "2", "-b", "64", "-e", "192", "-i", "64", "-n", "1"],
      lambda t: expect(sizes(t) == [64, 128, 192] and t["header"]["stepKind"] == "bytes", sizes(t)))
check("-b/-e suffixes", ["-t", "2", "-b", "1K", "-e", "2K", "-f", "2", "-n", "1"],
      lambda t: expect(sizes(t) == [1024, 2048], sizes(t)))
check("-g (ranks per thread)", BASE + ["-g", "2"],
      lambda t: expect(t["ranks"] == 4 and t["header"]["nGpus"] == "2", (t["ranks"], t["header"])))
check("-t 3", ["-t", "3"] + BASE[2:], lambda t: expect(t["ranks"] == 3, t["ranks"]))
check("-n -m -w", BASE + ["-n", "3", "-m", "2", "-w", "0"],
      lambda t: expect((t["header"]["iters"], t["header"]["agg"], t["header"]["warmup"]) == ("3", "2", "0"),
                       t["header"]))
check("-N (run cycles)", BASE + ["-N", "2"], lambda t: expect(sizes(t) == [8, 64, 512] * 2, sizes(t)))
check("-c 0 (no check)", BASE + ["-c", "0"], lambda t: expect(all(r["#wrong"] is None for r in t["rows"]), t["rows"]))
check("-c 2", BASE + ["-c", "2"], lambda t: expect(all(r["#wrong"] == 0 for r in t["rows"]), t["rows"]))
check("-o all -d all", BASE + ["-o", "all", "-d", "all"],
      lambda t: expect({(r["type"], r["redop"]) for r in t["rows"]} >= {("float", "mavo"), ("half", "avg"),
                                                                         ("bfloat16", "sum"), ("int8", "mavo")},
                       {(r["type"], r["redop"]) for r in t["rows"]}))
check("-d half", BASE + ["-d", "half"], lambda t: expect({r["type"] for r in t["rows"]} == {"half"}, t["rows"]))
check("-r (root)", BASE + ["-r", "0"], note_about("-r"))
# nccl-tests' -z lines, word for word (trailing space included)
BLOCKING = {1: "# Blocking Enabled: wait and barrier after each inner iteration (-m) ",
            2: "# Blocking Enabled: wait after each inner iteration (-m), no barrier ",
            3: "# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier "}
for z in range(4):
    check("-z %d" % z, BASE + ["-z", str(z)],
          lambda t, z=z: expect([l for l in t["text"].splitlines() if "Blocking Enabled" in l] ==
                                ([BLOCKING[z]] if z else []), "Blocking line for -z %d" % z))
check("-T (timeout)", BASE + ["-T", "60"])
for a in range(4):
    check("-a %d" % a, BASE + ["-a", str(a)])
for algo in ("ring", "hd", "allgather", "fieldsum", "direct", "tree"):
    check("-A %s" % algo, BASE + ["-A", algo], lambda t, algo=algo: expect("algorithm " + algo in t["text"], algo))
check("-A HD (any case)", BASE + ["-A", "HD"], lambda t: expect("algorithm hd" in t["text"], t["text"][:400]))
check("-A with -o sum (noted)", BASE + ["-A", "ring", "-o", "sum"], note_about("-A"))
# --tie-rule: the header names it, and the check follows it (a wrong element exits non-zero).
for rule in ("zero", "positive", "negative"):
    check("--tie-rule %s" % rule, BASE + ["-t", "4", "-A", "direct", "-c", "2", "--tie-rule", rule],
          lambda t, rule=rule: expect("tie rule " + rule in t["text"] and all(r["#wrong"] == 0 for r in t["rows"]),
                                      (rule, t["text"][:600])))
check("rejects --tie-rule up", BASE + ["--tie-rule", "up"],
      lambda out: expect("--tie-rule up: not one of zero, positive, negative" in out, out), expect_rc=2)


def env_forces_algorithm():
    """SIGNLION_ALGO forces its algorithm over -A (as NCCL_ALGO does): the header and the JSON name what runs (they
    named -A's), and say where it came from."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "o.json")
        args = BASE + ["-A", "ring", "-J", path]
        p = subprocess.run([BIN] + args, env=dict(ENV, SIGNLION_ALGO="hier"), capture_output=True, text=True,
                           timeout=120)
        expect(p.returncode == 0, p.stdout + p.stderr)
        expect("algorithm hier (SIGNLION_ALGO=hier, over -A ring)" in p.stdout, p.stdout[:600])
        with open(path) as f:
            cfg = json.load(f)["config"]
        expect(cfg["algorithm"] == "hier", cfg["algorithm"])
    print("ok   %-28s %s" % ("SIGNLION_ALGO over -A", "SIGNLION_ALGO=hier -A ring -J"))


try:
    env_forces_algorithm()
except Exception as e:
    failures.append("SIGNLION_ALGO over -A")
    print("FAIL %-28s\n     %s" % ("SIGNLION_ALGO over -A", e))
check("-C 1 (cputime)", BASE + ["-C", "1"],
      lambda t: (expect("cputime" in t["columns"] and "time" not in t["columns"], t["columns"]), note_about("-C")(t)))
check("-S 1 (timestamps)", BASE + ["-S", "1"],
      lambda t: expect(t["columns"][-1] == "timestamp" and all("timestamp" in r for r in t["rows"]), t["columns"]))
ITER_LINE = "# Per-Iteration Report: host clock timing; i_* uses max over process rows"


def header_lines(t, prefix):
    return [l for l in t["text"].splitlines() if l.startswith(prefix)]


check("-I 1 (per-iteration)", BASE + ["-I", "1", "-n", "4"],
      lambda t: (expect(t["columns"].count("i_min") == 2 and t["columns"].count("i_cv%") == 2 and
                        all(r["i_min"] <= r["i_max"] and r["i_min"] <= r["i_p99"] <= r["i_max"] for r in t["rows"]),
                        (t["columns"], t["rows"])),
                 expect(header_lines(t, "# Per-Iteration Report") == [ITER_LINE + " "], t["text"]),
                 expect("out-of-place (+ per-iteration)" in t["text"] and "in-place (+ per-iteration)" in t["text"],
                        "column titles")))
check("-I 1 -K 1", BASE + ["-I", "1", "-K", "1", "-n", "3"],
      lambda t: (expect(t["columns"].count("i_p99") == 2, t["columns"]),
                 expect(header_lines(t, "# Per-Iteration Report") ==
                        [ITER_LINE + "; summary skips first 1 iterations "], t["text"])))
check("no -I: no per-iteration line", BASE, lambda t: expect(not header_lines(t, "# Per-Iteration Report"), t["text"]))
check("-u 3 (unaligned)", BASE + ["-u", "3", "-o", "all", "-d", "all"],
      lambda t: expect(t["header"]["unalign"] == "3", t["header"]))
check("no -u: unalign 0", BASE, lambda t: expect(t["header"]["unalign"] == "0", t["header"]))
check("-p 1", BASE + ["-p", "1"], note_about("-p"))
for flag in ("-G", "-y", "-R", "-M", "-x", "-D", "-V"):
    value = "2" if flag in ("-G", "-V") else "1"
    check("%s (GPU only)" % flag, BASE + [flag, value], note_about(flag))
# -J: nccl-tests' JSON layout (its version 3), read the way nccl-tests' own
# tools/analyze_perf_json.py reads its files, plus signlion's extra keys.
# nccl-tests writes booleans as the strings "true"/"false" and the root as text.
def verify_json_file(path, t, args, iters, per_iter=False, processes=1):
    with open(path) as f:
        doc = json.load(f)
    expect(doc["version"] == 3 and doc["args"][1:] == args and doc["start_time"] and doc["end_time"],
           {k: doc.get(k) for k in ("version", "args", "start_time", "end_time")})
    expect(doc["errors"] == [] and all(e.split("=")[0].startswith(("NCCL_", "SIGNLION_")) for e in doc["env"]),
           (doc["errors"], doc["env"]))
    expect(doc["program"] == "sign_allreduce_perf" and doc["mode"] == "host", doc)
    cfg, head = doc["config"], t["header"]
    for key, name in (("nthreads", "nThread"), ("ngpus", "nGpus"), ("minimum_bytes", "minBytes"),
                      ("maximum_bytes", "maxBytes"), ("warmup_iters", "warmup"), ("iterations", "iters"),
                      ("aggregated_iterations", "agg"), ("validation", "validation"), ("graph", "graph")):
        expect(cfg[key] == int(head[name]), "config %s %r, header %s %r" % (key, cfg[key], name, head[name]))
    expect(cfg["step_factor" if head["stepKind"] == "factor" else "step_bytes"] == int(head["step"]), cfg)
    expect(cfg["per_iter_timing"] == ("true" if per_iter else "false") and cfg["blocking_collectives"] == "false" and
           cfg["parallel_init"] == "false", cfg)
    expect([d["rank"] for d in cfg["devices"]] == list(range(t["ranks"])) and
           all(d["hostname"] and d["pid"] > 0 and d["device_info"] == "host CPU" for d in cfg["devices"]),
           cfg["devices"])
    expect(cfg["unalign"] == int(head["unalign"]) and cfg["op"] == "mavo" and cfg["algorithm"] == "auto", cfg)
    expect([r["size"] for r in doc["results"]] == sizes(t), doc["results"])
    for r, row in zip(doc["results"], t["rows"]):
        expect((r["count"], r["type"], r["redop"], r["root"].strip(), r["actual_iterations"]) ==
               (int(row["count"]), row["type"], row["redop"], "-1", iters), r)
        for place, suffix in (("out_of_place", ""), ("in_place", "_in")):
            res = r[place]
            expect(abs(res["time"] - row["time" + suffix]) <= max(0.01, 0.01 * row["time" + suffix]) and
                   res["nwrong"] == row["#wrong" + suffix] and "alg_bw" in res and "bus_bw" in res, (res, row))
            per = r.get(place + "_per_iter")
            expect((per is not None) == per_iter, "%s_per_iter in %s" % (place, r))
            if per:
                expect(len(per["times_us"]) == iters and per["max_us"] == max(per["times_us"][per["skipped_iterations"]:])
                       and per["min_us"] <= per["p50_us"] <= per["p95_us"] <= per["p99_us"] <= per["max_us"] and
                       abs(per["min_us"] - row["i_min" + suffix]) <= max(0.01, 0.01 * row["i_min" + suffix]) and
                       "avg_us" in per and "stdev_us" in per and "cv_pct" in per, per)
                rows = per.get("per_process_max_times_us", [])
                expect(len(rows) == (processes if processes > 1 else 0) and
                       all(abs(max(p[i] for p in rows) - per["times_us"][i]) < 1e-6 for i in range(iters) if rows),
                       per)
        expect(r["wire_bytes_per_rank"] == row["wire"] and abs(r["wire_bits_per_element"] - row["wire_in"]) < 1e-3,
               (r, row))
    expect(doc["out_of_bounds"] == {"count": 0, "okay": "true"}, doc["out_of_bounds"])
    bw = float(t["text"].split("# Avg bus bandwidth    : ")[1].split()[0])
    expect(abs(doc["average_bus_bandwidth"]["bandwidth"] - bw) <= 1e-3 * max(bw, 1e-9) and
           doc["average_bus_bandwidth"]["okay"] == "unchecked", (doc["average_bus_bandwidth"], bw))


with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "out.json")
    for name, extra, per_iter in (("-J (JSON)", [], False), ("-J -I 1 -K 1 (JSON per-iteration)",
                                                             ["-I", "1", "-K", "1"], True),
                                  ("-J -G 2 (host: graph 0)", ["-G", "2"], False)):
        args = BASE + extra + ["-J", path]
        check(name, args, lambda t, args=args, per_iter=per_iter: verify_json_file(path, t, args, 2, per_iter))

    # Two processes started by hand: the per-process rows of -I in the JSON.
    def two_processes():
        idf, jpath = os.path.join(tmp, "id"), os.path.join(tmp, "procs.json")
        common = ["-b", "8", "-e", "64", "-f", "8", "-n", "3", "-w", "1", "-I", "1", "--nranks", "2",
                  "--id-file", idf]
        args0 = common + ["--rank", "0", "-J", jpath]

        def launch(rank_one_first):
            order = (1, 0) if rank_one_first else (0, 1)
            procs = {}
            for r in order:
                procs[r] = subprocess.Popen([BIN] + (args0 if r == 0 else common + ["--rank", "1"]), env=ENV,
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                if rank_one_first:
                    time.sleep(0.5)  # rank 1 looks for the id file before rank 0 has written this run's
            outs = []
            try:
                for r in (0, 1):
                    outs.append(procs[r].communicate(timeout=120))
            finally:
                for p in procs.values():
                    if p.poll() is None:
                        p.kill()
            for r, (out, err) in zip((0, 1), outs):
                expect(procs[r].returncode == 0, "rank %d exit %s: %s%s" % (r, procs[r].returncode, out, err))
            # Rank 0 removes the id file once every rank has joined.
            expect(not os.path.exists(idf), "%s left after the run" % idf)
            return outs

        outs = launch(False)
        t = parse(outs[0][0])
        verify_json_file(jpath, t, args0, 3, per_iter=True, processes=2)
        # Again with the same path, rank 1 started first: it must wait for this
        # run's id, not read the last run's (it used to: connection refused,
        # and rank 0 timed out waiting for it).
        launch(True)
        print("ok   %-28s %s" % ("-J -I 1, 2 processes", " ".join(args0)))
    try:
        two_processes()
    except Exception as e:
        failures.append("-J -I 1, 2 processes")
        print("FAIL %-28s\n     %s" % ("-J -I 1, 2 processes", e))
check("long options", ["--nthreads", "2", "--minbytes", "8", "--maxbytes", "64", "--stepfactor", "8", "--iters", "1",
                       "--cudagraph", "1", "--report_timestamps", "1", "--per_iter_timing", "1",
                       "--unalign", "1", "--stream_null", "1", "--blocking", "2", "--parallel_init", "1"])

# Bad values: a clear message, exit 2.
for args in (["-z", "4"], ["-J", "/tmp/out.txt"], ["-g", "0"], ["-u", "-1"], ["-I", "1", "-K", "2", "-n", "2"],
             ["-q", "1"], ["-R", "3"], ["-A", "nope"],
             # not whole integers, or out of range (strtol alone took "2x" as 2, "abc" as 0, and
             # 99999999999 wrapped to a huge -n that ran for hours)
             ["-t", "2x"], ["-f", "abc"], ["-n", "99999999999"], ["-w", "1.5"], ["-C", "5"], ["-S", "x"],
             ["-I", "2"], ["-p", "3"], ["-y", "2"], ["-M", "2"], ["-T", "-5"], ["-V", "-1"],
             # more memory than the machine has: an error before any rank starts, not a crash
             ["-e", "1000000G"],
             # more ranks than one process starts (-t x -g at most 128): -t 100000 hung until a timeout;
             # 65536 x 65536 overflowed int to 0 ranks
             ["-t", "100000"], ["-t", "129"], ["-t", "64", "-g", "3"], ["-t", "65536", "-g", "65536"]):
    check("rejects %s" % " ".join(args), BASE + args,
          lambda out, args=args: expect(out.strip() != "" and ("at most 128 ranks per process" in out) ==
                                        (args[0] == "-t" and args[1] not in ("2x",)), "message: %r" % out),
          expect_rc=2)

# --nccl takes the GPU flags; without a GPU it exits 77 (with one, it runs).
nccl_rc = subprocess.run([BIN, "--nccl", "-t", "2", "-b", "8", "-e", "8", "-n", "1"], env=ENV, capture_output=True,
                         timeout=600).returncode
if nccl_rc in (0, 77):
    for args in (["-G", "2"], ["-y", "1"], ["-R", "1"], ["-M", "1"], ["-C", "1"], ["-I", "1"], ["-z", "3"],
                 ["-g", "2"], ["-u", "1"], ["-S", "1"]):
        check("--nccl %s" % " ".join(args), ["--nccl", "-t", "1", "-b", "8", "-e", "64", "-f", "8", "-n", "2"] + args,
              expect_rc=nccl_rc)
    for args in (["-G", "2", "-z", "1"], ["-G", "2", "-I", "1"], ["-G", "2", "-y", "1"], ["--tie-rule", "positive"]):
        check("--nccl rejects %s" % " ".join(args), ["--nccl", "-t", "1", "-b", "8", "-e", "8"] + args, expect_rc=2)
else:
    failures.append("--nccl probe exited %d" % nccl_rc)

if failures:
    print("FAILED: %d: %s" % (len(failures), ", ".join(failures)))
    sys.exit(1)
print("every flag accepted and its output parsed")
