#!/usr/bin/env python3
"""What the ranks' per-step agreement on gradients costs in signlion.torch.DistributedLion
(docs/LION.md): the sum all-reduce of one float per parameter tensor that tells every rank
which parameters have a gradient somewhere, timed alone (DistributedLion._gradient_somewhere)
and against a whole step, interleaved (A B A B ...), medians over the repetitions.
N ranks are processes on this machine (gloo process group, signlion host communicator on
loopback).

  lion_agreement_cost.py [--ranks 2 4] [--tensors 8 64 256] [--numel 1000000] [--reps 30]
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "tests"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def body(tensors, numel, reps, results, rank, world, init_file):
    os.environ.setdefault("SIGNLION_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    from signlion.torch import DistributedLion
    params = [torch.nn.Parameter(torch.randn(numel // tensors)) for _ in range(tensors)]
    opt = DistributedLion(params, lr=1e-4, aggregation="mavo")
    for p in params:
        p.grad = torch.randn_like(p)
    agree, step = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        opt._gradient_somewhere()
        t1 = time.perf_counter()
        opt.step()  # includes its own agreement
        t2 = time.perf_counter()
        agree.append(t1 - t0)
        step.append(t2 - t1)
    if rank == 0:
        results.put((statistics.median(agree), statistics.median(step)))
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--tensors", type=int, nargs="+", default=[8, 64, 256])
    ap.add_argument("--numel", type=int, default=1_000_000, help="parameters in all, split over the tensors")
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()
    import spawn_ranks
    import torch.multiprocessing as mp
    print("# N  tensors  parameters  agreement ms  step ms  agreement / step")
    for n in a.ranks:
        for t in a.tensors:
            results = mp.get_context("spawn").SimpleQueue()
            spawn_ranks.run_ranks(n, body, t, a.numel, a.reps, results)
            agree, step = results.get()
            print("  %-2d %-8d %-11d %-13.3f %-8.2f %.1f%%" % (n, t, a.numel, agree * 1e3, step * 1e3,
                                                               100 * agree / step), flush=True)


if __name__ == "__main__":
    main()
