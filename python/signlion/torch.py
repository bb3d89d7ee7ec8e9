"""signlion.torch.DistributedLion: Distributed Lion as a torch.optim.Optimizer.

Parameters are flattened into one bucket per (param group, dtype): each
parameter's .data becomes a view of the bucket, so the optimizer updates the
bucket in place with one call into libnccl-sign.so per bucket per step
(ncclSignLionStep: the two fused passes around one sign all-reduce).

CPU tensors use signlion's host communicator, bootstrapped through the
torch.distributed store of the process group (no extra address). CUDA tensors
use the ncclComm_t of the process group's NCCL backend (ProcessGroupNCCL's
_comm_ptr(), PyTorch 2.8 and later) and the current CUDA stream: a step is
enqueued there (ncclSignLionStepAsync) and never waits for the GPU.
"""
import contextlib
import itertools

import torch
import torch.distributed as dist

from . import capi

_DTYPES = {torch.float32: capi.FLOAT32, torch.float16: capi.FLOAT16, torch.bfloat16: capi.BFLOAT16}
_comm_serial = itertools.count()


def _store_of(group):
    """The store of the default process group (where torch.distributed keeps it in 1.13 and 2.x)."""
    from torch.distributed import distributed_c10d as c10d
    if hasattr(c10d, "_get_default_store"):
        return c10d._get_default_store()
    raise RuntimeError("signlion: cannot reach the torch.distributed store of this PyTorch")


def host_comm_from_process_group(group=None, zero_rule="positive", tie_rule="zero", store=None):
    """A host communicator over the ranks of `group` (default: WORLD), its unique id
    passed through the process group's store. Collective over the group."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("signlion: torch.distributed is not initialized; call init_process_group first "
                           "(or use aggregation='local')")
    group = group if group is not None else dist.group.WORLD
    nranks, rank = dist.get_world_size(group), dist.get_rank(group)
    store = store if store is not None else _store_of(group)
    members = "all" if group is dist.group.WORLD else "-".join(str(r) for r in dist.get_process_group_ranks(group))
    key = "signlion/hostcomm/%s/%d" % (members, next(_comm_serial))
    if rank == 0:
        uid = capi.get_unique_id()
        store.set(key, uid)
    else:
        uid = store.get(key)
    return capi.Comm(nranks, uid, rank, zero_rule=zero_rule, tie_rule=tie_rule)


# ProcessGroupNCCL._comm_ptr() (the raw ncclComm_t) appeared in this release.
_COMM_PTR_SINCE = "2.8"


def nccl_comm_from_process_group(group=None, device=None):
    """The ncclComm_t (an integer address) of the NCCL backend of `group` (default: WORLD) on
    `device` (default: the current CUDA device). PyTorch makes a group's communicator at its
    first collective on a device (unless init_process_group got device_id): when there is none
    yet, one all_reduce of a single element makes it, so call this on every rank of the group."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("signlion: torch.distributed is not initialized; call init_process_group('nccl') first "
                           "(or use aggregation='local')")
    group = group if group is not None else dist.group.WORLD
    device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    try:
        backend = group._get_backend(torch.device("cuda"))
    except (RuntimeError, AttributeError) as e:
        raise RuntimeError("signlion: CUDA tensors need a process group with an NCCL backend "
                           "(init_process_group('nccl') or backend='cpu:gloo,cuda:nccl'): %s" % e)
    comm_ptr = getattr(backend, "_comm_ptr", None)
    if comm_ptr is None:
        raise RuntimeError("signlion: CUDA tensors need the ncclComm_t of the process group, which PyTorch exposes "
                           "as ProcessGroupNCCL._comm_ptr() from version %s on; this is PyTorch %s with backend %s"
                           % (_COMM_PTR_SINCE, torch.__version__, type(backend).__name__))
    with torch.cuda.device(device):
        ptr = comm_ptr()
        if not ptr:
            dist.all_reduce(torch.zeros(1, device=device), group=group)
            ptr = comm_ptr()
    if not ptr:
        raise RuntimeError("signlion: the process group's NCCL backend has no communicator on %s" % device)
    return int(ptr)


class _Bucket:
    def __init__(self, group_index, dtype, params, device):
        self.group_index, self.dtype, self.params = group_index, dtype, params
        self.numel = sum(p.numel() for p in params)
        self.flat = torch.empty(self.numel, dtype=dtype, device=device)
        self.grad = torch.zeros(self.numel, dtype=dtype, device=device)
        self.slices = []
        offset = 0
        with torch.no_grad():
            for p in params:
                n = p.numel()
                self.flat[offset:offset + n].copy_(p.data.reshape(-1))
                p.data = self.flat[offset:offset + n].view_as(p)
                self.slices.append((offset, n, p.data.data_ptr()))
                offset += n
        self.lion = None


class DistributedLion(torch.optim.Optimizer):
    """Distributed Lion (Liu et al., Algorithm 1): each rank keeps its own momentum; the
    ranks' sign(c) are combined by majority vote ("mavo") or averaged ("average") through
    the sign all-reduce; "global" is plain Lion on the mean gradient (an fp32 sum
    all-reduce: the baseline); "local" does not communicate. Weight decay is decoupled,
    local, times lr, outside the sign. Options beyond the paper: master_weights (fp32
    master copy of fp16/bf16 parameters), momentum_average_every (Lion Cub), and
    skip_nonfinite (every rank skips a step where any rank's gradient holds inf/NaN).
    zero_rule / tie_rule set the vote rules (docs/SEMANTICS.md) of the host communicator, or,
    for CUDA tensors, of the NCCL communicator (ncclSignCommSetConfig: for every user of it).

    CUDA tensors (all parameters on one GPU) use the ncclComm_t of the process group's NCCL
    backend (PyTorch 2.8 or later) and the current stream; the optimizer state lives on that
    GPU. Call close() before destroying the process group.

    A parameter whose .grad is None keeps its value, as with torch.optim (a zero gradient would
    still vote, and decay); the bucket steps as a whole, so its momentum decays as for a zero
    gradient.
    """

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0, aggregation="mavo",
                 process_group=None, master_weights=False, momentum_average_every=0, skip_nonfinite=False,
                 zero_rule="positive", tie_rule="zero", comm=None):
        if aggregation not in capi.AGGREGATIONS:
            raise ValueError("aggregation must be one of %s, not %r" % (sorted(capi.AGGREGATIONS), aggregation))
        if not lr > 0.0:
            raise ValueError("lr must be > 0, not %r" % (lr,))
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError("betas must lie in [0, 1), not %r" % (betas,))
        if weight_decay < 0.0:
            raise ValueError("weight_decay must be >= 0, not %r" % (weight_decay,))
        super().__init__(params, dict(lr=lr, betas=tuple(betas), weight_decay=weight_decay))
        self.aggregation = aggregation
        self._options = dict(master_weights=master_weights, momentum_average_every=momentum_average_every,
                             skip_nonfinite=skip_nonfinite)
        devices = set()
        for group in self.param_groups:
            for p in group["params"]:
                if p.device.type not in ("cpu", "cuda"):
                    raise TypeError("signlion: parameters must be CPU or CUDA tensors, not %s" % p.device)
                if p.dtype not in _DTYPES:
                    raise TypeError("signlion: parameters must be fp32, fp16 or bf16, not %s" % p.dtype)
                devices.add(p.device)
        if len(devices) > 1:
            raise ValueError("signlion: parameters on several devices (%s); one optimizer takes the parameters of "
                             "one device" % ", ".join(sorted(str(d) for d in devices)))
        self.device = devices.pop() if devices else torch.device("cpu")
        self._comm = comm
        self._nccl_comm = None  # CUDA: the process group's ncclComm_t (0 for "local")
        if self.device.type == "cuda":
            if comm is not None:
                raise ValueError("signlion: comm is a host communicator; CUDA parameters use the process group's "
                                 "NCCL communicator")
            self._nccl_comm = 0
            if aggregation != "local":
                self._nccl_comm = nccl_comm_from_process_group(process_group, self.device)
                capi.nccl_comm_set_config(self._nccl_comm, zero_rule, tie_rule)
        elif aggregation != "local" and self._comm is None:
            self._comm = host_comm_from_process_group(process_group, zero_rule, tie_rule)
        self._buckets = []
        for gi, group in enumerate(self.param_groups):
            for dtype in (torch.float32, torch.bfloat16, torch.float16):
                ps = [p for p in group["params"] if p.dtype == dtype]
                if not ps:
                    continue
                b = _Bucket(gi, dtype, ps, self.device)
                with torch.cuda.device(self.device) if self.device.type == "cuda" else contextlib.nullcontext():
                    b.lion = capi.Lion(b.numel, _DTYPES[dtype], self._comm, lr=group["lr"], betas=group["betas"],
                                       weight_decay=group["weight_decay"], aggregation=aggregation,
                                       nccl_comm=self._nccl_comm, **self._options)
                self._buckets.append(b)

    @property
    def comm(self):
        """The host communicator (None for aggregation='local' and for CUDA parameters)."""
        return self._comm

    @property
    def nccl_comm(self):
        """CUDA parameters: the process group's ncclComm_t as an integer (0 for 'local'); else None."""
        return self._nccl_comm

    def close(self):
        """Frees the optimizer states now and, for CUDA parameters, what signlion cached for the
        process group's NCCL communicator (ncclSignCommRelease): call it before
        torch.distributed.destroy_process_group(). The optimizer cannot step afterwards."""
        for b in self._buckets:
            b.lion.destroy()
        self._buckets = []
        if self._nccl_comm:
            capi.nccl_comm_release(self._nccl_comm)
            self._nccl_comm = None

    def step_counts(self):
        """(applied, skipped) steps, from the first bucket."""
        return self._buckets[0].lion.step_counts() if self._buckets else (0, 0)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for b in self._buckets:
            group = self.param_groups[b.group_index]
            b.lion.set_hyperparameters(group["lr"], group["betas"], group["weight_decay"])
            frozen = []  # parameters without a gradient: their values are put back after the step
            for p, (offset, n, ptr) in zip(b.params, b.slices):
                if p.data.data_ptr() != ptr:
                    raise RuntimeError("signlion: a parameter's .data was replaced after the optimizer was made; "
                                       "copy into it in place (p.data.copy_(...)) instead")
                if p.grad is None:
                    b.grad[offset:offset + n].zero_()
                    frozen.append((p, p.data.clone()))
                else:
                    if p.grad.is_sparse:
                        raise RuntimeError("signlion: sparse gradients are not supported")
                    b.grad[offset:offset + n].copy_(p.grad.reshape(-1))
            if b.lion.on_device:
                b.lion.step_async(b.flat.data_ptr(), b.grad.data_ptr(),
                                  torch.cuda.current_stream(self.device).cuda_stream)
            else:
                b.lion.step(b.flat.data_ptr(), b.grad.data_ptr())
            for p, saved in frozen:
                p.data.copy_(saved)
        return loss

    def state_dict(self):
        groups = []
        index = 0
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            packed["params"] = list(range(index, index + len(g["params"])))
            index += len(g["params"])
            groups.append(packed)
        buckets = []
        for b in self._buckets:
            state = torch.empty(b.lion.state_size(), dtype=torch.uint8)
            b.lion.save_state_into(state.data_ptr(), state.numel())
            buckets.append({"group": b.group_index, "dtype": str(b.dtype), "numel": b.numel, "state": state})
        return {"state": {}, "param_groups": groups, "signlion": {"aggregation": self.aggregation,
                                                                   "buckets": buckets}}

    def load_state_dict(self, state_dict):
        saved = state_dict.get("signlion")
        if saved is None:
            raise ValueError("signlion: not a DistributedLion state_dict (no 'signlion' entry)")
        if saved["aggregation"] != self.aggregation:
            raise ValueError("signlion: state saved with aggregation %r, this optimizer uses %r" %
                             (saved["aggregation"], self.aggregation))
        layout = [(b.group_index, str(b.dtype), b.numel) for b in self._buckets]
        got = [(s["group"], s["dtype"], s["numel"]) for s in saved["buckets"]]
        if layout != got or len(state_dict["param_groups"]) != len(self.param_groups):
            raise ValueError("signlion: state of buckets %s, this optimizer has %s" % (got, layout))
        for g, sg in zip(self.param_groups, state_dict["param_groups"]):
            if len(sg["params"]) != len(g["params"]):
                raise ValueError("signlion: a param group of %d parameters, this optimizer's has %d" %
                                 (len(sg["params"]), len(g["params"])))
            for k, v in sg.items():
                if k != "params":
                    g[k] = tuple(v) if k == "betas" else v
        for b, s in zip(self._buckets, saved["buckets"]):
            state = s["state"].detach().to("cpu").contiguous()  # the library copies device state through host memory
            b.lion.load_state_from(state.data_ptr(), state.numel())
