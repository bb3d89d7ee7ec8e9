"""Ranks as spawned processes for the PyTorch tests: body(rank, world, init_file) runs in
each; a failure anywhere fails the caller with every rank's traceback."""
import functools
import os
import tempfile
import traceback

import torch.multiprocessing as mp


def _entry(rank, world, init_file, body, errors):
    try:
        body(rank, world, init_file)
    except Exception:
        errors.put("rank %d: %s" % (rank, traceback.format_exc()))
        raise


def run_ranks(world, body, *args, timeout=240):
    """Runs body(rank, world, init_file, *args) in `world` processes (spawned, so body and
    args must be picklable: module-level functions); init_file is a fresh file:// rendezvous
    path for torch.distributed. Raises AssertionError if any rank fails or hangs."""
    body = functools.partial(body, *args) if args else body
    ctx = mp.get_context("spawn")
    errors = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "init")
        procs = [ctx.Process(target=_entry, args=(r, world, init_file, body, errors)) for r in range(world)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout)
            if p.is_alive():
                p.kill()
        msgs = []
        while not errors.empty():
            msgs.append(errors.get())
        codes = [p.exitcode for p in procs]
    if msgs or any(c != 0 for c in codes):
        raise AssertionError("exit codes %s\n%s" % (codes, "\n".join(msgs)))


def _gloo_entry(module, scenario, rank, world, init_file):
    import importlib
    import torch.distributed as dist
    os.environ["SIGNLION_SOCKET_IFNAME"] = "lo"
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    getattr(importlib.import_module(module), scenario)(rank, world)
    dist.barrier()
    dist.destroy_process_group()


def run_gloo_ranks(world, module, scenario):
    """scenario(rank, world), a function of the test module `module` (by name), on `world`
    spawned ranks of a gloo process group (SIGNLION_SOCKET_IFNAME=lo)."""
    run_ranks(world, _gloo_entry, module, scenario)
