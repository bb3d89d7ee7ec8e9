"""sign_allreduce_perf never reports success for rows it did not time: an -o/-d
combination it cannot run, asked for by name, exits 2 naming the op and the
datatype (as an unknown -o or -d does), also with --nccl; under -o all or -d
all such combinations are left out with a "# note: left out:" line and the
others run.
    unsupported_combos_test.py PATH/TO/sign_allreduce_perf"""
import os
import subprocess
import sys

BIN = sys.argv[1]
BASE = ["-t", "2", "-b", "8", "-e", "64", "-f", "8", "-n", "1", "-w", "1", "-c", "1"]
ENV = {k: v for k, v in os.environ.items() if not k.startswith("SIGNLION_")}
ENV["SIGNLION_SOCKET_IFNAME"] = "lo"
failures = []


def run(args):
    return subprocess.run([BIN] + args, env=ENV, capture_output=True, text=True, timeout=120)


# Every op x datatype the host mode cannot run (onebit and mpisum: fp32 only; sum: fp32 and bf16; avg: not int8).
UNSUPPORTED = [("avg", "int8"), ("sum", "half"), ("sum", "int8"), ("onebit", "half"), ("onebit", "bfloat16"),
               ("onebit", "int8")]
for op, dt in UNSUPPORTED:
    p = run(BASE + ["-o", op, "-d", dt])
    what = "-o %s -d %s" % (op, dt)
    if p.returncode != 2 or ("%s: not supported" % what) not in p.stderr or "Out of bounds" in p.stdout:
        failures.append("%s: exit %d, expected 2 and '%s: not supported'\n%s%s" % (what, p.returncode, what,
                                                                                 p.stdout, p.stderr))

# The GPU mode checks its options before looking for a GPU: the same error, with or without one.
p = run(["--nccl", "-t", "1", "-b", "8", "-e", "8", "-o", "avg", "-d", "int8"])
if p.returncode != 2 or "-o avg -d int8: not supported" not in p.stderr:
    failures.append("--nccl -o avg -d int8: exit %d\n%s%s" % (p.returncode, p.stdout, p.stderr))

# -d int8 under -o all: avg, sum and onebit are left out with a note; mavo runs, checked.
p = run(BASE + ["-o", "all", "-d", "int8"])
notes = [l for l in p.stdout.splitlines() if l.startswith("# note: left out:")]
rows = [l.split() for l in p.stdout.splitlines() if l.strip() and not l.startswith("#")]
if p.returncode != 0 or "Out of bounds values : 0 OK" not in p.stdout:
    failures.append("-o all -d int8: exit %d\n%s%s" % (p.returncode, p.stdout, p.stderr))
for op in ("avg", "sum", "onebit"):
    if not any(("-o %s -d int8: not supported" % op) in l for l in notes):
        failures.append("-o all -d int8: no note for %s in %s" % (op, notes))
if sorted({r[3] for r in rows if len(r) > 3}) != ["mavo"] or len(rows) != 2:
    failures.append("-o all -d int8: rows %s, expected mavo at 8 and 64 bytes" % rows)

for f in failures:
    print("FAIL:", f)
print("%d failures" % len(failures))
sys.exit(1 if failures else 0)
