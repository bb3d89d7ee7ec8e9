"""signlion.torch.DistributedLion as a torch.optim optimizer, CPU tensors, gloo
process groups of 2 or 3 spawned ranks, bit for bit against the NumPy Lion of
test_torch_lion.py wherever values are compared:
 1. a parameter with a gradient on some ranks steps on every rank (g = 0 where a rank has
    None); one with a gradient on no rank keeps its value and its momentum on every rank;
 2. lr = 0 and weight_decay = 0, LambdaLR warmup from 0, CosineAnnealingLR(eta_min=0);
 3. add_param_group (new buckets, checked across ranks);
 4. parameters checked across ranks at construction (count, shapes, dtypes, hyper-parameters:
    a ValueError naming the first difference on every rank) and broadcast from rank 0;
 5. models that differ across ranks (20 vs 25 parameters, other shapes): that clear error;
 6. per-parameter state: state[p]["exp_avg"], torch's state_dict format, a state saved by a
    plain (lion_pytorch-style) Lion and by lion_pytorch.Lion when installed, the old format;
 7. maximize, foreach, fused accepted; capturable and differentiable refused clearly;
 8. bad arguments and hyper-parameters (at construction and written into param_groups mid-run)
    are a ValueError or TypeError naming the argument and its param group;
 9. a rank outside process_group gets a ValueError at once, and vote rules that differ across
    ranks a ValueError naming the rule on every rank, before any communicator is made;
10. a second optimizer over parameters of an open one takes them over (the first is closed);
11. PyTorch 2.x's state-dict hooks run around state_dict() and load_state_dict() as torch.optim's."""
import os
import sys
import unittest

try:
    import numpy as np
    import torch
    import torch.distributed as dist
    import spawn_ranks
    from test_torch_lion import LR, WD, check_state_dict_round_trip, grads_of, make_model, reference_step
    HAVE_TORCH = True
except ImportError as e:  # pragma: no cover
    HAVE_TORCH, WHY = False, str(e)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def new_reference(params, master=False):
    """With master=True the reference's values are the fp32 master copy (give it gradients as
    the parameters' dtype holds them); the parameters are its rounding."""
    return {"p": [p.detach().float().numpy().copy() for p in params],
            "m": [np.zeros(p.shape, np.float32) for p in params],
            "dtypes": [torch.float32 if master else p.dtype for p in params]}


def reference_param_step(ref, i, g, rank, world, aggregation, lr, wd):
    """The reference step of parameter i alone (every rank calls it for the same i)."""
    sub = {"p": ref["p"][i:i + 1], "m": ref["m"][i:i + 1], "dtypes": ref["dtypes"][i:i + 1]}
    reference_step(sub, [g], rank, world, aggregation, lr, wd)
    ref["p"][i], ref["m"][i] = sub["p"][0], sub["m"][0]


def assert_matches(params, ref, what):
    for i, p in enumerate(params):
        want = torch.from_numpy(ref["p"][i]).to(p.dtype)
        assert torch.equal(p.detach(), want), "%s: parameter %d differs from the reference" % (what, i)


def assert_same_on_all_ranks(tensors, world, what):
    for i, t in enumerate(tensors):
        t = t.detach().float().contiguous()
        got = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(got, t)
        assert all(torch.equal(x, got[0]) for x in got), "%s: tensor %d differs across ranks" % (what, i)


def expect_value_error(fn, *fragments):
    try:
        fn()
    except ValueError as e:
        for f in fragments:
            assert f in str(e), "the error %r does not name %r" % (str(e), f)
        return str(e)
    raise AssertionError("no ValueError (wanted one naming %s)" % (fragments,))


# ---- 1. gradients present on some ranks only ----

def one_step_matches_reference(rank, world, label, **options):
    """One majority-vote step of a fresh DistributedLion(**options) equals the NumPy Lion's: the
    ranks still work together (after refused calls)."""
    from signlion.torch import DistributedLion
    params = make_model()
    ref = new_reference(params)
    opt = DistributedLion(params, lr=LR, weight_decay=WD, **options)
    grads = grads_of(rank, 0, [p.shape for p in params])
    for p, g in zip(params, grads):
        p.grad = g.to(p.dtype)
    opt.step()
    for i, g in enumerate(grads):
        reference_param_step(ref, i, g, rank, world, "mavo", LR, WD)
    assert_matches(params, ref, label)
    opt.close()


def check_gradient_on_some_ranks(rank, world):
    from signlion.torch import DistributedLion
    for aggregation in ("mavo", "average", "global"):
        for master in (False, True):
            params = make_model()  # fp32 (5, 7), fp32 (13,), bf16 (3, 3)
            ref = new_reference(params, master)
            opt = DistributedLion(params, lr=LR, weight_decay=WD, aggregation=aggregation, master_weights=master)
            for step in range(4):
                grads = grads_of(rank, step, [p.shape for p in params])
                # parameter 1: only rank 0 has a gradient at steps 0 and 2;
                # parameter 2: a gradient everywhere but at step 1, where no rank has one.
                has = [True, rank == 0 or step in (1, 3), step != 1]
                for p, g, h in zip(params, grads, has):
                    p.grad = g.to(p.dtype) if h else None
                opt.step()
                for i, (p, g, h) in enumerate(zip(params, grads, has)):
                    if i == 2 and step == 1:
                        continue  # skipped on every rank: value, momentum and master copy stay
                    g = g.to(p.dtype).float() if h else torch.zeros_like(g)
                    reference_param_step(ref, i, g, rank, world, aggregation, LR, WD)
                what = "%s master=%s step %d" % (aggregation, master, step)
                assert_same_on_all_ranks(params, world, what)
                assert_matches(params, ref, what)
                for i, p in enumerate(params):
                    assert np.array_equal(opt.state[p]["exp_avg"].numpy(), ref["m"][i]), \
                        "%s: momentum of parameter %d differs from the reference" % (what, i)


# ---- 2. lr = 0 and schedulers ----

def train_with_schedule(params, opt, sched, rank, world, aggregation, steps, ref=None):
    for step in range(steps):
        grads = grads_of(rank, step, [p.shape for p in params])
        for p, g in zip(params, grads):
            p.grad = g.to(p.dtype)
        lr, wd = opt.param_groups[0]["lr"], opt.param_groups[0]["weight_decay"]
        before = [p.detach().clone() for p in params]
        opt.step()
        if ref is not None:
            for i, g in enumerate(grads):
                reference_param_step(ref, i, g, rank, world, aggregation, lr, wd)
            assert_matches(params, ref, "step %d at lr %g" % (step, lr))
        if lr == 0.0:
            assert all(torch.equal(a, b.detach()) for a, b in zip(before, params)), "lr 0 changed a parameter"
        sched.step()


def check_zero_lr_schedules(rank, world):
    from signlion.torch import DistributedLion
    for aggregation in ("mavo", "global"):
        params = make_model()
        ref = new_reference(params)
        opt = DistributedLion(params, lr=0.0, weight_decay=0.0, aggregation=aggregation)  # lr 0 from the start
        train_with_schedule(params, opt, torch.optim.lr_scheduler.ConstantLR(opt, factor=1.0), rank, world,
                            aggregation, 1, ref)
        params = make_model()
        ref = new_reference(params)
        opt = DistributedLion(params, lr=LR, weight_decay=0.0, aggregation=aggregation)
        warmup = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, s / 2.0))  # 0, LR/2, LR, ...
        assert opt.param_groups[0]["lr"] == 0.0
        train_with_schedule(params, opt, warmup, rank, world, aggregation, 4, ref)
        params = make_model()
        ref = new_reference(params)
        opt = DistributedLion(params, lr=LR, weight_decay=WD, aggregation=aggregation)
        cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=2, eta_min=0.0)  # LR, LR/2, 0
        train_with_schedule(params, opt, cosine, rank, world, aggregation, 3, ref)
        assert opt.step_counts() == (3, 0)


# ---- 3. add_param_group ----

def check_add_param_group(rank, world):
    from signlion.torch import DistributedLion
    params = make_model()
    ref = new_reference(params)
    opt = DistributedLion(params[:2], lr=LR, weight_decay=WD, aggregation="mavo")
    opt.add_param_group({"params": params[2:], "lr": LR / 2})
    assert len(opt.param_groups) == 2 and opt.param_groups[1]["betas"] == (0.9, 0.99)
    for step in range(3):
        grads = grads_of(rank, step, [p.shape for p in params])
        for p, g in zip(params, grads):
            p.grad = g.to(p.dtype)
        opt.step()
        for i, g in enumerate(grads):
            reference_param_step(ref, i, g, rank, world, "mavo", LR if i < 2 else LR / 2, WD)
        assert_matches(params, ref, "step %d" % step)
    assert set(opt.state) == set(params)
    # A group that differs across ranks: the same clear error on every rank, and nothing added.
    extra = torch.nn.Parameter(torch.zeros(4 if rank == 0 else 5))
    expect_value_error(lambda: opt.add_param_group({"params": [extra]}), "group 2, parameter 0",
                       "[5]", "[4]")
    assert len(opt.param_groups) == 2
    # Rank 0's values for the new parameters.
    added = torch.nn.Parameter(torch.full((6,), float(rank + 1)))
    opt.add_param_group({"params": [added], "lr": 0.0})
    assert torch.equal(added.detach(), torch.ones(6)), added


# ---- 4 and 5. checks across ranks, broadcast from rank 0 ----

def check_parameters_broadcast_from_rank0(rank, world):
    from signlion.torch import DistributedLion
    # Different initial values: rank 0's, bit for bit (-0.0, subnormals and bf16 included).
    torch.manual_seed(rank)
    params = [torch.nn.Parameter(torch.randn(5, 7)), torch.nn.Parameter(torch.randn(9).to(torch.bfloat16))]
    if rank == 0:
        with torch.no_grad():
            params[0][0, :3] = torch.tensor([-0.0, 1e-45, float("inf")])
    want = [p.detach().clone() for p in params]
    dist.broadcast(want[0], 0)
    wide = want[1].float()  # gloo has no bf16 (nor int16): widen, exactly
    dist.broadcast(wide, 0)
    want[1] = wide.to(torch.bfloat16)
    DistributedLion(params, lr=LR, aggregation="mavo")
    for p, w in zip(params, want):
        assert p.detach().view(torch.int16 if p.dtype == torch.bfloat16 else torch.int32).equal(
            w.view(torch.int16 if w.dtype == torch.bfloat16 else torch.int32)), "not rank 0's bits"
    own = torch.nn.Parameter(torch.full((3,), float(rank)))
    DistributedLion([own], aggregation="average", broadcast_parameters=False)
    assert torch.equal(own.detach(), torch.full((3,), float(rank))), "broadcast_parameters=False broadcast"


def check_models_that_differ_fail_clearly(rank, world):
    from signlion.torch import DistributedLion

    def model(n):
        return [torch.nn.Parameter(torch.zeros(3)) for _ in range(n)]

    # 20 parameters on rank 0, 25 on the others.
    msg = expect_value_error(lambda: DistributedLion(model(20 if rank == 0 else 25), aggregation="mavo"),
                             "group 0: number of parameters", "25", "20")
    assert "rank 1" in msg, msg
    # The same count, another shape.
    shapes = [(4, 4)] * 3 if rank == 0 else [(4, 4), (2, 8), (4, 4)]
    expect_value_error(lambda: DistributedLion([torch.nn.Parameter(torch.zeros(s)) for s in shapes]),
                       "group 0, parameter 1", "[2, 8]", "[4, 4]")
    # Another dtype, another learning rate, another aggregation.
    dt = torch.float32 if rank == 0 else torch.float16
    expect_value_error(lambda: DistributedLion([torch.nn.Parameter(torch.zeros(3, dtype=dt))]), "float16")
    expect_value_error(lambda: DistributedLion(model(2), lr=0.1 if rank == 0 else 0.2), "group 0: lr")
    expect_value_error(lambda: DistributedLion(model(2), aggregation="mavo" if rank == 0 else "average"),
                       "aggregation")
    # After all those errors the ranks still work together.
    one_step_matches_reference(rank, world, "after the errors", aggregation="mavo")


# ---- 9. process groups and vote rules, checked before the communicator ----

def _nonmember_process_group(rank, world, init_file):
    """Ranks 0 and 1 make an optimizer over their subgroup; rank 2 is not a member: a ValueError
    at once (before, it waited in the store for the members' key until the store's timeout, or,
    finding it there, failed in the communicator's init with an unnamed SignError)."""
    import datetime
    import time
    os.environ["SIGNLION_SOCKET_IFNAME"] = "lo"
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    from signlion.torch import DistributedLion, host_comm_from_process_group
    sub = dist.new_group([0, 1])
    params = make_model()
    if rank == 2:
        started = time.monotonic()
        expect_value_error(lambda: DistributedLion(params, process_group=sub), "process_group", "not a member")
        expect_value_error(lambda: host_comm_from_process_group(sub), "not a member")
        elapsed = time.monotonic() - started
        assert elapsed < 30.0, "the non-member waited %.1f s before its error" % elapsed
    else:
        opt = DistributedLion(params, lr=LR, weight_decay=WD, process_group=sub)
        for p, g in zip(params, grads_of(rank, 0, [p.shape for p in params])):
            p.grad = g.to(p.dtype)
        opt.step()
        opt.close()
    dist.barrier()
    dist.destroy_process_group()


def check_vote_rules_differ(rank, world):
    """Rules that differ on one rank: the same ValueError on every rank, naming the rule (before,
    the communicator's init refused them with an unnamed SignError); then the ranks still work."""
    from signlion.torch import DistributedLion, host_comm_from_process_group
    zero = "abstain" if rank == 1 else "positive"
    msg = expect_value_error(lambda: DistributedLion(make_model(), zero_rule=zero), "zero_rule", "abstain",
                             "positive")
    assert "rank 1" in msg, msg
    tie = "negative" if rank == world - 1 else "zero"
    msg = expect_value_error(lambda: DistributedLion(make_model(), tie_rule=tie), "tie_rule", "negative")
    assert "rank %d" % (world - 1) in msg, msg
    expect_value_error(lambda: host_comm_from_process_group(zero_rule=zero), "zero_rule")
    one_step_matches_reference(rank, world, "after the refused rules", zero_rule="positive", tie_rule="zero")


# ---- 6. per-parameter state ----

def plain_lion_state_dict(params, grads_by_step, lr, betas, wd):
    """lion_pytorch.Lion's algorithm and state_dict format, in plain torch (the test's stand-in
    when lion_pytorch is not installed)."""
    m = [torch.zeros_like(p, dtype=torch.float32) for p in params]
    for grads in grads_by_step:
        for i, (p, g) in enumerate(zip(params, grads)):
            with torch.no_grad():
                p.mul_(1 - lr * wd)
                u = (m[i] * betas[0] + g * (1 - betas[0])).sign()
                p.add_(u.to(p.dtype), alpha=-lr)
                m[i].mul_(betas[1]).add_(g, alpha=1 - betas[1])
    return {"state": {i: {"exp_avg": m[i].clone()} for i in range(len(params))},
            "param_groups": [{"lr": lr, "betas": betas, "weight_decay": wd, "params": list(range(len(params)))}]}


def check_state_dict_torch_format(rank, world):
    """torch's format; a resume through torch.save continues bit for bit (test_torch_lion's check,
    which compares the per-parameter states); a state for other parameters is a clear error."""
    from signlion.torch import DistributedLion
    check_state_dict_round_trip(rank, world)
    params = make_model()
    opt = DistributedLion(params, lr=LR, weight_decay=WD, aggregation="mavo", master_weights=True)
    for s in range(2):
        for p, g in zip(params, grads_of(rank, s, [p.shape for p in params])):
            p.grad = g.to(p.dtype)
        opt.step()
    sd = opt.state_dict()
    assert sorted(sd["state"]) == [0, 1, 2], sorted(sd["state"])
    for i, p in enumerate(params):
        st = sd["state"][i]
        assert st["exp_avg"].shape == p.shape and st["exp_avg"].dtype == torch.float32
        assert torch.equal(st["exp_avg"], opt.state[p]["exp_avg"])
        assert float(st["step"]) == 2.0
        assert ("master" in st) == (p.dtype == torch.bfloat16)
    assert sd["param_groups"][0]["params"] == [0, 1, 2] and sd["param_groups"][0]["lr"] == LR
    expect_value_error(lambda: DistributedLion(make_model()[:1], aggregation="mavo").load_state_dict(sd),
                       "param group 0")


def check_old_opaque_format(rank, world):
    """The earlier opaque format (one state blob per bucket) still loads and continues exactly."""
    from signlion.torch import DistributedLion
    kw = dict(lr=LR, weight_decay=WD, aggregation="average", master_weights=True)
    a = make_model()
    opt_a = DistributedLion(a, **kw)
    for s in range(2):
        for p, g in zip(a, grads_of(rank, s, [p.shape for p in a])):
            p.grad = g.to(p.dtype)
        opt_a.step()
    # What that format held: per (group, dtype), a header (this library's, for that count) and the
    # momenta, then the master copies, of the parameters in registration order.
    headers = {str(b.dtype): b.save()[0][:b.save()[1]] for b in opt_a._buckets}
    per_dtype = {}
    for p in a:
        per_dtype.setdefault(str(p.dtype), []).append(p)
    buckets = []
    for dtype, ps in per_dtype.items():
        n = sum(p.numel() for p in ps)
        header = headers[dtype].clone()
        header[16:24] = torch.tensor([n], dtype=torch.int64).view(torch.uint8)  # its count
        parts = [header] + [opt_a.state[p]["exp_avg"].reshape(-1).view(torch.uint8) for p in ps]
        if "master" in opt_a.state[ps[0]]:
            parts += [opt_a.state[p]["master"].reshape(-1).view(torch.uint8) for p in ps]
        buckets.append({"group": 0, "dtype": dtype, "numel": n, "state": torch.cat(parts)})
    old = {"state": {}, "param_groups": [{"lr": LR, "betas": (0.9, 0.99), "weight_decay": WD,
                                          "params": [0, 1, 2]}],
           "signlion": {"aggregation": "average", "buckets": buckets}}
    b = make_model()
    with torch.no_grad():
        for x, y in zip(b, a):
            x.copy_(y)
    opt_b = DistributedLion(b, **kw)
    opt_b.load_state_dict(old)
    for p, q in zip(a, b):
        for k in opt_a.state[p]:
            assert torch.equal(opt_a.state[p][k], opt_b.state[q][k]), k
    assert opt_b.step_counts() == opt_a.step_counts() == (2, 0)
    for s in range(2, 4):  # and training continues alike
        for x, y, g in zip(a, b, grads_of(rank, s, [p.shape for p in a])):
            x.grad, y.grad = g.to(x.dtype), g.to(y.dtype)
        opt_a.step()
        opt_b.step()
    assert all(torch.equal(x.detach(), y.detach()) for x, y in zip(a, b)), "training after the load differs"
    bad = dict(old, signlion=dict(old["signlion"], buckets=old["signlion"]["buckets"][:1]))
    expect_value_error(lambda: opt_b.load_state_dict(bad), "buckets")


@unittest.skipUnless(HAVE_TORCH, "torch is not importable")
class LocalState(unittest.TestCase):
    """Single process ("local" needs no process group)."""

    def test_state_holds_exp_avg_per_parameter(self):
        from signlion.torch import DistributedLion
        params = make_model()
        ref = new_reference(params)
        opt = DistributedLion(params, lr=LR, weight_decay=WD, aggregation="local")
        for step in range(3):
            self._step_both(params, opt, ref, step)
            for i, p in enumerate(params):
                st = opt.state[p]
                self.assertTrue(np.array_equal(st["exp_avg"].numpy(), ref["m"][i]), (step, i))
                self.assertEqual(float(st["step"]), step + 1.0)
        self.assertEqual(set(opt.state_dict()["state"]), {0, 1, 2})

    def _step_both(self, params, opt, ref, step):
        """One "local" step of the optimizer and of the reference; the values must agree."""
        grads = grads_of(0, step, [p.shape for p in params])
        for p, g in zip(params, grads):
            p.grad = g.to(p.dtype)
        opt.step()
        for i, g in enumerate(grads):
            reference_param_step(ref, i, g, 0, 1, "local", LR, WD)
        assert_matches(params, ref, "step %d" % step)

    def _load_foreign(self, sd, params):
        """Loads a foreign Lion's state_dict; the momentum is taken exactly, and training goes on
        exactly as the reference started from that momentum."""
        from signlion.torch import DistributedLion
        opt = DistributedLion(params, lr=1.0, weight_decay=0.0, aggregation="local")
        opt.load_state_dict(sd)
        self.assertEqual((opt.param_groups[0]["lr"], opt.param_groups[0]["weight_decay"]), (LR, WD))
        ref = new_reference(params)
        for i, p in enumerate(params):
            m = sd["state"][i]["exp_avg"].float()
            self.assertTrue(torch.equal(opt.state[p]["exp_avg"], m), i)
            ref["m"][i] = m.numpy().copy()
        for step in range(3, 6):
            self._step_both(params, opt, ref, step)

    def test_loads_a_plain_lion_state_dict(self):
        params = make_model()
        grads = [[g.to(p.dtype) for p, g in zip(params, grads_of(0, s, [p.shape for p in params]))]
                 for s in range(3)]
        sd = plain_lion_state_dict(params, grads, LR, (0.9, 0.99), WD)
        self._load_foreign(sd, params)
        # Missing entries are zero momentum (a parameter that never had a gradient there).
        from signlion.torch import DistributedLion
        opt = DistributedLion(make_model(), aggregation="local")
        opt.load_state_dict({"state": {}, "param_groups": sd["param_groups"]})
        self.assertTrue(all(torch.equal(st["exp_avg"], torch.zeros_like(st["exp_avg"]))
                            for st in opt.state.values()))
        bad = {"state": {0: {"exp_avg_sq": torch.zeros(5, 7)}}, "param_groups": sd["param_groups"]}
        with self.assertRaisesRegex(ValueError, "exp_avg"):
            opt.load_state_dict(bad)
        bad = {"state": {0: {"exp_avg": torch.zeros(4)}}, "param_groups": sd["param_groups"]}
        with self.assertRaisesRegex(ValueError, "parameter 0"):
            opt.load_state_dict(bad)

    def test_loads_a_lion_pytorch_state_dict(self):
        try:
            from lion_pytorch import Lion
        except ImportError:
            self.skipTest("lion_pytorch is not installed (the plain-Lion test covers its format)")
        params = make_model()
        lion = Lion(params, lr=LR, betas=(0.9, 0.99), weight_decay=WD)
        for s in range(3):
            for p, g in zip(params, grads_of(0, s, [p.shape for p in params])):
                p.grad = g.to(p.dtype)
            lion.step()
        self._load_foreign(lion.state_dict(), params)

    def test_flags(self):
        from signlion.torch import DistributedLion
        # maximize: the same as minimizing the negated gradient, bit for bit.
        a, b = make_model(), make_model()
        oa = DistributedLion(a, lr=LR, weight_decay=WD, aggregation="local", maximize=True)
        ob = DistributedLion(b, lr=LR, weight_decay=WD, aggregation="local")
        for step in range(3):
            grads = grads_of(0, step, [p.shape for p in a])
            for p, q, g in zip(a, b, grads):
                p.grad, q.grad = g.to(p.dtype), (-g).to(q.dtype)
            oa.step()
            ob.step()
            self.assertTrue(all(torch.equal(p.detach(), q.detach()) for p, q in zip(a, b)), step)
        self.assertTrue(oa.param_groups[0]["maximize"])
        for flag in ("foreach", "fused"):
            for v in (None, True, False):
                DistributedLion(make_model(), aggregation="local", **{flag: v})
        DistributedLion(make_model(), aggregation="local", capturable=False, differentiable=False)
        with self.assertRaisesRegex(ValueError, "capturable=True is not supported"):
            DistributedLion(make_model(), aggregation="local", capturable=True)
        with self.assertRaisesRegex(ValueError, "differentiable=True is not supported"):
            DistributedLion(make_model(), aggregation="local", differentiable=True)
        with self.assertRaisesRegex(ValueError, "lr must be finite and >= 0"):
            DistributedLion(make_model(), lr=-1.0, aggregation="local")

    def test_arguments_named(self):
        """Each bad argument is refused before anything is made, by an exception naming it (and
        its param group): not truncated (1.5), not converted ("2"), not a bare error of a
        conversion nor a SignError of the library."""
        from signlion.torch import DistributedLion
        cases = [
            (dict(lr="x"), TypeError, ["param group 0: lr", "'x'"]),
            (dict(lr=-1.0), ValueError, ["param group 0: lr", "-1.0"]),
            (dict(lr=True), TypeError, ["param group 0: lr"]),
            (dict(betas=0.9), TypeError, ["param group 0: betas", "0.9"]),
            (dict(betas=(0.9, "x")), TypeError, ["param group 0: betas"]),
            (dict(betas=(0.9, 1.0)), ValueError, ["param group 0: betas"]),
            (dict(weight_decay=None), TypeError, ["param group 0: weight_decay", "None"]),
            (dict(weight_decay=float("inf")), ValueError, ["param group 0: weight_decay"]),
            (dict(master_weights="no"), ValueError, ["master_weights", "'no'"]),
            (dict(skip_nonfinite=2), ValueError, ["skip_nonfinite", "2"]),
            (dict(momentum_average_every=1.5), TypeError, ["momentum_average_every", "1.5"]),
            (dict(momentum_average_every="2"), TypeError, ["momentum_average_every", "'2'"]),
            (dict(momentum_average_every=True), TypeError, ["momentum_average_every"]),
            (dict(momentum_average_every=-1), ValueError, ["momentum_average_every", "-1"]),
            (dict(momentum_average_every=1 << 31), ValueError, ["momentum_average_every"]),
            (dict(process_group="x"), TypeError, ["process_group", "str"]),
            (dict(aggregation="vote"), ValueError, ["aggregation", "'vote'"]),
        ]
        for kw, kind, fragments in cases:
            with self.assertRaises(kind, msg=str(kw)) as caught:
                DistributedLion(make_model(), aggregation=kw.pop("aggregation", "local"), **kw)
            for f in fragments:
                self.assertIn(f, str(caught.exception), kw)
        # A second param group: its index is named.
        a, b = make_model(), make_model()
        with self.assertRaisesRegex(ValueError, "param group 1: lr must be finite and >= 0"):
            DistributedLion([{"params": a}, {"params": b, "lr": float("nan")}], aggregation="local")
        opt = DistributedLion(a, aggregation="local")
        with self.assertRaisesRegex(TypeError, "param group 1: weight_decay must be a real number"):
            opt.add_param_group({"params": b, "weight_decay": "0.1"})
        # What stays accepted: ints, a tensor lr (torch 2.x schedulers), betas as a list.
        DistributedLion(make_model(), aggregation="local", lr=1, betas=[0.9, 0.99], weight_decay=0,
                        momentum_average_every=3, master_weights=1, skip_nonfinite=False)
        DistributedLion(make_model(), aggregation="local", lr=torch.tensor(1e-3))

    def _bad_hyperparameter_mid_run(self, overlap):
        from signlion.torch import DistributedLion
        params = make_model()
        ref = new_reference(params)
        opt = DistributedLion(params, lr=LR, weight_decay=WD, aggregation="local", overlap=overlap)

        def backward_and_step(step):
            grads = grads_of(0, step, [p.shape for p in params])
            for p in params:
                p.grad = None
            sum((p * g.to(p.dtype)).sum() for p, g in zip(params, grads)).backward()
            opt.step()
            return grads

        for step in range(2):
            for i, g in enumerate(backward_and_step(step)):
                reference_param_step(ref, i, g.to(params[i].dtype).float(), 0, 1, "local", LR, WD)
        before = [p.detach().clone() for p in params]
        for key, value, kind, fragment in (("lr", -1.0, ValueError, "param group 0: lr must be finite and >= 0"),
                                           ("lr", "0.1", TypeError, "param group 0: lr must be a real number"),
                                           ("betas", (0.9, 1.5), ValueError, "param group 0: betas"),
                                           ("weight_decay", None, TypeError, "param group 0: weight_decay")):
            good, opt.param_groups[0][key] = opt.param_groups[0][key], value
            # Raised by step(), or with overlap by the backward whose first gradient reads it.
            with self.assertRaisesRegex(kind, fragment, msg=(key, value, overlap)):
                backward_and_step(2)
            opt.param_groups[0][key] = good
            self.assertTrue(all(torch.equal(x, p.detach()) for x, p in zip(before, params)),
                            "a refused step changed a parameter")
        # Refused before any bucket stepped: the optimizer goes on as if it had not happened.
        for step in range(2, 4):
            for i, g in enumerate(backward_and_step(step)):
                reference_param_step(ref, i, g.to(params[i].dtype).float(), 0, 1, "local", LR, WD)
        assert_matches(params, ref, "after the refused values, overlap=%s" % overlap)

    def test_bad_hyperparameter_mid_run_overlap_off(self):
        self._bad_hyperparameter_mid_run(False)

    def test_bad_hyperparameter_mid_run_overlap_on(self):
        self._bad_hyperparameter_mid_run(True)

    def test_second_optimizer_takes_parameters_over(self):
        """An optimizer made over parameters of one still open (held by its LR scheduler, or by
        the name it is about to be assigned to) takes them over: the first is closed (its hooks
        would adopt their gradients, its buckets no longer hold them) and says so when used; the
        second steps as the only one, overlap on, exactly as a fresh Lion from the parameters'
        values. Before, the next backward failed on a replaced .data."""
        from signlion.torch import DistributedLion
        params = make_model()

        def backward_and_step(opt, ps, ref, step):
            grads = grads_of(0, step, [p.shape for p in ps])
            for p in ps:
                p.grad = None
            sum((p * g.to(p.dtype)).sum() for p, g in zip(ps, grads)).backward()
            opt.step()
            for i, g in enumerate(grads):
                reference_param_step(ref, i, g.to(ps[i].dtype).float(), 0, 1, "local", LR, WD)
            assert_matches(ps, ref, "step %d" % step)

        first = DistributedLion(params[:2], lr=LR, weight_decay=WD, aggregation="local")
        sched = torch.optim.lr_scheduler.StepLR(first, 10)  # keeps `first` referenced, as in a two-phase loop
        ref = new_reference(params[:2])
        for step in range(2):
            backward_and_step(first, params[:2], ref, step)
            sched.step()
        phase2 = [params[2], params[1]]  # takes parameter 1 from `first`
        second = DistributedLion(phase2, lr=LR, weight_decay=WD, aggregation="local")
        with self.assertRaisesRegex(RuntimeError, "closed .a DistributedLion made later over its parameters took "
                                                  "them over"):
            first.step()
        with self.assertRaisesRegex(RuntimeError, "took them over"):
            first.state_dict()
        ref = new_reference(phase2)
        for step in range(2, 4):
            backward_and_step(second, phase2, ref, step)
        # The same through add_param_group, and re-made under the same name.
        other = DistributedLion([params[0]], lr=LR, weight_decay=WD, aggregation="local")
        other.add_param_group({"params": [params[2]]})
        with self.assertRaisesRegex(RuntimeError, "took them over"):
            second.step()
        opt = DistributedLion(params, lr=LR, weight_decay=WD, aggregation="local")
        opt = DistributedLion(params, lr=LR, weight_decay=WD, aggregation="local")
        ref = new_reference(params)
        for step in range(4, 6):
            backward_and_step(opt, params, ref, step)
        del other, opt

    @unittest.skipUnless(hasattr(torch.optim.Optimizer, "register_state_dict_pre_hook"),
                         "this PyTorch has no optimizer state-dict hooks (they came with 2.x)")
    def test_state_dict_hooks(self):
        """As torch.optim's: pre hooks before, post hooks after, a post hook's result replaces the
        state dict, a load pre hook's result is what is loaded; the move of the state into new
        buckets inside a step (a parameter frozen) is no save and runs none of them."""
        from signlion.torch import DistributedLion
        params = make_model()
        opt = DistributedLion(params, lr=LR, aggregation="local")
        calls = []
        opt.register_state_dict_pre_hook(lambda o: calls.append(("sd_pre", o is opt)))
        opt.register_state_dict_post_hook(lambda o, sd: calls.append(("sd_post", "signlion" in sd)) or
                                          dict(sd, tagged=True))
        opt.register_load_state_dict_pre_hook(
            lambda o, sd: calls.append(("load_pre", sd.get("tagged"))) or
            dict(sd, param_groups=[dict(g, lr=0.5) for g in sd["param_groups"]]))
        opt.register_load_state_dict_post_hook(lambda o: calls.append(("load_post", o.param_groups[0]["lr"])))
        for p, g in zip(params, grads_of(0, 0, [p.shape for p in params])):
            p.grad = g.to(p.dtype)
        params[1].requires_grad_(False)  # the next step moves the state into new buckets
        opt.step()
        self.assertEqual(calls, [])
        sd = opt.state_dict()
        self.assertTrue(sd["tagged"])
        self.assertEqual(calls, [("sd_pre", True), ("sd_post", True)])
        opt.load_state_dict(sd)
        self.assertEqual(calls[2:], [("load_pre", True), ("load_post", 0.5)])
        self.assertEqual(opt.param_groups[0]["lr"], 0.5)

    def test_zero_lr_local(self):
        from signlion.torch import DistributedLion
        params = make_model()
        before = [p.detach().clone() for p in params]
        opt = DistributedLion(params, lr=0.0, weight_decay=0.0, aggregation="local")
        for p in params:
            p.grad = torch.ones_like(p)
        opt.step()
        self.assertTrue(all(torch.equal(x, p.detach()) for x, p in zip(before, params)))
        self.assertTrue(torch.all(opt.state[params[0]]["exp_avg"] > 0))


def run_ranks(world, scenario):
    spawn_ranks.run_gloo_ranks(world, "test_torch_lion_api", scenario)


@unittest.skipUnless(HAVE_TORCH, "torch is not importable")
class AcrossRanks(unittest.TestCase):
    def test_gradient_on_some_ranks_world2(self):
        run_ranks(2, "check_gradient_on_some_ranks")

    def test_gradient_on_some_ranks_world3(self):
        run_ranks(3, "check_gradient_on_some_ranks")

    def test_zero_lr_schedules_world2(self):
        run_ranks(2, "check_zero_lr_schedules")

    def test_add_param_group_world2(self):
        run_ranks(2, "check_add_param_group")

    def test_parameters_broadcast_from_rank0_world3(self):
        run_ranks(3, "check_parameters_broadcast_from_rank0")

    def test_models_that_differ_fail_clearly_world2(self):
        run_ranks(2, "check_models_that_differ_fail_clearly")

    def test_models_that_differ_fail_clearly_world3(self):
        run_ranks(3, "check_models_that_differ_fail_clearly")

    def test_state_dict_torch_format_world2(self):
        run_ranks(2, "check_state_dict_torch_format")

    def test_old_opaque_format_world2(self):
        run_ranks(2, "check_old_opaque_format")

    def test_nonmember_process_group_world3(self):
        spawn_ranks.run_ranks(3, _nonmember_process_group, timeout=120)

    def test_vote_rules_differ_world2(self):
        run_ranks(2, "check_vote_rules_differ")

    def test_vote_rules_differ_world3(self):
        run_ranks(3, "check_vote_rules_differ")


if __name__ == "__main__":
    import unittest_main
    unittest_main.main(HAVE_TORCH, None if HAVE_TORCH else WHY)
