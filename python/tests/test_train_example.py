"""examples/train.py under torchrun (python -m torch.distributed.run), 2 ranks on loopback:
the ranks end with identical parameters, and a run of 2K steps equals, bit for bit on every
rank, a run of K steps that checkpoints, then a --resume that runs the other K; with
signlion's overlap off and, where DistributedLion takes overlap=, on. --resume refuses a
checkpoint of other run settings, --keep K leaves the K newest checkpoints, --clip-grad-norm
runs (and changes the result), --amp is refused on CPU and runs on CUDA where a GPU is, --trace
writes each rank's step timeline (and changes nothing) and is refused for a contender other than
signlion.

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

    def torchrun(self, *args, ok=True, ranks=2):
        """train.py's output; ok: it must succeed with identical ranks, else it must fail."""
        env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
        env.pop("SIGNLION_SOCKET_IFNAME", None)  # signlion follows GLOO_SOCKET_IFNAME
        cmd = TORCHRUN + ["--master_port", str(free_port()), "--nproc_per_node", str(ranks),
                          os.path.join(ROOT, "examples", "train.py")] + COMMON + list(args)
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
        print(p.stdout[-3000:])
        if not ok:
            self.assertNotEqual(p.returncode, 0, "torchrun %s succeeded" % " ".join(args))
            return p.stdout
        self.assertEqual(p.returncode, 0, "torchrun %s exited %d" % (" ".join(args), p.returncode))
        self.assertIn("parameters identical on all %d ranks" % ranks, p.stdout)
        return p.stdout

    def train_py(self, *args):
        """train.py without torchrun (its options are checked before it looks for torchrun's
        environment): (exit status, output)."""
        p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "train.py")] + list(args),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        print(p.stdout[-2000:])
        return p.returncode, p.stdout

    def checkpoint_files(self, ckpt):
        return sorted(n for n in os.listdir(ckpt) if n != "LATEST")

    def params(self, prefix):
        return [torch.load("%s.rank%d" % (prefix, r)) for r in range(2)]

    def check_resume_exact(self, optimizer, overlap, *more):
        whole = os.path.join(self.tmp, "whole")
        parts = os.path.join(self.tmp, "parts")
        ckpt = os.path.join(self.tmp, "ckpt")
        opts = ["--optimizer", optimizer, "--overlap", overlap] + list(more)
        self.torchrun(*opts, "--steps", str(STEPS), "--save-params", whole)
        self.torchrun(*opts, "--steps", str(STEPS // 2), "--ckpt-dir", ckpt, "--ckpt-every", str(STEPS // 2))
        with open(os.path.join(ckpt, "LATEST")) as f:
            self.assertEqual(f.read().strip(), str(STEPS // 2))
        # the options that do not change the run may differ: --overlap too (the same parameters
        # bit for bit on or off)
        resumed = list(opts)
        if optimizer.startswith("signlion") and not more and overlap_supported():
            resumed[resumed.index("--overlap") + 1] = "off" if overlap == "on" else "on"
        out = self.torchrun(*resumed, "--steps", str(STEPS), "--ckpt-dir", ckpt, "--resume", "--save-params", parts,
                            "--log-every", "3", "--keep", "5", "--eval-every", "2")
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

    def test_signlion_resume_exact_delay(self):
        """--delay 1: the vote in flight at the checkpoint is in it; --delay 1 is refused for DDP."""
        self.check_resume_exact("signlion-mavo", "off", "--delay", "1")
        rc, out = self.train_py("--optimizer", "ddp-lion", "--delay", "1")
        self.assertEqual(rc, 2)
        self.assertIn("--delay 1", out)

    def test_ddp_lion_resume_exact(self):
        self.check_resume_exact("ddp-lion", "off")

    def test_resume_refuses_other_settings(self):
        """A folder holding another run's checkpoint: --resume with other settings is refused,
        naming the setting, and so is a run without --resume; the checkpoint is left as it was."""
        ckpt = os.path.join(self.tmp, "ckpt")
        self.torchrun("--optimizer", "ddp-lion", "--steps", "2", "--ckpt-dir", ckpt, "--ckpt-every", "2")
        files = self.checkpoint_files(ckpt)
        out = self.torchrun("--optimizer", "ddp-lion", "--steps", "4", "--ckpt-dir", ckpt, "--resume",
                            "--lr", "0.0002", ok=False)
        self.assertIn("train.py: --resume refused: the checkpoint of step 2 in %s" % ckpt, out)
        self.assertIn("--lr was 0.0001 and is 0.0002 now", out)
        self.assertNotIn("steps 2..4", out)
        out = self.torchrun("--optimizer", "ddp-lion", "--steps", "4", "--ckpt-dir", ckpt, "--resume",
                            "--clip-grad-norm", "1", ok=False)
        self.assertIn("--clip-grad-norm was None and is 1.0 now", out)
        out = self.torchrun("--optimizer", "ddp-lion", "--steps", "4", "--ckpt-dir", ckpt, "--ckpt-every", "2",
                            ok=False)
        self.assertIn("train.py: --ckpt-dir %s holds the checkpoints of an earlier run (steps 2)" % ckpt, out)
        self.assertEqual(self.checkpoint_files(ckpt), files)

    def test_resume_refuses_a_folder_no_step_is_complete_in(self):
        """--resume where some ranks hold checkpoints but no step's is complete on every rank (a
        rank's files lost, or a run of another rank count) is refused on every rank, naming each
        rank's steps, and the files are left as they were (starting over would overwrite them and
        --keep delete them); an empty folder starts the run at step 0."""
        ckpt = os.path.join(self.tmp, "ckpt")
        out = self.torchrun("--optimizer", "ddp-lion", "--steps", "2", "--ckpt-dir", ckpt, "--ckpt-every", "2",
                            "--resume")
        self.assertIn("steps 0..2", out)
        files = self.checkpoint_files(ckpt)
        self.assertEqual(files, ["step00000002-rank0.pt", "step00000002-rank1.pt"])
        out = self.torchrun("--optimizer", "ddp-lion", "--steps", "4", "--ckpt-dir", ckpt, "--ckpt-every", "2",
                            "--resume", ranks=3, ok=False)
        self.assertIn("train.py: --resume refused: no step's checkpoint in %s is complete on all 3 ranks "
                      "(rank 0: 2; rank 1: 2; rank 2: none)" % ckpt, out)
        self.assertNotIn("steps 0..4", out)
        self.assertEqual(self.checkpoint_files(ckpt), files)
        os.remove(os.path.join(ckpt, "step00000002-rank1.pt"))
        out = self.torchrun("--optimizer", "ddp-lion", "--steps", "4", "--ckpt-dir", ckpt, "--ckpt-every", "2",
                            "--resume", ok=False)
        self.assertIn("is complete on all 2 ranks (rank 0: 2; rank 1: none)", out)
        self.assertNotIn("steps 0..4", out)
        self.assertEqual(self.checkpoint_files(ckpt), ["step00000002-rank0.pt"])

    def test_keep_last_k(self):
        """--keep 2 with a checkpoint every step leaves the 2 newest of every rank, also after
        --resume."""
        ckpt = os.path.join(self.tmp, "ckpt")
        opts = ["--optimizer", "ddp-lion", "--ckpt-dir", ckpt, "--ckpt-every", "1", "--keep", "2"]
        self.torchrun(*opts, "--steps", "4")
        self.assertEqual(self.checkpoint_files(ckpt), ["step%08d-rank%d.pt" % (s, r) for s in (3, 4) for r in (0, 1)])
        out = self.torchrun(*opts, "--steps", "6", "--resume")
        self.assertIn("steps 4..6", out)
        self.assertEqual(self.checkpoint_files(ckpt), ["step%08d-rank%d.pt" % (s, r) for s in (5, 6) for r in (0, 1)])

    def test_keep_one_after_interrupted_save(self):
        """--keep 1 and a save of step 5 cut short (rank 0's file renamed into place, rank 1's
        still a .tmp): --resume continues from step 4, ends as an uninterrupted run does, and its
        saves remove the leftovers."""
        ckpt = os.path.join(self.tmp, "ckpt")
        whole = os.path.join(self.tmp, "whole")
        parts = os.path.join(self.tmp, "parts")
        opts = ["--optimizer", "ddp-lion", "--ckpt-dir", ckpt, "--keep", "1"]
        self.torchrun("--optimizer", "ddp-lion", "--steps", "6", "--save-params", whole)
        self.torchrun(*opts, "--steps", "4", "--ckpt-every", "2")
        self.assertEqual(self.checkpoint_files(ckpt), ["step00000004-rank0.pt", "step00000004-rank1.pt"])
        shutil.copy(os.path.join(ckpt, "step00000004-rank0.pt"), os.path.join(ckpt, "step00000005-rank0.pt"))
        with open(os.path.join(ckpt, "step00000005-rank1.pt.tmp"), "wb") as f:
            f.write(b"cut short")
        out = self.torchrun(*opts, "--steps", "6", "--ckpt-every", "2", "--resume", "--save-params", parts)
        self.assertIn("steps 4..6", out)
        self.assertEqual(self.checkpoint_files(ckpt), ["step00000006-rank0.pt", "step00000006-rank1.pt"])
        for rank, (a, b) in enumerate(zip(self.params(whole), self.params(parts))):
            for i, (x, y) in enumerate(zip(a, b)):
                self.assertTrue(torch.equal(x, y), "rank %d, parameter %d: the resumed run differs" % (rank, i))

    def test_keep_zero_refused(self):
        for k in ("0", "-1"):
            rc, out = self.train_py("--keep", k)
            self.assertEqual(rc, 2)
            self.assertIn("--keep %s: the checkpoints to keep must be 1 or more" % k, out)

    def check_clip_grad_norm(self, optimizer, overlap, compare):
        """--clip-grad-norm: the ranks end identical; compare: and unlike a run without it (the
        clipping happened)."""
        clipped = os.path.join(self.tmp, "clipped")
        plain = os.path.join(self.tmp, "plain")
        opts = ["--optimizer", optimizer, "--overlap", overlap, "--steps", "4"]
        out = self.torchrun(*opts, "--clip-grad-norm", "0.01", "--save-params", clipped)
        self.assertIn("clip-grad-norm 0.01", out)
        if not compare:
            return
        self.torchrun(*opts, "--save-params", plain)
        a, b = self.params(clipped), self.params(plain)
        self.assertFalse(all(torch.equal(x, y) for x, y in zip(a[0], b[0])),
                         "--clip-grad-norm 0.01 left the parameters those of a run without it")

    def test_clip_grad_norm_signlion_overlap_off(self):
        self.check_clip_grad_norm("signlion-mavo", "off", compare=True)

    def test_clip_grad_norm_signlion_overlap_on(self):
        """With overlap on, the clipped gradient is what every step uses: the parameters are
        those of overlap off, bit for bit."""
        if not overlap_supported():
            self.skipTest("this signlion's DistributedLion has no overlap argument")
        self.check_clip_grad_norm("signlion-mavo", "on", compare=False)
        on = self.params(os.path.join(self.tmp, "clipped"))
        self.check_clip_grad_norm("signlion-mavo", "off", compare=False)
        off = self.params(os.path.join(self.tmp, "clipped"))
        self.assertTrue(all(torch.equal(x, y) for x, y in zip(on[0], off[0])),
                        "--clip-grad-norm with overlap on stepped differently from overlap off")

    def test_clip_grad_norm_ddp_lion(self):
        self.check_clip_grad_norm("ddp-lion", "off", compare=True)

    def test_trace(self):
        """--trace FILE: each rank writes FILE with .rank<r> before the extension, a Chrome trace of
        the steps after the warm-up with every bucket's span per step; the parameters are those of
        a run without it. Refused for a DDP contender."""
        import json
        traced, plain = os.path.join(self.tmp, "traced"), os.path.join(self.tmp, "plain")
        trace = os.path.join(self.tmp, "trace.json")
        opts = ["--optimizer", "signlion-mavo", "--steps", str(STEPS)]
        out = self.torchrun(*opts, "--trace", trace, "--trace-warmup", "2", "--trace-steps", "3",
                            "--save-params", traced)
        self.assertIn("trace of steps 3..5 written to %s" % os.path.join(self.tmp, "trace.rank0.json"), out)
        self.torchrun(*opts, "--save-params", plain)
        for x, y in zip(self.params(traced)[0], self.params(plain)[0]):
            self.assertTrue(torch.equal(x, y), "--trace changed the parameters")
        for rank in range(2):
            with open(os.path.join(self.tmp, "trace.rank%d.json" % rank)) as f:
                events = json.load(f)["traceEvents"]
            spans = [e for e in events if e["ph"] == "X"]
            self.assertTrue(spans and all(e["pid"] == rank for e in spans))
            buckets = {e["args"]["bucket"] for e in spans if e["name"].startswith("bucket ")}
            self.assertTrue(buckets)
            for step in range(3):
                got = sorted(e["args"]["bucket"] for e in spans
                             if e["name"].startswith("bucket ") and e["args"]["step"] == step)
                self.assertEqual(got, sorted(buckets), "rank %d, traced step %d" % (rank, step))
            self.assertEqual(sorted({e["args"]["step"] for e in spans}), [0, 1, 2])
        rc, out = self.train_py("--optimizer", "ddp-lion", "--trace", trace)
        self.assertEqual(rc, 2)
        self.assertIn("--trace records signlion's DistributedLion", out)

    def test_amp_refused_on_cpu(self):
        for amp in (["--amp"], ["--amp", "bf16"]):
            rc, out = self.train_py(*amp)
            self.assertEqual(rc, 2)
            self.assertIn("--amp is for --device cuda", out)
            self.assertIn("this run's device is cpu: run it without --amp", out)

    def test_amp_cuda(self):
        """--amp (fp16, GradScaler) with --clip-grad-norm and --amp bf16 on CUDA, DDP + Lion and,
        where signlion's CUDA path runs (PyTorch 2.8), Distributed Lion with overlap off and on: one rank
        per GPU, at most 2, the ranks identical at the end."""
        if not torch.cuda.is_available():
            self.skipTest("no CUDA GPU here")
        ranks = min(2, torch.cuda.device_count())
        contenders = ["ddp-lion"]
        if tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 8):
            contenders.append("signlion-mavo")
        for optimizer in contenders:
            for overlap in (("off", "on") if optimizer.startswith("signlion") else ("off",)):
                for amp, opts in (("fp16", ["--amp", "--clip-grad-norm", "1.0"]), ("bf16", ["--amp", "bf16"])):
                    out = self.torchrun("--device", "cuda", "--optimizer", optimizer, "--overlap", overlap,
                                        "--steps", "4", *opts, ranks=ranks)
                    self.assertIn("amp %s" % amp, out)


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
