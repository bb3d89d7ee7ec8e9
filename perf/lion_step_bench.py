#!/usr/bin/env python3
"""Time of one optimizer step on a flat parameter buffer (default 100M fp32 parameters):

  single       plain Lion in PyTorch ops on one rank, no communication (the floor);
  global-<dt>  global Lion: the gradient all-reduced in <dt> (bf16 on CUDA, fp32 on CPU:
               gloo has no bf16 sum) through the process group, then plain Lion on the mean;
  signlion-<a> signlion.torch.DistributedLion(aggregation=<a>): the sign all-reduce on the
               process group's NCCL communicator (CUDA) or on the host communicator (CPU).

Ranks are spawned processes on one machine. On CUDA every rank uses GPU 0 (or rank % devices)
with its own NCCL_HOSTID, so NCCL's traffic goes through the net plugin (--net-plugin, e.g.
build/lib/libnccl-net-signlion.so), as between two hosts. A step is timed from the gradient in
place to the parameters updated (torch.cuda.synchronize on both ends); the table gives the
median over --steps steps, the slowest rank's, and its ratio to `single`. After the timed steps
every rank's parameters are compared (a checksum all-gathered): `same` must be yes for every
contender but `single`, or the run fails (exit 1).

  python3 perf/lion_step_bench.py --device cuda --world 4 --net-plugin build/lib/libnccl-net-signlion.so
  SIGNLION_LIBRARY=build/src/host/libnccl-sign.so PYTHONPATH=python \\
    python3 perf/lion_step_bench.py --device cpu --params 1000000 --world 2      # a CPU check of the script
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

LR, BETAS, WD = 1e-4, (0.9, 0.99), 0.1


def lion_(p, m, g):
    """Plain Lion (Chen et al.): the update is the sign of the interpolated momentum."""
    update = m.lerp(g, 1 - BETAS[0]).sign_()
    p.mul_(1 - LR * WD).add_(update, alpha=-LR)
    m.lerp_(g, 1 - BETAS[1])


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def checksum(p):
    """An exact fingerprint of the parameters' bits (sum of their int32 words)."""
    return p.detach().view(torch.int32).sum(dtype=torch.int64).reshape(1)


def time_steps(device, steps, warmup, step):
    times = []
    for i in range(warmup + steps):
        sync(device)
        t0 = time.perf_counter()
        step(i)
        sync(device)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def rank_main(rank, world, init_file, args, results):
    try:
        _rank_main(rank, world, init_file, args, results)
    except Exception as e:  # reported by the parent
        results.put((rank, "error", repr(e)))
        raise


def _rank_main(rank, world, init_file, args, results):
    cuda = args.device == "cuda"
    if cuda:
        os.environ["NCCL_HOSTID"] = "signlion-lionbench-%d-%d" % (os.getppid(), rank)
        if args.net_plugin:
            os.environ["NCCL_NET_PLUGIN"] = args.net_plugin
        torch.cuda.set_device(rank % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    os.environ.setdefault("SIGNLION_SOCKET_IFNAME", "lo")
    dist.init_process_group("nccl" if cuda else "gloo", init_method="file://" + init_file, rank=rank,
                            world_size=world)
    from signlion.torch import DistributedLion

    n = args.params
    gen = torch.Generator().manual_seed(1234 + rank)
    grads = [torch.randn(n, generator=gen).to(device) for _ in range(2)]  # two, alternated: not one cached input
    torch.manual_seed(0)
    init = torch.randn(n).to(device)
    rows = []

    def run(name, make_step, p):
        sec = time_steps(device, args.steps, args.warmup, make_step)
        sums = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(world)]
        dist.all_gather(sums, checksum(p))
        same = all(int(s.item()) == int(sums[0].item()) for s in sums)
        worst = torch.tensor([sec], dtype=torch.float64, device=device)
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)
        rows.append((name, worst.item(), same))

    # single: plain Lion, no communication
    p, m = init.clone(), torch.zeros(n, device=device)
    run("single", lambda i: lion_(p, m, grads[i % 2]), p)

    # global: the mean gradient through the process group, then plain Lion
    gdt = torch.bfloat16 if cuda else torch.float32
    p, m = init.clone(), torch.zeros(n, device=device)

    def global_step(i):
        g = grads[i % 2].to(gdt, copy=True)  # all_reduce works in place: never on the inputs themselves
        dist.all_reduce(g)
        lion_(p, m, g.float().div_(world))
    run("global-" + ("bf16" if gdt == torch.bfloat16 else "fp32"), global_step, p)

    for agg in args.aggregations:
        p = torch.nn.Parameter(init.clone())
        opt = DistributedLion([p], lr=LR, betas=BETAS, weight_decay=WD, aggregation=agg)

        def signlion_step(i):
            p.grad = grads[i % 2].clone()  # what a backward pass hands over: a fresh gradient each step
            opt.step()
        run("signlion-" + agg, signlion_step, p)
        opt.close()

    if rank == 0:
        results.put((rank, "rows", rows))
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--params", type=int, default=100_000_000, help="parameters in the flat buffer")
    ap.add_argument("--world", type=int, default=2, help="ranks (processes)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per contender")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--aggregations", nargs="+", default=["mavo", "average"], choices=["mavo", "average", "global"])
    ap.add_argument("--net-plugin", default="", help="NCCL_NET_PLUGIN for the ranks (CUDA)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds before the ranks are killed")
    args = ap.parse_args()
    for name in ("params", "world", "steps"):
        if getattr(args, name) < 1:
            ap.error("--%s must be at least 1" % name)
    if args.warmup < 0:
        ap.error("--warmup must be at least 0")
    if args.device == "cuda" and not torch.cuda.is_available():
        print("lion_step_bench: PyTorch sees no CUDA device", file=sys.stderr)
        return 77

    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "init")
        procs = [ctx.Process(target=rank_main, args=(r, args.world, init_file, args, results))
                 for r in range(args.world)]
        for p in procs:
            p.start()
        deadline = time.monotonic() + args.timeout
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join()
    rows, errors = None, []
    while not results.empty():
        rank, kind, value = results.get()
        if kind == "rows":
            rows = value
        else:
            errors.append("rank %d: %s" % (rank, value))
    codes = [p.exitcode for p in procs]
    if errors or rows is None or any(c != 0 for c in codes):
        print("lion_step_bench: FAILED: exit codes %s %s" % (codes, "; ".join(errors)), file=sys.stderr)
        return 1

    dev = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    print("# lion_step_bench: %d parameters (fp32), %d ranks on %s, median of %d steps (slowest rank)"
          % (args.params, args.world, dev, args.steps))
    print("# %-16s %10s %10s %6s" % ("contender", "ms/step", "x single", "same"))
    single = rows[0][1]
    bad = False
    for name, sec, same in rows:
        print("  %-16s %10.3f %10.2f %6s" % (name, sec * 1e3, sec / single,
                                             "-" if name == "single" else "yes" if same else "NO"))
        bad |= name != "single" and not same
    if bad:
        print("lion_step_bench: FAILED: ranks' parameters differ after a distributed step", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
