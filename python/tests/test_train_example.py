"""examples/train.py under torchrun (python -m torch.distributed.run), 2 ranks on loopback:
the ranks end with identical parameters, and a run of 2K steps equals, bit for bit on every
rank, a run of K steps that checkpoints, then a --resume that runs the other K; with
signlion's overlap off and, where DistributedLion takes overlap=, on.

  test_train_example.py [CASE...]    (SIGNLION_LIBRARY: the library to test)
Exit 77 (skipped) when torch or torchrun cannot run here."""
import inspect
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))

try:
    import torch
except ImportError:
    print("SKIP: torch is not importable")
    sys.exit(77)

# Debian 12's torch 1.13 under Python 3.11: torchrun's default "--redirects 0" / "--tee 0" parse
# to None (Python 3.11 no longer lists an IntFlag's zero member) and the launch fails; a mapping
# for a local rank that does not exist leaves every rank on the console, as the default means.
# The static rendezvous (--master_addr/--master_port, one node): the c10d one of --standalone lost
# its store connection once ("Broken pipe") on the loaded test machine.
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--redirects", "9:0", "--tee", "9:0", "--nnodes", "1",
            "--master_addr", "127.0.0.1"]
STEPS = 6
COMMON = ["--workload", "mlp", "--width", "256", "--batch", "16", "--val-size", "64", "--log-every", "2",
          "--threads", "1"]


def free_port():
    """A port no one listens on now (the kernel's pick; closed again for torchrun to take)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def overlap_supported():
    from signlion.torch import DistributedLion
    return "overlap" in inspect.signature(DistributedLion).parameters


class TrainExample(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="signlion-train-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def torchrun(self, *args):
        env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
        env.pop("SIGNLION_SOCKET_IFNAME", None)  # signlion follows GLOO_SOCKET_IFNAME
        cmd = TORCHRUN + ["--master_port", str(free_port()), "--nproc_per_node", "2", os.path.join(ROOT, "examples", "train.py")] + COMMON + list(args)
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
        print(p.stdout[-3000:])
        self.assertEqual(p.returncode, 0, "torchrun %s exited %d" % (" ".join(args), p.returncode))
        self.assertIn("parameters identical on all 2 ranks", p.stdout)
        return p.stdout

    def params(self, prefix):
        return [torch.load("%s.rank%d" % (prefix, r)) for r in range(2)]

    def check_resume_exact(self, optimizer, overlap):
        whole = os.path.join(self.tmp, "whole")
        parts = os.path.join(self.tmp, "parts")
        ckpt = os.path.join(self.tmp, "ckpt")
        opts = ["--optimizer", optimizer, "--overlap", overlap]
        self.torchrun(*opts, "--steps", str(STEPS), "--save-params", whole)
        self.torchrun(*opts, "--steps", str(STEPS // 2), "--ckpt-dir", ckpt, "--ckpt-every", str(STEPS // 2))
        with open(os.path.join(ckpt, "LATEST")) as f:
            self.assertEqual(f.read().strip(), str(STEPS // 2))
        out = self.torchrun(*opts, "--steps", str(STEPS), "--ckpt-dir", ckpt, "--resume", "--save-params", parts)
        self.assertIn("steps %d..%d" % (STEPS // 2, STEPS), out)
        a, b = self.params(whole), self.params(parts)
        for rank in range(2):
            for i, (x, y) in enumerate(zip(a[rank], b[rank])):
                self.assertTrue(torch.equal(x, y), "rank %d, parameter %d: the resumed run differs" % (rank, i))
        for i, (x, y) in enumerate(zip(a[0], a[1])):
            self.assertTrue(torch.equal(x, y), "parameter %d differs between the ranks" % i)

    def test_signlion_resume_exact_overlap_off(self):
        self.check_resume_exact("signlion-mavo", "off")

    def test_signlion_resume_exact_overlap_on(self):
        if not overlap_supported():
            self.skipTest("this signlion's DistributedLion has no overlap argument")
        self.check_resume_exact("signlion-mavo", "on")

    def test_ddp_lion_resume_exact(self):
        self.check_resume_exact("ddp-lion", "off")


if __name__ == "__main__":
    try:
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--help"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    except (subprocess.CalledProcessError, OSError) as e:
        print("SKIP: torchrun cannot run here: %s" % e)
        sys.exit(77)
    prog = unittest.main(exit=False, argv=[sys.argv[0], "-v"] + sys.argv[1:])
    res = prog.result
    if res.testsRun and len(res.skipped) == res.testsRun:
        sys.exit(77)
    sys.exit(0 if res.wasSuccessful() else 1)
