"""signlion.torch.DistributedLion(delay=1), the one-step-delayed vote, CPU tensors, gloo
process groups of 2 and 3 spawned ranks, bit for bit against the NumPy Lion of
test_torch_lion.py split in its two halves (reference_vote, reference_apply):
 1. step t applies the vote of step t-1 with step t's lr and weight decay, step 1 applies
    nothing, the momentum moves at once; over mavo, average, global and local, fp32 and bf16,
    bucket caps (one bucket per parameter, the default), overlap on and off, an lr schedule, a
    gradient missing on one rank (it votes as zero) and zero_grad between steps; every rank's
    parameters identical; the same steps applying the current vote (delay=0's rule) would
    differ, so the comparison can tell the two apart;
 2. resume: 2K steps equal K steps + state_dict + a new optimizer + load_state_dict + K steps
    bit for bit, the vote in flight carried by state[p]["delayed_update"];
 3. arguments: delay=2, -1, True, 0.5 and "1" raise ValueError naming delay; so do the options it
    does not take (master_weights, skip_nonfinite, average with bf16 parameters); maximize
    equals negated gradients; close() with a vote in flight returns and drops it;
 4. a process that exits with a vote (or any background call) still running, its optimizer never
    closed, exits cleanly once the call is done: it aborted when the interpreter finalized while
    the daemon thread was inside a torch call ("terminate called without an active exception")."""
import io
import os
import subprocess
import sys
import threading
import time
import unittest

try:
    import numpy as np
    import torch
    import torch.distributed as dist
    import spawn_ranks
    from test_torch_lion import LR, WD, grads_of, make_model, reference_apply, reference_vote
    from test_torch_lion_api import assert_same_on_all_ranks, expect_value_error, new_reference
    HAVE_TORCH = True
except ImportError as e:  # pragma: no cover
    HAVE_TORCH, WHY = False, str(e)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

STEPS = 5


def lr_at(step):
    """A schedule: the lr of step `step` (0-based), read by step() when it applies."""
    return LR * (1.0 + 0.25 * step)


def give_grads(params, rank, step):
    """This rank's gradients of a step; at step 2 parameter 1 has none on rank 0."""
    grads = grads_of(rank, step, [p.shape for p in params])
    for i, (p, g) in enumerate(zip(params, grads)):
        if step == 2 and i == 1 and rank == 0:
            p.grad = None
            grads[i] = torch.zeros_like(g)  # what the delayed vote uses for a missing gradient
        else:
            p.grad = g.to(p.dtype)
    return grads


def assert_equals_reference(params, ref, what):
    for i, p in enumerate(params):
        want = torch.from_numpy(ref["p"][i]).to(p.dtype)
        assert torch.equal(p.detach(), want), "%s: parameter %d differs from the delayed reference" % (what, i)


def check_matches_delayed_reference(rank, world):
    from signlion.torch import DistributedLion
    for aggregation in ("mavo", "average", "global", "local"):
        for overlap in (True, False):
            for cap in (1e-6, 25.0):
                what = "%s overlap=%s bucket_cap_mb=%g" % (aggregation, overlap, cap)
                params = make_model(torch.float32 if aggregation == "average" else torch.bfloat16)
                ref, now = new_reference(params), new_reference(params)  # delayed and current-vote rules
                opt = DistributedLion(params, lr=LR, weight_decay=WD, aggregation=aggregation, overlap=overlap,
                                      bucket_cap_mb=cap, delay=1)
                pending = None
                differed = False
                for step in range(STEPS):
                    for g in opt.param_groups:
                        g["lr"] = lr_at(step)
                    grads = give_grads(params, rank, step)
                    opt.step()
                    opt.zero_grad(set_to_none=(step % 2 == 0))
                    if pending is not None:
                        reference_apply(ref, pending, lr_at(step), WD)
                    pending = reference_vote(ref, grads, rank, world, aggregation)
                    reference_apply(now, reference_vote(now, grads, rank, world, aggregation), lr_at(step), WD)
                    assert_equals_reference(params, ref, "%s, step %d" % (what, step))
                    differed = differed or any(not np.array_equal(a, b) for a, b in zip(ref["p"], now["p"]))
                    state = opt.state
                    for i, p in enumerate(params):
                        assert np.array_equal(state[p]["exp_avg"].numpy(), ref["m"][i]), \
                            "%s, step %d: momentum %d is not m_t" % (what, step, i)
                        assert np.array_equal(state[p]["delayed_update"].numpy(), pending[i]), \
                            "%s, step %d: the vote in flight of parameter %d" % (what, step, i)
                assert differed, "%s: the delayed and the current-vote rules gave the same parameters" % what
                if aggregation != "local":
                    assert_same_on_all_ranks(params, world, what)
                opt.close()


def check_resume_exact(rank, world):
    from signlion.torch import DistributedLion
    K = 3

    def train(params, opt, steps):
        for step in steps:
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            give_grads(params, rank, step)
            opt.step()

    for overlap in (True, False):
        kw = dict(lr=LR, weight_decay=WD, aggregation="mavo", overlap=overlap, delay=1, momentum_average_every=2)
        straight = make_model()
        opt = DistributedLion(straight, **kw)
        train(straight, opt, range(2 * K))

        first = make_model()
        opt1 = DistributedLion(first, **kw)
        train(first, opt1, range(K))
        blob = io.BytesIO()
        torch.save({"model": [p.detach().clone() for p in first], "opt": opt1.state_dict()}, blob)
        opt1.close()
        blob.seek(0)
        saved = torch.load(blob)
        resumed = make_model()
        with torch.no_grad():
            for p, s in zip(resumed, saved["model"]):
                p.copy_(s)
        opt2 = DistributedLion(resumed, **kw)
        opt2.load_state_dict(saved["opt"])
        train(resumed, opt2, range(K, 2 * K))
        for i, (a, b) in enumerate(zip(straight, resumed)):
            assert torch.equal(a.detach(), b.detach()), "overlap=%s: resumed parameter %d differs" % (overlap, i)
        sa, sb = opt.state_dict()["state"], opt2.state_dict()["state"]
        for i in sa:
            for k in ("exp_avg", "delayed_update", "step"):
                assert torch.equal(sa[i][k], sb[i][k]), "overlap=%s: state %s of parameter %d differs" % (
                    overlap, k, i)
        assert_same_on_all_ranks(resumed, world, "resumed")
        opt.close()
        opt2.close()
    expect_value_error(lambda: DistributedLion(make_model(), aggregation="average", delay=1), "delay=1",
                       "average", "bfloat16")


def run_ranks(world, scenario):
    spawn_ranks.run_gloo_ranks(world, "test_torch_lion_delay", scenario)


@unittest.skipUnless(HAVE_TORCH, "torch is not importable")
class Delay(unittest.TestCase):
    def test_matches_delayed_reference_world2(self):
        run_ranks(2, "check_matches_delayed_reference")

    def test_matches_delayed_reference_world3(self):
        run_ranks(3, "check_matches_delayed_reference")

    def test_resume_exact_world2(self):
        run_ranks(2, "check_resume_exact")

    def test_arguments_checked(self):
        from signlion.torch import DistributedLion
        for bad in (2, -1, True, 0.5, "1"):
            expect_value_error(lambda: DistributedLion(make_model(), aggregation="local", delay=bad), "delay",
                               repr(bad))
        expect_value_error(lambda: DistributedLion(make_model(), aggregation="local", delay=1, master_weights=True),
                           "delay=1", "master_weights")
        expect_value_error(lambda: DistributedLion(make_model(), aggregation="local", delay=1, skip_nonfinite=True),
                           "delay=1", "skip_nonfinite")

    def test_maximize_and_close(self):
        from signlion.torch import DistributedLion
        a, b = make_model(), make_model()
        opt_a = DistributedLion(a, lr=LR, weight_decay=WD, aggregation="local", delay=1, maximize=True)
        opt_b = DistributedLion(b, lr=LR, weight_decay=WD, aggregation="local", delay=1)
        for step in range(3):
            for pa, pb, g in zip(a, b, grads_of(0, step, [p.shape for p in a])):
                pa.grad, pb.grad = g.to(pa.dtype), (-g).to(pb.dtype)
            opt_a.step()
            opt_b.step()
        self.assertTrue(all(torch.equal(x, y) for x, y in zip(a, b)))
        before = [p.detach().clone() for p in a]
        opt_a.close()  # the vote in flight is dropped, unapplied
        self.assertTrue(all(torch.equal(x, p.detach()) for x, p in zip(before, a)))
        self.assertRaises(RuntimeError, opt_a.step)
        opt_b.close()

    def test_next_vote_starts_before_the_apply(self):
        """step() queues step t's vote behind step t-1's before it waits for and applies step
        t-1's, so the link never idles while a step applies; with the parameters still equal to
        those of the same steps taken with the wait before the start (checked against the
        NumPy reference by the tests above)."""
        from signlion.torch import DistributedLion
        model = make_model()
        opt = DistributedLion(model, lr=LR, weight_decay=WD, aggregation="local", delay=1)
        events = []
        submit, apply = opt._executor.submit, opt._apply_delayed
        opt._executor.submit = lambda *a: (events.append("start"), submit(*a))[1]
        opt._apply_delayed = lambda *a: (events.append("apply"), apply(*a))[1]
        for step in range(3):
            for p, g in zip(model, grads_of(0, step, [p.shape for p in model])):
                p.grad = g.to(p.dtype)
            events.append("step")
            opt.step()
        buckets = len(opt._buckets)
        opt.close()
        self.assertGreater(buckets, 1)
        want = (["step"] + ["start"] * buckets
                + (["step"] + ["start"] * buckets + ["apply"] * buckets) * 2)
        self.assertEqual(events, want)

    def _run_to_exit(self, script, timeout_s, hang_message):
        """Runs script in a fresh interpreter; fails with hang_message if it has not exited
        within timeout_s, or if it exited with a non-zero status."""
        try:
            run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.fail(hang_message)
        self.assertEqual(run.returncode, 0, run.stderr[-2000:])
        return run

    def test_submit_after_the_exit_hook_runs_inline(self):
        """An exit handler that runs after signlion's (registered before signlion was imported)
        and submits a call gets it run on its own thread: it was queued for a worker already
        stopped, and its wait() never returned."""
        python_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
        script = """
import atexit, sys
executor, got = [], []
def late():
    executor[0].submit(got.append, 42).wait()  # its worker was stopped by signlion's hook
    print("late call:", got, flush=True)
atexit.register(late)  # before the import: runs after signlion's exit hook
sys.path.insert(0, %r)
from signlion.background import SerialExecutor
executor.append(SerialExecutor("early"))
executor[0].submit(lambda: None).wait()
""" % python_dir
        run = self._run_to_exit(script, 30, "the late call never ran: the process hung at exit")
        self.assertIn("late call: [42]", run.stdout)

    def test_exit_with_calls_in_flight(self):
        python_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
        script = """
import sys, time
sys.path.insert(0, %r)
import torch
from signlion.background import SerialExecutor
from signlion.torch import DistributedLion

def busy():  # a torch call in flight when the main thread reaches the end of the script
    a = torch.randn(256, 256)
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        a = torch.tanh(a @ a)
    print("background call finished", flush=True)

opt = DistributedLion([torch.nn.Parameter(torch.randn(1 << 20))], aggregation="local", delay=1)
for _ in range(2):
    for p in opt.param_groups[0]["params"]:
        p.grad = torch.randn_like(p)
    opt.step()  # leaves its vote in flight on the optimizer's thread; never closed
SerialExecutor("busy").submit(busy)
time.sleep(0.05)
""" % python_dir
        for attempt in range(3):
            with self.subTest(attempt=attempt):
                run = self._run_to_exit(script, 120, "the process hung at exit")
                self.assertIn("background call finished", run.stdout)
                self.assertNotIn("terminate called", run.stderr)

    def test_exit_is_bounded_by_the_communicators_timeout(self):
        """A call on the optimizer's thread that never returns holds the exit for two of the
        communicator's timeouts and 10 s, then the process exits naming the thread (it waited
        for the call forever before)."""
        python_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
        script = """
import os, sys, tempfile, time
sys.path.insert(0, %r)
import torch, torch.distributed as dist
from signlion.torch import DistributedLion
store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
dist.init_process_group("gloo", store=store, rank=0, world_size=1)
opt = DistributedLion([torch.nn.Parameter(torch.randn(64))], timeout=1, overlap=True)
opt._executor.submit(time.sleep, 600)  # a call that does not return before the test gives up
print("submitted", flush=True)
""" % python_dir
        start = time.monotonic()
        run = self._run_to_exit(script, 90, "the process waited for the stuck call at exit past its bound")
        self.assertIn("submitted", run.stdout)
        self.assertIn("thread 'signlion-lion-steps' was still inside a call after 12 s", run.stderr)
        self.assertIn("exits without waiting", run.stderr)
        self.assertGreaterEqual(time.monotonic() - start, 12.0)  # it did wait for its bound first

    def test_exit_timeout_checked(self):
        from signlion.background import SerialExecutor
        for bad in (float("inf"), float("nan"), -1, True, "1", [1]):
            with self.assertRaisesRegex(ValueError, "exit_timeout"):
                SerialExecutor("x", exit_timeout=bad)
        self.assertEqual(SerialExecutor("x", exit_timeout=2)._exit_timeout, 2.0)
        self.assertEqual(SerialExecutor("x", exit_timeout=1e300)._exit_timeout, threading.TIMEOUT_MAX)


if __name__ == "__main__":
    unittest.main()
