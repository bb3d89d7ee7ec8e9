"""The baselines of examples/train_baselines.py that adapt a PyTorch part: 2 ranks over gloo.

- OrderedPowerSGD: DDP + torch's PowerSGD hook over a model whose gradients span several
  buckets runs its compressed steps (the hook as it comes aborts there over gloo: its P and Q
  all-reduces, issued from callbacks, interleave with the next buckets' all-reduces in an order
  that differs between ranks) and gives, bit for bit, the gradients of a reference that
  finishes each bucket's whole round before backward goes on; the ranks agree.
- ddp-bf16-lion: refused with a clear reason (train_baselines.Unavailable) where gloo cannot
  all-reduce bfloat16, else the gradients equal a bfloat16 all-reduce of the mean.

  test_train_baselines.py [CASE...]
Exit 77 (skipped) when torch cannot run here."""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))
sys.path.insert(0, HERE)

try:
    import torch
    import torch.distributed as dist
except ImportError:
    print("SKIP: torch is not importable")
    sys.exit(77)

from spawn_ranks import run_ranks  # noqa: E402

STEPS = 6  # 2 warm-up steps of plain all-reduce, then 4 compressed


def _model():
    torch.manual_seed(0)
    # 784 x 512 and 512 x 512 weights: with 0.25 MB buckets, one bucket per weight and more.
    return torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                               torch.nn.ReLU(), torch.nn.Linear(512, 10))


def _powersgd_grads(rank, world, hook_kind):
    """The gradients of every step (after DDP's hook) under `hook_kind`: "ordered" (the baseline's
    OrderedPowerSGD) or "serial" (each bucket's round waited for inside the hook: the reference)."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
    import train_baselines
    ddp = torch.nn.parallel.DistributedDataParallel(_model(), bucket_cap_mb=0.25)
    state = powerSGD_hook.PowerSGDState(process_group=dist.group.WORLD, matrix_approximation_rank=4,
                                        start_powerSGD_iter=2, use_error_feedback=True, warm_start=True,
                                        random_seed=0)
    if hook_kind == "ordered":
        ordered = train_baselines.OrderedPowerSGD(state)

        def hook(s, bucket):
            return ordered(s, bucket)
    else:
        def hook(s, bucket):
            fut = powerSGD_hook.powerSGD_hook(s, bucket)
            fut.wait()
            return fut
    ddp.register_comm_hook(state, hook)
    g = torch.Generator().manual_seed(100 + rank)
    out = []
    for _ in range(STEPS):
        x, y = torch.randn(16, 784, generator=g), torch.randint(0, 10, (16,), generator=g)
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        out.append([p.grad.clone() for p in ddp.parameters()])
        ddp.zero_grad(set_to_none=True)
    return out


def powersgd_body(rank, world, init_file):
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    torch.set_num_threads(1)
    ordered = _powersgd_grads(rank, world, "ordered")
    serial = _powersgd_grads(rank, world, "serial")
    for step, (a, b) in enumerate(zip(ordered, serial)):
        for i, (x, y) in enumerate(zip(a, b)):
            assert torch.equal(x, y), "rank %d step %d parameter %d: ordered != serial" % (rank, step, i)
    flat = torch.cat([x.reshape(-1) for grads in ordered for x in grads])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    for r in range(world):
        assert torch.equal(gathered[r], flat), "rank %d's gradients differ from rank %d's" % (r, rank)
    dist.destroy_process_group()


def bf16_body(rank, world, init_file):
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    import argparse
    import train_baselines
    args = argparse.Namespace(lr=1e-4, weight_decay=0.1, seed=0)
    model = _model()
    try:
        ddp, _, _ = train_baselines.ddp_bf16_lion(model, args, torch.device("cpu"))
    except train_baselines.Unavailable as e:
        assert "cannot all-reduce bfloat16" in str(e), str(e)
        try:  # the refusal is this PyTorch's: gloo refuses a bfloat16 all-reduce itself
            dist.all_reduce(torch.zeros(1, dtype=torch.bfloat16))
            raise AssertionError("refused, yet gloo all-reduces bfloat16")
        except RuntimeError:
            pass
        dist.destroy_process_group()
        return
    g = torch.Generator().manual_seed(100 + rank)
    x, y = torch.randn(16, 784, generator=g), torch.randint(0, 10, (16,), generator=g)
    torch.nn.functional.cross_entropy(ddp(x), y).backward()
    # The reference: each rank's own gradient of the same model, cast to bfloat16 after
    # dividing by the world size, summed over the ranks in bfloat16 by gloo.
    ref_model = _model()
    torch.nn.functional.cross_entropy(ref_model(x), y).backward()
    for p, q in zip(ddp.parameters(), ref_model.parameters()):
        t = q.grad.to(torch.bfloat16).div_(world)
        dist.all_reduce(t)
        assert torch.equal(p.grad, t.to(p.grad.dtype)), "bf16 hook's gradient differs from the reference"
    dist.destroy_process_group()


class TrainBaselines(unittest.TestCase):
    def test_powersgd_ordered_matches_serial(self):
        run_ranks(2, powersgd_body)

    def test_bf16_hook_or_clear_refusal(self):
        run_ranks(2, bf16_body)


if __name__ == "__main__":
    unittest.main()
