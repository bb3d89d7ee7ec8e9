"""signlion.torch.sign_all_reduce and sign_majority_hook on CPU tensors, gloo process groups of
2 to 4 spawned ranks, bit for bit against a plain reference (every rank's tensor gathered
over gloo, the votes counted in NumPy):
 1. sign_all_reduce: fp32, fp16, bf16, int8; majority and average; zero rules positive and
    abstain; 0, 1 and 1000 elements, zeros and NaN among the values; in place; async_op with
    wait(), is_completed() and get_future(); a subgroup; the communicator cached (a second call
    makes none); bad input named in the error; an empty tensor on some ranks only is an error on
    every rank (not a call skipped, which paired the next calls out of order), and the group's next
    call works on a new communicator;
 2. sign_majority_hook: a DDP model's gradients after backward equal the majority of the
    ranks' sign(grad) of the same model without DDP (the recipe of docs/PYTORCH.md)."""
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


def votes_of(tensors, zero_rule):
    """Per element, the sum of the ranks' votes (x > 0: +1, x < 0: -1, zero or NaN: the rule)."""
    zero_vote = {"positive": 1, "abstain": 0, "negative": -1}[zero_rule]
    total = 0
    for t in tensors:
        x = t.float().numpy()
        total = total + np.where(x > 0, 1, np.where(x < 0, -1, zero_vote))
    return total


def reference(tensors, op, zero_rule, dtype):
    v = votes_of(tensors, zero_rule)
    if op == "majority":
        out = np.sign(v).astype(np.float32)  # tie rule "zero"
    else:
        out = v.astype(np.float32) / np.float32(len(tensors))
    return torch.from_numpy(np.asarray(out, np.float32)).to(dtype)


def gather(t, group=None, members=None):
    """Every member's tensor (widened to fp32, exactly; NaN kept) over gloo."""
    wide = t.float().contiguous()
    out = [torch.empty_like(wide) for _ in range(members or dist.get_world_size())]
    if wide.numel():  # gloo's all_gather dies of SIGFPE on empty tensors
        dist.all_gather(out, wide, group=group)
    return out


def values(rank, n, dtype, seed):
    g = torch.Generator().manual_seed(100 * seed + rank)
    x = torch.randint(-3, 4, (n,), generator=g).float()  # zeros among them
    if n > 3:
        x[rank % n] = float("nan") if dtype != torch.int8 else 0.0
    return x.to(dtype)


def check_sign_all_reduce(rank, world):
    from signlion.torch import host_comm_cache_info, sign_all_reduce
    seed = 0
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int8):
        for op in ("majority", "average"):
            if dtype == torch.int8 and op == "average":
                continue
            for zero_rule in ("positive", "abstain"):
                for n in (0, 1, 1000):
                    seed += 1
                    t = values(rank, n, dtype, seed)
                    want = reference(gather(t), op, zero_rule, dtype)
                    ptr = t.data_ptr()
                    assert sign_all_reduce(t, op, zero_rule=zero_rule) is None
                    assert t.data_ptr() == ptr and t.dtype == dtype, "not in place"
                    what = "%s %s %s n=%d" % (dtype, op, zero_rule, n)
                    assert torch.equal(t.float(), want.float()), "%s: differs from the reference" % what
    # One communicator for the group, whatever rules the calls carry (they travel with each call).
    info = host_comm_cache_info()
    assert info["created"] == 1 and info["cached"] == 1, info
    t = values(rank, 10, torch.float32, 99)
    sign_all_reduce(t)
    assert host_comm_cache_info()["created"] == 1, "a second call made a new communicator"
    # async_op: several in flight, completed in call order.
    ts = [values(rank, 257, torch.float32, 200 + i) for i in range(4)]
    wants = [reference(gather(t), "average", "positive", torch.float32) for t in ts]
    works = [sign_all_reduce(t, "average", async_op=True) for t in ts]
    futures = [w.get_future() for w in works[:2]]
    for w in works:
        assert w.wait() is True and w.is_completed()
    for t, want in zip(ts, wants):
        assert torch.equal(t, want), "async result differs"
    assert futures[0].wait() is ts[0] and works[3].get_future().wait() is ts[3]


def check_subgroup(rank, world):
    """A group of ranks 0 and 2 of 3 (rank 1 is not a member: a clear error)."""
    from signlion.torch import host_comm_cache_info, sign_all_reduce
    sub = dist.new_group([0, 2])
    t = values(rank, 333, torch.bfloat16, 7)
    if rank in (0, 2):
        want = reference(gather(t, sub, 2), "majority", "positive", torch.bfloat16)
        sign_all_reduce(t, group=sub)
        assert torch.equal(t, want), "subgroup result differs"
        w = sign_all_reduce(t, "majority", group=sub, async_op=True)
        w.wait()
        assert host_comm_cache_info()["created"] == 1
    else:
        try:
            sign_all_reduce(t, group=sub)
        except ValueError as e:
            assert "group" in str(e) and "not a member" in str(e), str(e)
        else:
            raise AssertionError("a non-member's call raised nothing")
    # The whole world after the subgroup: its own communicator.
    t = values(rank, 5, torch.float32, 8)
    want = reference(gather(t), "majority", "positive", torch.float32)
    sign_all_reduce(t)
    assert torch.equal(t, want)


def check_overlapping_subgroups(rank, world):
    """Groups that overlap: x = {0, 1}, y, v and w = {1, 2}, so that rank 1 holds more host
    communicators than ranks 0 and 2. With the bound lowered to what rank 1 holds, w's first call
    fails with the same RuntimeError on ranks 1 and 2 (rank 2 is below the bound itself) and no
    communicator is dropped: x and y keep working on every member. Once rank 1 releases v (with
    rank 2, as a group's calls are made), w is made and every group still gives the reference.
    An eviction by use (least recently used over all groups) would drop y on rank 1 only, and y's
    next call would meet two different communicators: a hang until the timeout."""
    import signlion.sign_all_reduce as sar
    from signlion.torch import host_comm_cache_info, sign_all_reduce
    groups = {name: (dist.new_group(members), members)
              for name, members in (("x", [0, 1]), ("y", [1, 2]), ("v", [1, 2]), ("w", [1, 2]))}
    seed = [300]

    def call(name, zero_rule="positive"):
        group, members = groups[name]
        if rank not in members:
            return
        seed[0] += 1
        t = values(rank, 300, torch.float32, seed[0])
        want = reference(gather(t, group, 2), "majority", zero_rule, torch.float32)
        sign_all_reduce(t, group=group, zero_rule=zero_rule)
        assert torch.equal(t, want), "group %s: differs from the reference" % name

    for name in ("x", "y", "v", "x", "y"):
        call(name)
    held = {0: 1, 1: 3, 2: 2}[rank]
    assert host_comm_cache_info()["cached"] == held, host_comm_cache_info()
    sar.HOST_COMM_CACHE_SIZE = 3  # what rank 1 holds: no room for w there
    if rank in (1, 2):
        try:
            call("w")
        except RuntimeError as e:
            assert "HOST_COMM_CACHE_SIZE" in str(e) and "rank 1 holds 3" in str(e), str(e)
            assert "rank 2 holds" not in str(e), str(e)
        else:
            raise AssertionError("rank %d: w's first call beyond the bound raised nothing" % rank)
    assert host_comm_cache_info()["cached"] == held, "a communicator was dropped: %s" % host_comm_cache_info()
    for name in ("y", "x", "y"):
        call(name, "abstain")
    if rank in (1, 2):
        assert sar.release_host_comm(groups["v"][0])
    for name in ("w", "x", "y", "w"):
        call(name)
    assert host_comm_cache_info()["cached"] == {0: 1, 1: 3, 2: 2}[rank], host_comm_cache_info()
    sar.HOST_COMM_CACHE_SIZE = 16


def check_threads_make_one_communicator(rank, world):
    """Two threads of each rank make the group's first call at once: one communicator is made,
    both calls run on it (the same values in both, so their order across ranks does not matter)."""
    import threading
    from signlion.torch import host_comm_cache_info, sign_all_reduce
    ts = [values(rank, 1000, torch.float32, 500) for _ in range(2)]
    want = reference(gather(ts[0]), "majority", "positive", torch.float32)
    start = threading.Barrier(2)
    errors = []

    def run(t):
        try:
            start.wait()
            sign_all_reduce(t, async_op=True).wait()
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(t,)) for t in ts]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not errors, errors
    for t in ts:
        assert torch.equal(t, want), "differs from the reference"
    info = host_comm_cache_info()
    assert info["created"] == 1 and info["cached"] == 1, "two threads made %s" % info


def check_sign_all_reduce_and_errors(rank, world):
    check_sign_all_reduce(rank, world)
    check_errors(rank, world)


def check_errors(rank, world):
    from signlion.torch import sign_all_reduce
    bad = [
        (lambda: sign_all_reduce(torch.zeros(4, 4).t()), ValueError, "contiguous"),
        (lambda: sign_all_reduce(torch.zeros(4, dtype=torch.float64)), TypeError, "float64"),
        (lambda: sign_all_reduce(torch.zeros(4, dtype=torch.int8), "average"), TypeError, "int8"),
        (lambda: sign_all_reduce(torch.zeros(4), "sum"), ValueError, "op must be one of"),
        (lambda: sign_all_reduce(torch.zeros(4, device="meta")), ValueError, "CPU or a CUDA device"),
        (lambda: sign_all_reduce([1.0, 2.0]), TypeError, "tensor must be a torch.Tensor"),
        (lambda: sign_all_reduce(torch.zeros(4), zero_rule="up"), ValueError, "zero_rule"),
    ]
    for call, kind, fragment in bad:
        try:
            call()
        except kind as e:
            assert fragment in str(e), "%r does not name %r" % (str(e), fragment)
        else:
            raise AssertionError("no %s naming %r" % (kind.__name__, fragment))
    t = torch.ones(3) * (rank + 1)
    sign_all_reduce(t)  # the ranks still work together after the refused calls
    assert torch.equal(t, torch.ones(3))


def check_empty_calls(rank, world):
    """Empty tensors on every rank: calls like any other (the next ones pair as they should). An
    empty tensor on rank 0 only: every rank's call fails (the library names the counts), none
    hangs, and the group's next call works on a new communicator."""
    from signlion.torch import host_comm_cache_info, sign_all_reduce
    for dtype in (torch.float32, torch.int8):
        sign_all_reduce(torch.empty(0, dtype=dtype))
        t = values(rank, 5, dtype, 7)
        want = reference(gather(t), "majority", "positive", dtype)
        sign_all_reduce(t)
        assert torch.equal(t, want), "after empty calls on every rank: a wrong result"
    work = sign_all_reduce(torch.empty(0), async_op=True)
    work.wait()
    created = host_comm_cache_info()["created"]
    t = torch.empty(0) if rank == 0 else torch.full((4,), float(rank))
    try:
        sign_all_reduce(t)
    except RuntimeError as e:
        msg = str(e)
        assert "sign_all_reduce failed" in msg and "aborted" in msg, msg
        mismatch = "calls did not match" in msg
    else:
        raise AssertionError("rank %d: an empty tensor on rank 0 only raised nothing" % rank)
    seen = [None] * world
    dist.all_gather_object(seen, mismatch)
    assert any(seen), "no rank said that the calls did not match: %s" % seen
    t = torch.ones(3) * (rank + 1)
    sign_all_reduce(t)  # a new communicator: the ranks work together again
    assert torch.equal(t, torch.ones(3)), t
    assert host_comm_cache_info()["created"] == created + 1, host_comm_cache_info()


# ---- the DDP recipe (docs/PYTORCH.md, "signSGD with majority vote for any DDP model") ----

def make_net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))


def check_ddp_hook(rank, world):
    from torch.nn.parallel import DistributedDataParallel as DDP
    from signlion.torch import sign_majority_hook

    ddp_model = DDP(make_net(), bucket_cap_mb=0.001)  # small buckets: several hook calls
    ddp_model.register_comm_hook(None, sign_majority_hook)
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.01)  # SGD on the vote: signSGD with majority vote

    plain = make_net()  # the same model without DDP: each rank's own gradient
    for step in range(3):
        g = torch.Generator().manual_seed(10 * step + rank)
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp_model(x), y).backward()
        plain.zero_grad()
        torch.nn.functional.mse_loss(plain(x), y).backward()
        for p, q in zip(ddp_model.parameters(), plain.parameters()):
            want = reference(gather(q.grad.reshape(-1)), "majority", "abstain", torch.float32).view_as(p)
            assert torch.equal(p.grad, want), "step %d: the DDP gradient is not the majority of signs" % step
        before = [p.detach().clone() for p in ddp_model.parameters()]
        opt.step()
        with torch.no_grad():
            for b, p, q in zip(before, ddp_model.parameters(), plain.parameters()):
                assert torch.equal(p, b - 0.01 * p.grad)
                q.copy_(p)  # the plain model follows the trained one


def run_ranks(world, scenario):
    spawn_ranks.run_gloo_ranks(world, "test_torch_collectives", scenario)


@unittest.skipUnless(HAVE_TORCH, "torch is not importable")
class SignAllReduce(unittest.TestCase):
    def test_matches_reference_and_errors_world2(self):
        run_ranks(2, "check_sign_all_reduce_and_errors")

    def test_matches_reference_world3(self):
        run_ranks(3, "check_sign_all_reduce")

    def test_matches_reference_world4(self):
        run_ranks(4, "check_sign_all_reduce")

    def test_subgroup_world3(self):
        run_ranks(3, "check_subgroup")

    def test_overlapping_subgroups_world3(self):
        run_ranks(3, "check_overlapping_subgroups")

    def test_threads_make_one_communicator_world2(self):
        run_ranks(2, "check_threads_make_one_communicator")

    def test_empty_calls_world2(self):
        run_ranks(2, "check_empty_calls")

    def test_empty_calls_world3(self):
        run_ranks(3, "check_empty_calls")

    def test_needs_a_process_group(self):
        from signlion.torch import sign_all_reduce
        with self.assertRaisesRegex(RuntimeError, "group: torch.distributed is not initialized"):
            sign_all_reduce(torch.zeros(3))

    def test_ddp_hook_world2(self):
        run_ranks(2, "check_ddp_hook")

    def test_ddp_hook_world3(self):
        run_ranks(3, "check_ddp_hook")


if __name__ == "__main__":
    import unittest_main
    unittest_main.main(HAVE_TORCH, None if HAVE_TORCH else WHY)
