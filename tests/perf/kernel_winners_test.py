"""scripts/kernel_winners.py on kernel_bench lines made up for the test, against
a copy of kernels/variants.cc: a winner that beats its default by the margin
becomes the default, one within the margin does not, nothing changes without
--apply or in other rows, and a file without WINNER lines is an error.
    kernel_winners_test.py REPOSITORY"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = sys.argv[1]
SCRIPT = os.path.join(ROOT, "scripts", "kernel_winners.py")
ROW = re.compile(r'\{"(\w+)", (\d+), \{')
failures = []


def defaults(path):
    with open(path, encoding="utf-8") as f:
        return {m.group(1): int(m.group(2)) for m in ROW.finditer(f.read())}


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


with tempfile.TemporaryDirectory() as d:
    table = os.path.join(d, "variants.cc")
    shutil.copy(os.path.join(ROOT, "kernels", "variants.cc"), table)
    before = defaults(table)
    if not {"sumVotes", "unpack", "average", "fieldsToPlanes"} <= set(before):
        failures.append("rows missing from the table: %s" % before)
    figures = os.path.join(d, "figures.txt")
    with open(figures, "w") as f:
        f.write("# kernel_bench header\n"
                "  sumVotes 8 slots -> 4 planes [word]   402.7  348.5 1155.2 3944.5 0.29\n"
                "WINNER sumVotes 2 pair-batch8 mean=0.910 min=0.880 default=0 default_mean=0.290\n"
                "WINNER unpack 1 chunk-x2 mean=0.810 min=0.790 default=0 default_mean=0.800\n"
                "WINNER average 0 vector mean=0.370 min=0.140 default=0 default_mean=0.370\n"
                "WINNER fieldsToPlanes 3 thread-block-gather mean=0.900 min=0.850 default=0 default_mean=0.040\n")
    r = run(figures, "--table", table)
    if r.returncode != 0 or defaults(table) != before:
        failures.append("without --apply: rc %d, table %s\n%s" % (r.returncode, defaults(table), r.stderr))
    r = run(figures, "--table", table, "--apply")
    want = dict(before, sumVotes=2, fieldsToPlanes=3)
    if r.returncode != 0 or defaults(table) != want:
        failures.append("--apply: rc %d, table %s, want %s\n%s%s" % (r.returncode, defaults(table), want, r.stdout,
                                                                     r.stderr))
    r = run(figures, "--table", table, "--apply", "--margin=0.7")  # only fieldsToPlanes gains that much
    if r.returncode != 0 or defaults(table) != want:
        failures.append("--apply again: rc %d, table %s" % (r.returncode, defaults(table)))
    empty = os.path.join(d, "empty.txt")
    with open(empty, "w") as f:
        f.write("# kernel_bench: no CUDA device; nothing measured\n")
    r = run(empty, "--table", table, "--apply")
    if r.returncode == 0 or "no WINNER lines" not in r.stderr:
        failures.append("a file without WINNER lines: rc %d, %s" % (r.returncode, r.stderr))

for f in failures:
    print("FAIL: " + f)
if failures:
    sys.exit(1)
print("PASS: winners applied past the margin only, and only with --apply")
