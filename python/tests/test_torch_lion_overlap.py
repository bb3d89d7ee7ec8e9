"""signlion.torch.DistributedLion with overlap (each bucket's step started during backward by
gradient hooks), CPU tensors, gloo process groups of 2 and 3 spawned ranks:
 1. overlap on, overlap off and the NumPy Lion of test_torch_lion.py agree bit for bit
    (parameters and momenta) over bucket caps (a tiny one giving a bucket per parameter, the
    default, inf), aggregations (mavo, average, global), fp32/bf16/fp16, two param groups, a
    parameter unused everywhere, one with a gradient on some ranks only, zero_grad with
    set_to_none True and False, an lr change, a closure, add_param_group, and a state_dict
    round trip in the middle; master_weights, momentum_average_every, skip_nonfinite and
    maximize on vs off; a state saved with one bucket cap continues exactly under another;
 2. gradient accumulation: 3 backward passes (2 inside no_sync()) equal overlap=False's plain
    accumulation; without no_sync() the second backward raises a clear RuntimeError and
    step() refuses on every rank (nothing hangs);
 3. the overlap is real: with a slow layer at the start of the model (its backward runs last),
    every bucket but the one holding the slow layer's parameter starts (launch and run,
    recorded by launch_observer, from the second step: the first starts every bucket in step())
    before the slow layer's backward ends; a bucket holding an
    unused parameter starts in step(), and so does every bucket after it;
 4. a failed background step: step() raises naming the bucket, and every later call too.

The model gives every parameter an exact gradient through a chain of custom autograd
Functions (parameter i gets G_i, dyadic), in registration order, so that backward finishes
the parameters in reverse registration order as a network's backward does, and the
gradients are ones the reference knows exactly."""
import io
import os
import sys
import time
import unittest

try:
    import numpy as np
    import torch
    import torch.distributed as dist
    import spawn_ranks
    from test_torch_lion import LR, WD, grads_of
    from test_torch_lion_api import assert_matches, assert_same_on_all_ranks, new_reference, reference_param_step
    HAVE_TORCH = True
except ImportError as e:  # pragma: no cover
    HAVE_TORCH, WHY = False, str(e)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

if HAVE_TORCH:
    class Inject(torch.autograd.Function):
        """Identity on h; the backward gives parameter p exactly the gradient g (and sleeps
        `delay` seconds first, recording when it ends in `log`)."""

        @staticmethod
        def forward(ctx, h, p, g, delay, log):
            ctx.g, ctx.delay, ctx.log = g, delay, log
            return h.clone()

        @staticmethod
        def backward(ctx, gh):
            if ctx.delay:
                time.sleep(ctx.delay)
                ctx.log.append(("slow layer done", -1, True, time.monotonic()))
            return gh, ctx.g, None, None, None


def make_params(device="cpu"):
    """Parameters of three dtypes (bucket layouts differ by cap), all small. With
    SIGNLION_TEST_LARGE_PARAMS=1 (the pipelined runs, SIGNLION_LION_CHUNK=64) one parameter of
    each dtype spans several chunks of 64, so that every dtype's bucket is pipelined."""
    torch.manual_seed(0)
    large = os.environ.get("SIGNLION_TEST_LARGE_PARAMS") == "1"
    shapes = [((5, 7), torch.float32), ((13,), torch.float32), ((15, 20) if large else (3, 3), torch.bfloat16),
              ((300,) if large else (64,), torch.float32), ((16, 20) if large else (4, 4), torch.float16),
              ((11,), torch.bfloat16), ((6, 6), torch.float32), ((9,), torch.float32)]
    return [torch.nn.Parameter(torch.randn(s).to(dt).to(device)) for s, dt in shapes]


def backward_with(params, grads, used, delay=0.0, log=None):
    """One backward giving params[i] the gradient grads[i] where used[i] (else no gradient)."""
    h = torch.zeros((), device=params[0].device)
    for i, (p, g) in enumerate(zip(params, grads)):
        if used[i]:
            h = Inject.apply(h, p, g.to(device=p.device, dtype=p.dtype), delay if i == 0 else 0.0, log)
    h.backward()


def used_at(rank, step, n):
    """Parameter 7 is never used; parameter 1 only on rank 0 at steps 0 and 2 (and on every
    rank at steps 1 and 3); parameter 5 nowhere at step 1."""
    used = [True] * n
    used[7] = False
    used[1] = rank == 0 or step in (1, 3)
    used[5] = step != 1
    return used


def somewhere(params):
    """Per parameter, whether some rank has a gradient (the reference's own agreement)."""
    flags = torch.tensor([float(p.grad is not None) for p in params])
    dist.all_reduce(flags)
    return [f > 0 for f in flags.tolist()]


def train(rank, world, overlap, cap, aggregation, steps=4, reference=None, round_trip_at=None, **kw):
    """Trains make_params() for `steps` steps with the Inject backward; returns (params, opt).
    With a reference, checks each step against the NumPy Lion (needs kw to be plain)."""
    from signlion.torch import DistributedLion
    params = make_params()
    groups = [{"params": params[:6]}, {"params": params[6:], "lr": LR / 2}]
    opt = DistributedLion(groups, lr=LR, weight_decay=WD, aggregation=aggregation, overlap=overlap,
                          bucket_cap_mb=cap, **kw)
    ref = new_reference(params, kw.get("master_weights", False)) if reference else None
    extra = None
    for step in range(steps):
        if step == 2:
            for g in opt.param_groups:
                g["lr"] = g["lr"] * 0.5  # a schedule: read when the buckets start
        if step == 1:
            extra = torch.nn.Parameter(torch.full((10,), 0.5))
            opt.add_param_group({"params": [extra], "lr": LR})
            if ref is not None:
                ref["p"].append(extra.detach().float().numpy().copy())
                ref["m"].append(np.zeros(10, np.float32))
                ref["dtypes"].append(torch.float32)
        everything = params + ([extra] if extra is not None else [])
        grads = grads_of(rank, step, [p.shape for p in everything])
        if kw.get("skip_nonfinite") and step == 1 and rank == world - 1:
            grads[3][0] = float("nan")  # every rank skips the bucket(s) holding parameter 3
        used = used_at(rank, step, len(params)) + [True] * (len(everything) - len(params))

        def closure():
            backward_with(everything, grads, used)
            return 1.0

        if step == 3:
            assert opt.step(closure) == 1.0
        else:
            backward_with(everything, grads, used)
            opt.step()
        if ref is not None:
            lrs = [opt.param_groups[0]["lr"]] * 6 + [opt.param_groups[1]["lr"]] * 2
            lrs += [opt.param_groups[2]["lr"]] if extra is not None else []
            for i, (p, has) in enumerate(zip(everything, somewhere(everything))):
                if has:
                    g = p.grad.float() if p.grad is not None else torch.zeros(p.shape)
                    reference_param_step(ref, i, g, rank, world, aggregation, lrs[i], WD)
            what = "%s overlap=%s cap=%s step %d" % (aggregation, overlap, cap, step)
            assert_matches(everything, ref, what)
            for i, p in enumerate(everything):
                assert np.array_equal(opt.state[p]["exp_avg"].numpy(), ref["m"][i]), \
                    "%s: momentum of parameter %d differs from the reference" % (what, i)
        opt.zero_grad(set_to_none=(step % 2 == 0))
        if step == round_trip_at:  # a state_dict round trip mid-training, into a new optimizer
            blob = io.BytesIO()
            torch.save(opt.state_dict(), blob)
            blob.seek(0)
            opt.close()
            groups = [{"params": params[:6]}, {"params": params[6:], "lr": LR / 2}]
            opt = DistributedLion(groups + [{"params": [extra]}], lr=LR, weight_decay=WD, aggregation=aggregation,
                                  overlap=overlap, bucket_cap_mb=cap, **kw)
            opt.load_state_dict(torch.load(blob))
    return params + [extra], opt


def assert_identical(a, b, what):
    (pa, oa), (pb, ob) = a, b
    for i, (x, y) in enumerate(zip(pa, pb)):
        assert x.dtype == y.dtype and torch.equal(x.detach(), y.detach()), "%s: parameter %d differs" % (what, i)
    sa, sb = oa.state_dict()["state"], ob.state_dict()["state"]
    assert sorted(sa) == sorted(sb), what
    for i in sa:
        for k in sa[i]:
            assert torch.equal(sa[i][k], sb[i][k]), "%s: state %r of parameter %d differs" % (what, k, i)
    assert oa.step_counts() == ob.step_counts(), what


def check_matches_reference(rank, world):
    """Overlap on, off and the reference, over caps and aggregations."""
    tiny, default, whole = 1e-5, 25.0, float("inf")  # tiny: 10 bytes, so every parameter is a bucket
    for aggregation in ("mavo", "average", "global"):
        for cap in (tiny, default, whole):
            on = train(rank, world, True, cap, aggregation, reference=True)
            off = train(rank, world, False, cap, aggregation)
            assert_identical(on, off, "%s cap %s: overlap on vs off" % (aggregation, cap))
            assert_same_on_all_ranks(on[0], world, "%s cap %s" % (aggregation, cap))
            if cap == tiny:
                assert len(on[1].bucket_layout()) == 9, on[1].bucket_layout()
            if cap == whole:
                assert len(on[1].bucket_layout()) == 5, on[1].bucket_layout()  # (group, dtype) pairs
            for _, opt in (on, off):
                opt.close()


def check_options_on_vs_off(rank, world):
    """The options beyond plain Lion, and a state_dict round trip mid-training: overlap on
    equals overlap off bit for bit."""
    for kw in (dict(master_weights=True, momentum_average_every=2), dict(skip_nonfinite=True, maximize=True)):
        for cap in (1e-4, 25.0):
            on = train(rank, world, True, cap, "mavo", round_trip_at=1, **kw)
            off = train(rank, world, False, cap, "mavo", round_trip_at=1, **kw)
            assert_identical(on, off, "%s cap %s" % (kw, cap))
            if kw.get("skip_nonfinite"):
                assert on[1].step_counts()[1] in (0, 1)  # the first bucket may or may not hold parameter 3
            for _, opt in (on, off):
                opt.close()


def check_state_across_layouts(rank, world):
    """A state saved with one bucket cap loads into an optimizer with another: momenta, master
    copies and the counters (momentum averaging every 3 steps, a step count) continue exactly."""
    from signlion.torch import DistributedLion
    kw = dict(lr=LR, weight_decay=WD, aggregation="mavo", master_weights=True, momentum_average_every=3)
    used = [True] * 8

    def run(params, opt, steps):
        for s in steps:
            backward_with(params, grads_of(rank, s, [p.shape for p in params]), used)
            opt.step()
            opt.zero_grad()

    straight = make_params()
    opt = DistributedLion(straight, bucket_cap_mb=1e-5, **kw)
    run(straight, opt, range(5))
    first = make_params()
    opt1 = DistributedLion(first, bucket_cap_mb=1e-5, **kw)
    run(first, opt1, range(2))
    saved = opt1.state_dict()
    opt1.close()
    opt2 = DistributedLion(first, bucket_cap_mb=float("inf"), **kw)
    assert len(opt2.bucket_layout()) == 3
    opt2.load_state_dict(saved)
    assert opt2.step_counts() == (2, 0), opt2.step_counts()
    run(first, opt2, range(2, 5))
    for i, (a, b) in enumerate(zip(straight, first)):
        assert torch.equal(a.detach(), b.detach()), "parameter %d differs after the load" % i
    sa, sb = opt.state_dict()["state"], opt2.state_dict()["state"]
    assert all(torch.equal(sa[i][k], sb[i][k]) for i in sa for k in sa[i]), "states differ after the load"
    opt.close()
    opt2.close()


def check_accumulation(rank, world):
    from signlion.torch import DistributedLion
    results = []
    for overlap in (True, False):
        params = make_params()
        opt = DistributedLion(params, lr=LR, weight_decay=WD, aggregation="mavo", overlap=overlap, bucket_cap_mb=1e-4)
        ref = new_reference(params)
        for step in range(2):
            total = [torch.zeros(p.shape) for p in params]
            used = [True] * len(params)
            used[3] = False  # in a middle bucket: the buckets before it start in backward
            for micro in range(3):
                grads = grads_of(rank, 10 * step + micro, [p.shape for p in params])
                for t, g, p in zip(total, grads, params):
                    t += g.to(p.dtype).float()
                if micro < 2:
                    with opt.no_sync():
                        backward_with(params, grads, used)
                    if overlap:
                        assert not any(b.launched for b in opt._buckets), "a bucket started inside no_sync()"
                else:
                    backward_with(params, grads, used)
                    if overlap and step > 0:  # the first step starts every bucket in step()
                        assert [b.launched for b in opt._buckets][:3] == [True] * 3, "no bucket started"
            for i, (p, has) in enumerate(zip(params, somewhere(params))):
                if has:
                    # The gradient the parameter holds: the sum in its dtype, as torch accumulates it.
                    reference_param_step(ref, i, p.grad.float(), rank, world, "mavo", LR, WD)
            opt.step()
            assert_matches(params, ref, "accumulation overlap=%s step %d" % (overlap, step))
            opt.zero_grad()
        results.append((params, opt))
    assert_identical(results[0], results[1], "accumulation: overlap on vs off")
    for _, opt in results:
        opt.close()
    # Without no_sync() (once the buckets start during backward, from the second step): the
    # second backward finds its first bucket started, a clear error.
    params = make_params()
    opt = DistributedLion(params, lr=LR, aggregation="mavo", bucket_cap_mb=1e-4)
    used = [True] * len(params)
    backward_with(params, grads_of(rank, 3, [p.shape for p in params]), used)
    opt.step()
    opt.zero_grad()
    from signlion.torch import CommError
    try:
        # The first backward starts the buckets; a peer that got further may already have
        # refused and aborted, which this rank learns as CommError in either backward.
        backward_with(params, grads_of(rank, 0, [p.shape for p in params]), used)
        backward_with(params, grads_of(rank, 1, [p.shape for p in params]), used)
    except CommError:
        pass  # the peer refused first and aborted the communicator: this rank learns it so
    except RuntimeError as e:
        assert "no_sync()" in str(e) and "overlap=False" in str(e) and "bucket 0" in str(e), str(e)
    else:
        raise AssertionError("accumulating without no_sync() raised nothing")
    # The started step read a gradient that autograd then changed: the optimizer refuses to go
    # on, on every rank, and nothing hangs.
    try:
        opt.step()
    except CommError:
        pass
    except RuntimeError as e:
        assert "cannot be used again" in str(e) and "no_sync()" in str(e), str(e)
    else:
        raise AssertionError("step() after a refused accumulation raised nothing")
    opt.close()


def check_overlaps_backward(rank, world):
    """The buckets start during backward, before the slow first layer's backward ends."""
    from signlion.torch import DistributedLion
    params = make_params()
    opt = DistributedLion(params, lr=LR, aggregation="mavo", bucket_cap_mb=1e-4)
    layout = opt.bucket_layout()
    last = [i for i, b in enumerate(layout) if 0 in b["params"]][0]  # holds parameter 0, the slow layer's
    # The first step starts every bucket in step(): it tells the optimizer that this loop changes
    # no gradient between backward() and step().
    log = []
    opt.launch_observer = lambda event, bucket, in_backward: log.append((event, bucket, in_backward))
    backward_with(params, grads_of(rank, 5, [p.shape for p in params]), [True] * len(params))
    opt.step()
    opt.zero_grad()
    assert [e for e in log if e[0] == "launch"] == [("launch", b, False) for b in range(len(layout))], log
    log = []
    opt.launch_observer = lambda event, bucket, in_backward: log.append((event, bucket, in_backward,
                                                                         time.monotonic()))
    used = [True] * len(params)
    backward_with(params, grads_of(rank, 0, [p.shape for p in params]), used, delay=1.0, log=log)
    log.append(("backward returned", -1, False, time.monotonic()))
    opt.step()
    events = [e[:3] for e in log]
    slow_done = events.index(("slow layer done", -1, True))
    launches = [e for e in events if e[0] == "launch"]
    assert [b for _, b, _ in launches] == list(range(len(layout))), "buckets launched out of order: %s" % events
    assert all(in_backward for _, _, in_backward in launches), "a bucket started in step(): %s" % events
    for b in range(len(layout)):
        if b != last:
            assert events.index(("launch", b, True)) < slow_done, "bucket %d launched late: %s" % (b, events)
    # The background thread ran the first bucket while the slow layer's backward slept (1 s).
    assert events.index(("run", 0, True)) < slow_done, "the first bucket did not run during backward: %s" % events
    assert events.index(("launch", last, True)) < events.index(("backward returned", -1, False)), events
    # An unused parameter (3) holds its bucket and every later one back to step().
    log.clear()
    opt.zero_grad()
    used[3] = False
    backward_with(params, grads_of(rank, 1, [p.shape for p in params]), used)
    held = [i for i, b in enumerate(layout) if 3 in b["params"]][0]
    # Between backward and step(): state_dict() waits for the buckets in flight (the host
    # communicator is then free for this thread) and shows their steps done.
    headers = opt.state_dict()["signlion"]["buckets"]
    assert ("done", held - 1, True) in [e[:3] for e in log], log
    assert len(headers) == len(layout)
    opt.step()
    assert 0 < held < len(layout) - 1, layout
    launches = [e[:3] for e in log if e[0] == "launch"]
    assert launches == [("launch", b, b < held) for b in range(len(layout))], launches
    opt.close()


def run_ranks(world, scenario):
    spawn_ranks.run_gloo_ranks(world, "test_torch_lion_overlap", scenario)


@unittest.skipUnless(HAVE_TORCH, "torch is not importable")
class Overlap(unittest.TestCase):
    def test_matches_reference_world2(self):
        run_ranks(2, "check_matches_reference")

    def test_matches_reference_world3(self):
        run_ranks(3, "check_matches_reference")

    def test_options_on_vs_off_world2(self):
        run_ranks(2, "check_options_on_vs_off")

    def test_state_across_layouts_world2(self):
        run_ranks(2, "check_state_across_layouts")

    def test_accumulation_world2(self):
        run_ranks(2, "check_accumulation")

    def test_overlaps_backward_world2(self):
        run_ranks(2, "check_overlaps_backward")

    def test_failed_background_step_is_raised(self):
        from signlion.torch import DistributedLion
        params = make_params()
        opt = DistributedLion(params, lr=LR, aggregation="local", bucket_cap_mb=1e-4)
        culprit = opt.bucket_layout()[2]["params"][0]
        params[culprit].data = params[culprit].data.clone()  # refused at its bucket's step
        # The background step fails while backward still runs (a later bucket's gradient hook
        # raises it) or after (step() raises it): either is the failure reported.
        with self.assertRaisesRegex(RuntimeError, r"the step of bucket 2 \(param group 0, .*parameters \[%d\]\)"
                                    % culprit) as cm:
            backward_with(params, grads_of(0, 0, [p.shape for p in params]), [True] * len(params))
            opt.step()
        self.assertIn(".data was replaced", str(cm.exception))
        with self.assertRaisesRegex(RuntimeError, "cannot be used again"):
            opt.step()
        with self.assertRaisesRegex(RuntimeError, "cannot be used again"):
            backward_with(params, grads_of(0, 1, [p.shape for p in params]), [True] * len(params))

    def test_arguments_checked(self):
        from signlion.torch import DistributedLion
        for cap in (0, -1.0, float("nan"), "big"):
            with self.assertRaisesRegex(ValueError, "bucket_cap_mb"):
                DistributedLion(make_params(), aggregation="local", bucket_cap_mb=cap)
        with self.assertRaisesRegex(ValueError, "overlap must be True or False"):
            DistributedLion(make_params(), aggregation="local", overlap="yes")
        layout = DistributedLion(make_params(), aggregation="local", bucket_cap_mb=200 / 2**20).bucket_layout()
        # fp32 in reverse order, cut at 200 bytes: 36 + 144 bytes, then 256 alone (over the cap), 52 + 140
        fp32 = [b["params"] for b in layout if b["dtype"] == "torch.float32"]
        self.assertEqual(fp32, [[7, 6], [3], [1, 0]])
        self.assertTrue(all(b["bytes"] <= 200 or len(b["params"]) == 1 for b in layout), layout)


if __name__ == "__main__":
    import unittest_main
    unittest_main.main(HAVE_TORCH, None if HAVE_TORCH else WHY)
