"""Ranks as processes (sign_allreduce_perf --rank/--nranks/--id-file on
loopback) whose environments differ: ncclSignCommInitRank compares the
settings that every rank must share and fails on every rank, naming the
variable that differs in its own units; settings that come out the same
(a bad value that falls back to the default) agree and run.
    settings_agree_test.py PATH/TO/sign_allreduce_perf"""
import os
import subprocess
import sys
import tempfile
import time

BIN = sys.argv[1]
ENV = {k: v for k, v in os.environ.items() if not k.startswith("SIGNLION_")}  # only what each case sets
ENV["SIGNLION_SOCKET_IFNAME"] = "lo"
ARGS = ["-b", "4K", "-e", "4K", "-n", "1", "-w", "0", "-c", "1", "-T", "20"]
failures = []


def two_ranks(env0, env1):
    """Runs rank 0 with env0 and rank 1 with env1 added; returns [(rc, stderr + stdout)] per rank."""
    with tempfile.TemporaryDirectory() as d:
        idf = os.path.join(d, "id")
        procs = []
        for r, extra in enumerate((env0, env1)):
            procs.append(subprocess.Popen([BIN, "--rank", str(r), "--nranks", "2", "--id-file", idf] + ARGS,
                                          env=dict(ENV, **extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
        results = []
        try:
            for p in procs:
                out, err = p.communicate(timeout=60)
                results.append((p.returncode, err + out))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        # Rank 0 removes the id file, also when its init failed: the next run starts clean.
        if os.path.exists(idf):
            raise AssertionError("%s left after the run" % idf)
        return results


def case(name, env0, env1, agree, needles=()):
    t0 = time.monotonic()
    try:
        res = two_ranks(env0, env1)
        for r, (rc, text) in enumerate(res):
            if agree:
                if rc != 0:
                    raise AssertionError("rank %d exit %d, expected a run:\n%s" % (r, rc, text[-1500:]))
            else:
                if rc == 0:
                    raise AssertionError("rank %d ran, expected its init to fail" % r)
                missing = [n for n in needles if n not in text]
                if missing:
                    raise AssertionError("rank %d: no %s in:\n%s" % (r, missing, text[-1500:]))
        print("ok   %-40s (%.1f s)" % (name, time.monotonic() - t0))
    except Exception as e:  # report every case, then fail
        failures.append(name)
        print("FAIL %-40s\n     %s" % (name, e))


# The variable that differs, in its own units (the WARN printed every cost
# parameter in microseconds, unnamed).
case("COST_ALPHA_NS differs", {"SIGNLION_COST_ALPHA_NS": "5000"}, {}, False,
     ["SIGNLION_COST_ALPHA_NS 20000, rank 0 set 5000"])
case("COST_PACK_PS differs", {}, {"SIGNLION_COST_PACK_PS": "900"}, False,
     ["SIGNLION_COST_PACK_PS 900, rank 0 set 430"])
# The link's rate is named, not the chunk it gives (the WARN said
# SIGNLION_HOST_CHUNK_BYTES, which no rank had set).
case("COST_BETA_MBPS differs", {"SIGNLION_COST_BETA_MBPS": "125"}, {}, False,
     ["SIGNLION_COST_BETA_MBPS 1250, rank 0 set 125"])
case("HOST_CHUNK_BYTES differs", {"SIGNLION_HOST_CHUNK_BYTES": "65536"}, {}, False,
     ["SIGNLION_HOST_CHUNK_BYTES", "524288, rank 0 set 65536"])
case("HOST_SEGMENT differs", {"SIGNLION_HOST_SEGMENT": "4096"}, {}, False,
     ["SIGNLION_HOST_SEGMENT", "33554432, rank 0 set 4096"])
# What the ranks run is compared, not what they wrote: 0 is no segment (the
# default, with a WARN) and 100 is 64 elements, as 127 is.
case("HOST_SEGMENT 0 and unset agree", {"SIGNLION_HOST_SEGMENT": "0"}, {}, True)
case("HOST_SEGMENT 100 and 127 agree", {"SIGNLION_HOST_SEGMENT": "100"}, {"SIGNLION_HOST_SEGMENT": "127"}, True)
# Field-sum's width shapes the words the ranks add: 3-bit fields against
# 4-bit ones returned wrong sums with success on small calls, or a byte
# count error naming nothing on larger ones. The width is compared whatever
# the algorithm (auto may pick field-sum), as the setting and what it gives.
FS = {"SIGNLION_ALGO": "fieldsum"}
case("FIELD_BITS differs (fieldsum)", dict(FS, SIGNLION_FIELD_BITS="3"), dict(FS, SIGNLION_FIELD_BITS="4"), False,
     ["SIGNLION_FIELD_BITS 4 (4-bit fields), rank 0 set 3 (3-bit fields)"])
case("FIELD_BITS differs (auto)", {"SIGNLION_FIELD_BITS": "8"}, {}, False,
     ["SIGNLION_FIELD_BITS 0 (2-bit fields), rank 0 set 8 (8-bit fields)"])
# A width too narrow for 2 votes leaves field-sum out of one rank's auto only.
case("FIELD_BITS unusable on one rank", {}, {"SIGNLION_FIELD_BITS": "1"}, False,
     ["SIGNLION_FIELD_BITS 1 (no field width for these ranks), rank 0 set 0 (2-bit fields)"])
# The width is compared, not what was written: unset is 2 bits at N = 2.
case("FIELD_BITS 0 and 2 agree", dict(FS, SIGNLION_FIELD_BITS="2"), FS, True)
case("ALGO differs", {"SIGNLION_ALGO": "ring"}, {"SIGNLION_ALGO": "hd"}, False, ["algorithm", "hd, rank 0 set ring"])

if failures:
    print("FAILED: %d: %s" % (len(failures), ", ".join(failures)))
    sys.exit(1)
print("every disagreement named, every agreement run")
