"""signlion.torch.DistributedLion on CPU tensors, multi-process (gloo process group,
world sizes 2 and 4): bit for bit against a plain NumPy Lion, state_dict round trip,
host communicator bootstrap through the store. Skips only when torch is missing.
(test_torch_lion_cuda.py: CUDA tensors on the process group's NCCL communicator.)"""
import io
import os
import sys
import unittest

try:
    import numpy as np
    import torch
    import torch.distributed as dist
    import spawn_ranks
    HAVE_TORCH = True
except ImportError as e:  # pragma: no cover
    HAVE_TORCH, WHY = False, str(e)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

LR, WD = 0.01, 0.1


def grads_of(rank, step, shapes):
    """Rank r's gradients at a step: multiples of 2^-8, so any sum order is exact."""
    g = torch.Generator().manual_seed(1000 * rank + step)
    return [torch.randint(-1024, 1025, s, generator=g).float() / 256.0 for s in shapes]


def make_model(dtype_second=torch.bfloat16):
    torch.manual_seed(0)
    return [torch.nn.Parameter(torch.randn(5, 7)), torch.nn.Parameter(torch.randn(13)),
            torch.nn.Parameter(torch.randn(3, 3).to(dtype_second))]


def reference_step(ref, grads, rank, world, aggregation, lr, wd, b1=0.9, b2=0.99):
    """Plain Lion in NumPy float32, every operation rounded once, in nccl_sign.h's order.
    ref: {"p": [float32 arrays], "m": [...], "dtypes": [...]}; all ranks' c gathered over gloo."""
    reference_apply(ref, reference_vote(ref, grads, rank, world, aggregation, b1, b2), lr, wd)


def reference_vote(ref, grads, rank, world, aggregation, b1=0.9, b2=0.99):
    """A step's first half: each parameter's agreed update u (float32 arrays) from this step's
    gradients; the momenta move to m_t."""
    f = np.float32
    b1, b2 = f(b1), f(b2)
    omb1, omb2 = f(1) - b1, f(1) - b2
    updates = []
    for i, g in enumerate(grads):
        if aggregation == "global":
            s = g.to(ref["dtypes"][i]).float()
            dist.all_reduce(s)  # exact: dyadic values
            g = s.numpy() / f(world)
        else:
            g = g.to(ref["dtypes"][i]).float().numpy()  # the gradient as the parameter's dtype holds it
        m = ref["m"][i]
        c = b1 * m + omb1 * g
        ref["m"][i] = b2 * m + omb2 * g
        if aggregation in ("mavo", "average"):
            cs = [torch.empty(c.shape) for _ in range(world)]
            dist.all_gather(cs, torch.from_numpy(c))
            votes = sum(np.where(x.numpy() < 0, -1, 1) for x in cs)  # zero rule "positive"
            u = np.sign(votes).astype(f) if aggregation == "mavo" else (votes.astype(f) / f(world))
        else:
            u = np.sign(c).astype(f)
        updates.append(u)
    return updates


def reference_apply(ref, updates, lr, wd):
    """A step's second half: p = p - lr * (u + wd * p) in float32, rounded to the parameter's dtype."""
    f = np.float32
    lr, wd = f(lr), f(wd)
    for i, u in enumerate(updates):
        p = ref["p"][i]
        p = p - lr * (u + wd * p)
        ref["p"][i] = torch.from_numpy(p).to(ref["dtypes"][i]).float().numpy()


def check_matches_reference(rank, world):
    from signlion.torch import DistributedLion
    for aggregation in ("mavo", "average", "global", "local"):
        params = make_model()
        ref = {"p": [p.detach().float().numpy().copy() for p in params], "m": [np.zeros(p.shape, np.float32)
                                                                             for p in params],
               "dtypes": [p.dtype for p in params]}
        opt = DistributedLion([{"params": params[:2]}, {"params": params[2:], "lr": LR / 2}], lr=LR,
                              weight_decay=WD, aggregation=aggregation)
        for step in range(3):
            if step == 2:
                for g in opt.param_groups:
                    g["lr"] = g["lr"] * 0.5  # a schedule: the next step must use it
            grads = grads_of(rank, step, [p.shape for p in params])
            for p, g in zip(params, grads):
                p.grad = g.to(p.dtype)
            opt.step()
            lrs = [opt.param_groups[0]["lr"]] * 2 + [opt.param_groups[1]["lr"]]
            for i, g in enumerate(grads):
                sub = {"p": ref["p"][i:i + 1], "m": ref["m"][i:i + 1], "dtypes": ref["dtypes"][i:i + 1]}
                reference_step(sub, [g], rank, world, aggregation, lrs[i], WD)
                ref["p"][i], ref["m"][i] = sub["p"][0], sub["m"][0]
            for i, p in enumerate(params):
                want = torch.from_numpy(ref["p"][i]).to(p.dtype)
                assert torch.equal(p.detach(), want), "%s step %d param %d differs from the reference" % (
                    aggregation, step, i)
        if aggregation != "local":
            gathered = [torch.empty(5, 7) for _ in range(world)]
            dist.all_gather(gathered, params[0].detach().clone())
            assert all(torch.equal(x, gathered[0]) for x in gathered), "ranks disagree"


def check_state_dict_round_trip(rank, world):
    from signlion.torch import DistributedLion
    kw = dict(lr=LR, weight_decay=WD, aggregation="mavo", master_weights=True, momentum_average_every=3)

    def train(params, opt, steps):
        for s in steps:
            for p, g in zip(params, grads_of(rank, s, [p.shape for p in params])):
                p.grad = g.to(p.dtype)
            opt.step()

    straight = make_model()
    opt = DistributedLion(straight, **kw)
    train(straight, opt, range(5))

    first = make_model()
    opt1 = DistributedLion(first, **kw)
    train(first, opt1, range(2))
    blob = io.BytesIO()
    torch.save({"model": [p.detach().clone() for p in first], "opt": opt1.state_dict()}, blob)
    del opt1
    blob.seek(0)
    saved = torch.load(blob)
    resumed = make_model()
    with torch.no_grad():
        for p, s in zip(resumed, saved["model"]):
            p.copy_(s)
    opt2 = DistributedLion(resumed, **kw)  # a new host communicator, through the store
    opt2.load_state_dict(saved["opt"])
    assert opt2.step_counts() == (2, 0)
    train(resumed, opt2, range(2, 5))
    for a, b in zip(straight, resumed):
        assert torch.equal(a.detach(), b.detach()), "resumed training differs"
    sa, sb = opt.state_dict()["state"], opt2.state_dict()["state"]
    assert sorted(sa) == sorted(sb) == [0, 1, 2]
    assert all(torch.equal(sa[i][k], sb[i][k]) for i in sa for k in sa[i]), "optimizer states differ"
    try:
        DistributedLion(make_model()[:1], **kw).load_state_dict(saved["opt"])
    except ValueError:
        pass
    else:
        raise AssertionError("a state of another layout was accepted")


def check_store_bootstrap(rank, world):
    from signlion.torch import DistributedLion
    # Two optimizers, two host communicators, both through the default store.
    a = DistributedLion(make_model(), aggregation="mavo")
    b = DistributedLion(make_model(), aggregation="average")
    for opt in (a, b):
        assert (opt.comm.nranks, opt.comm.rank) == (world, rank)
    sent0, _ = a.comm.wire_bytes()
    a.comm.barrier()
    x = torch.full((1000,), 1.0 if rank == 0 else -1.0)
    out = torch.empty_like(x)
    a.comm.sign_all_reduce(x.data_ptr(), out.data_ptr(), x.numel(), 7)
    want = 0.0 if world == 2 else -1.0  # +1 from rank 0, -1 from the others; a tie (world 2) gives 0
    assert torch.all(out == want), out[:4]
    assert a.comm.wire_bytes()[0] > sent0


def run_ranks(world, scenario):
    spawn_ranks.run_gloo_ranks(world, "test_torch_lion", scenario)


@unittest.skipUnless(HAVE_TORCH, "torch is not importable")
class DistributedLionTorch(unittest.TestCase):
    def test_matches_reference_world2(self):
        run_ranks(2, "check_matches_reference")

    def test_matches_reference_world4(self):
        run_ranks(4, "check_matches_reference")

    def test_state_dict_round_trip_world2(self):
        run_ranks(2, "check_state_dict_round_trip")

    def test_store_bootstrap_world2(self):
        run_ranks(2, "check_store_bootstrap")

    def test_store_bootstrap_world4(self):
        run_ranks(4, "check_store_bootstrap")

    def test_local_needs_no_process_group(self):
        from signlion.torch import DistributedLion
        params = make_model()
        opt = DistributedLion(params, lr=LR, aggregation="local")
        self.assertIsNone(opt.comm)
        with self.assertRaises(RuntimeError):
            DistributedLion(make_model(), aggregation="mavo")  # no process group: a clear error
        with self.assertRaises(TypeError):
            DistributedLion([torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))], aggregation="local")

    def test_parameters_without_gradient_keep_their_values(self):
        from signlion.torch import DistributedLion
        params = make_model()
        before = [p.detach().clone() for p in params]
        opt = DistributedLion(params, lr=LR, weight_decay=0.1, aggregation="local")
        params[0].grad = torch.ones_like(params[0])  # params[1] has no gradient
        opt.step()
        self.assertFalse(torch.equal(params[0].detach(), before[0]))
        self.assertTrue(torch.equal(params[1].detach(), before[1]))

    def test_comm_rejects_a_malformed_unique_id(self):
        from signlion import capi
        with self.assertRaises(ValueError):
            capi.Comm(1, b"short", 0)
        with self.assertRaises(ValueError):
            capi.Comm(1, capi.get_unique_id(), 0, zero_rule="sideways")
        with self.assertRaises(ValueError):
            capi.Comm(1, capi.get_unique_id(), 0, host_id="")
        with self.assertRaises(TypeError):
            capi.Comm(1, capi.get_unique_id(), 0, host_id=3)

    def test_comm_host_id_groups_ranks(self):
        """capi.Comm(host_id=...): five ranks as threads of this process act as two nodes (a, a, b, b, a),
        the hierarchical algorithm runs over them bit for bit against the majority vote, and each rank
        reports its node and bytes to the other node."""
        import threading
        from signlion import capi
        n, count, ids = 5, 10007, ["a", "a", "b", "b", "a"]
        uid = capi.get_unique_id()
        g = torch.Generator().manual_seed(7)
        inputs = [torch.randn(count, generator=g) for _ in range(n)]
        outputs = [torch.full((count,), 9.0) for _ in range(n)]
        nodes, errors = [None] * n, []

        def rank_main(r):
            try:
                comm = capi.Comm(n, uid, r, algorithm=5, timeout_ms=30000, host_id=ids[r])  # 5: hier
                comm.sign_all_reduce(inputs[r].data_ptr(), outputs[r].data_ptr(), count, capi.FLOAT32)
                nodes[r] = comm.inter_node_wire_bytes() + (comm.link_rate(),)
                comm.destroy()
            except Exception as e:  # reported below
                errors.append("rank %d: %r" % (r, e))

        threads = [threading.Thread(target=rank_main, args=(r,), daemon=True) for r in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertFalse(any(t.is_alive() for t in threads), "a rank did not finish in 60 s")
        self.assertEqual(errors, [])
        votes = sum(torch.where(x < 0, -1, 1) for x in inputs)  # zero rule "positive"; n odd: no tie
        want = torch.sign(votes).float()
        for r in range(n):
            self.assertTrue(torch.equal(outputs[r], want), "rank %d" % r)
        self.assertEqual([x[0] for x in nodes], [0, 0, 1, 1, 0])
        self.assertEqual([x[3] for x in nodes], [0] * n, "over loopback no link rate is learned")
        for node in (0, 1):  # a node's leaders carry its counters (a rank past the smaller node's size leads none)
            self.assertGreater(sum(x[1] for x in nodes if x[0] == node), 0, "node %d sent nothing across" % node)



if __name__ == "__main__":
    import unittest_main
    unittest_main.main(HAVE_TORCH, None if HAVE_TORCH else WHY)
