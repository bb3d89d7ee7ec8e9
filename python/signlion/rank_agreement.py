"""How the ranks of a DistributedLion agree outside its steps: a channel (the host communicator's
fp32 sum all-reduce for CPU parameters, the process group's collectives for CUDA ones) with sum,
sum_start and broadcast_, rank 0's bytes sent through it, and the first difference between this
rank's description of its parameters and rank 0's."""
import json

import torch
import torch.distributed as dist

from . import capi


def _jsonable(v):
    if isinstance(v, torch.Tensor):
        return v.item()
    if isinstance(v, (tuple, list)):
        return [_jsonable(x) for x in v]
    return v


def _first_difference(mine, root):
    """The first entry where this rank's description differs from rank 0's, in words, or None."""
    for (name, value), (root_name, root_value) in zip(mine, root):
        if name != root_name:
            return "%s here where rank 0 has %s" % (name, root_name)
        if value != root_value:
            return "%s is %s here, %s on rank 0" % (name, json.dumps(value), json.dumps(root_value))
    if len(mine) != len(root):
        longer = mine if len(mine) > len(root) else root
        return "%s %s" % (longer[min(len(mine), len(root))][0], "here only" if longer is mine else "on rank 0 only")
    return None


class _HostChannel:
    """What the ranks agree through, CPU parameters: the host communicator's fp32 sum all-reduce."""

    def __init__(self, comm):
        self.comm, self.nranks, self.rank = comm, comm.nranks, comm.rank

    def sum(self, t):
        t = t.to(torch.float32).contiguous()
        out = torch.empty_like(t)
        if t.numel():
            self.comm.sum_all_reduce(t.data_ptr(), out.data_ptr(), t.numel(), capi.FLOAT32)
        return out

    def sum_start(self, t):
        out = self.sum(t)
        return lambda: out

    def broadcast_(self, flat):
        """flat (any dtype) becomes rank 0's. The others add -0.0, which changes no value (not even
        +0.0 or -0.0), so the sum is rank 0's tensor bit for bit (a NaN stays a NaN)."""
        x = flat.to(torch.float32)
        if self.rank != 0:
            x.fill_(-0.0)
        flat.copy_(self.sum(x))


class _ProcessGroupChannel:
    """CUDA parameters: the process group's own collectives (NCCL) on the parameters' GPU."""

    def __init__(self, group, device):
        self.group = group if group is not None else dist.group.WORLD
        self.device = device
        self.nranks, self.rank = dist.get_world_size(self.group), dist.get_rank(self.group)

    def sum_start(self, t):
        x = t.to(torch.float32).pin_memory().to(self.device, non_blocking=True)  # no wait for the GPU
        dist.all_reduce(x, group=self.group)
        return lambda: x.cpu()  # waits: only ranks that need the result call it

    def sum(self, t):
        return self.sum_start(t)()

    def broadcast_(self, flat):
        if hasattr(dist, "get_global_rank"):
            root = dist.get_global_rank(self.group, 0)
        else:  # torch < 2.0
            from torch.distributed import distributed_c10d as c10d
            root = c10d._get_global_rank(self.group, 0) if self.group is not dist.group.WORLD else 0
        dist.broadcast(flat, src=root, group=self.group)


def _broadcast_bytes(channel, data, root):
    """Rank `root`'s bytes on every rank, through the channel's sum (the others add zeros)."""
    lengths = torch.zeros(channel.nranks)
    lengths[channel.rank] = len(data)
    n = int(channel.sum(lengths)[root].item())
    buf = torch.zeros(n)
    if channel.rank == root:
        buf = torch.tensor(list(data), dtype=torch.float32)
    return bytes(channel.sum(buf).to(torch.uint8).tolist())
