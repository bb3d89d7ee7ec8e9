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

It keeps torch.optim's shape (param_groups read at every step, add_param_group,
state[p]["exp_avg"], torch's state_dict format) with the distributed part behind
it: the ranks check at construction that they hold the same parameters, take
rank 0's values, and agree at every step on which parameters have a gradient
(docs/LION.md, "As a torch.optim optimizer").
"""
import contextlib
import itertools
import json
import math

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


# The hyper-parameters of a param group: what torch.optim optimizers keep per group, checked
# across ranks (the flags select implementations in torch; see _check_group for what they mean here).
_HYPERPARAMETERS = ("lr", "betas", "weight_decay", "maximize", "foreach", "fused", "capturable", "differentiable")


def _check_group(group):
    """Raises ValueError for a param group's hyper-parameter that signlion cannot honour."""
    lr, betas, wd = group["lr"], group["betas"], group["weight_decay"]
    lr = float(lr)  # a tensor lr (torch 2.x) is read as its value
    if not (math.isfinite(lr) and lr >= 0.0):
        raise ValueError("signlion: lr must be finite and >= 0, not %r" % (group["lr"],))
    if len(betas) != 2 or not all(0.0 <= float(b) < 1.0 for b in betas):
        raise ValueError("signlion: betas must be two values in [0, 1), not %r" % (betas,))
    if not (math.isfinite(float(wd)) and float(wd) >= 0.0):
        raise ValueError("signlion: weight_decay must be finite and >= 0, not %r" % (wd,))
    for flag in ("foreach", "fused"):  # one fused call over a flat bucket is what both ask for
        if group[flag] not in (None, True, False):
            raise ValueError("signlion: %s must be None, True or False, not %r" % (flag, group[flag]))
    if group["capturable"]:
        raise ValueError("signlion: capturable=True is not supported: a step cannot be captured in a CUDA graph "
                         "(the host decides momentum averaging and the master copy's first fill when it enqueues "
                         "a step; docs/LION.md)")
    if group["differentiable"]:
        raise ValueError("signlion: differentiable=True is not supported: the update runs in libnccl-sign.so, "
                         "outside autograd")
    if group["maximize"] not in (True, False):
        raise ValueError("signlion: maximize must be True or False, not %r" % (group["maximize"],))


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


class _Bucket:
    """The parameters of one (param group, dtype) in one flat buffer, and its optimizer."""

    def __init__(self, group_index, dtype, params, indices, device):
        self.group_index, self.dtype, self.params, self.indices = group_index, dtype, params, indices
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
        self.has_master = False

    def save(self):
        """The state as bytes (a CPU uint8 tensor) and its momentum and master copy as fp32 views.
        Layout (docs/LION.md): a header, the momentum, then the master copy when there is one."""
        blob = torch.empty(self.lion.state_size(), dtype=torch.uint8)
        self.lion.save_state_into(blob.data_ptr(), blob.numel())
        header = blob.numel() - 4 * self.numel * (2 if self.has_master else 1)
        momentum = blob[header:header + 4 * self.numel].view(torch.float32)
        master = blob[header + 4 * self.numel:].view(torch.float32) if self.has_master else None
        return blob, header, momentum, master

    def load(self, blob):
        blob = blob.detach().to("cpu").contiguous()  # the library copies device state through host memory
        self.lion.load_state_from(blob.data_ptr(), blob.numel())


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

    As a torch.optim optimizer: param_groups (lr, betas, weight_decay, maximize, foreach, fused,
    capturable, differentiable) are read at every step, so schedulers work, lr = 0 included;
    add_param_group adds buckets; state[p]["exp_avg"] is the momentum (a copy; "master" too with
    master_weights, and "step"); state_dict() is torch's format and load_state_dict() also takes
    one saved by lion_pytorch.Lion. maximize ascends; foreach and fused are accepted (the step is
    always one fused call per bucket); capturable and differentiable are refused.

    Across ranks (every aggregation but "local"): at construction and in add_param_group (both
    collective) the ranks check that their parameters (count, shapes, dtypes) and group
    hyper-parameters are identical, a ValueError naming the first difference on every rank
    otherwise, and, with broadcast_parameters (the default), take rank 0's parameter values. At
    every step the ranks agree on which parameters have a gradient (one sum all-reduce of one
    float per parameter): a parameter with a gradient on some rank steps on every rank, with a
    zero gradient where a rank has None; one with a gradient on no rank keeps its value and its
    state on every rank, as torch optimizers skip it.

    CUDA tensors (all parameters on one GPU) use the ncclComm_t of the process group's NCCL
    backend (PyTorch 2.8 or later) and the current stream; the optimizer state lives on that
    GPU. Call close() before destroying the process group.
    """

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0, aggregation="mavo",
                 process_group=None, master_weights=False, momentum_average_every=0, skip_nonfinite=False,
                 zero_rule="positive", tie_rule="zero", comm=None, maximize=False, foreach=None, fused=None,
                 capturable=False, differentiable=False, broadcast_parameters=True):
        if aggregation not in capi.AGGREGATIONS:
            raise ValueError("aggregation must be one of %s, not %r" % (sorted(capi.AGGREGATIONS), aggregation))
        self._ready = False
        self._state_cache = None
        defaults = dict(lr=lr, betas=tuple(betas), weight_decay=weight_decay, maximize=maximize, foreach=foreach,
                        fused=fused, capturable=capturable, differentiable=differentiable)
        super().__init__(params, defaults)
        self.aggregation = aggregation
        self._options = dict(master_weights=master_weights, momentum_average_every=momentum_average_every,
                             skip_nonfinite=skip_nonfinite)
        self._rules = (zero_rule, tie_rule)
        devices = {p.device for g in self.param_groups for p in g["params"]}
        if len(devices) > 1:
            raise ValueError("signlion: parameters on several devices (%s); one optimizer takes the parameters of "
                             "one device" % ", ".join(sorted(str(d) for d in devices)))
        self.device = devices.pop() if devices else torch.device("cpu")
        self._comm = comm
        self._nccl_comm = None  # CUDA: the process group's ncclComm_t (0 for "local")
        self._channel = None  # how the ranks agree (None for "local")
        if self.device.type == "cuda":
            if comm is not None:
                raise ValueError("signlion: comm is a host communicator; CUDA parameters use the process group's "
                                 "NCCL communicator")
            self._nccl_comm = 0
            if aggregation != "local":
                self._nccl_comm = nccl_comm_from_process_group(process_group, self.device)
                capi.nccl_comm_set_config(self._nccl_comm, zero_rule, tie_rule)
                self._channel = _ProcessGroupChannel(process_group, self.device)
        elif aggregation != "local":
            if self._comm is None:
                self._comm = host_comm_from_process_group(process_group, zero_rule, tie_rule)
            self._channel = _HostChannel(self._comm)
        self._broadcast_parameters = broadcast_parameters
        self._buckets = []
        self._add_buckets(range(len(self.param_groups)))
        self._ready = True

    # torch.optim.Optimizer.__init__ assigns self.state; here it is made from the buckets.
    @property
    def state(self):
        """{parameter: {"exp_avg": fp32 momentum, "step": tensor, ["master": fp32 master copy]}},
        copies made from the optimizer's state (refreshed after each step or load)."""
        if not getattr(self, "_ready", False):
            return {}
        if self._state_cache is None:
            self._state_cache = self._collect_state()
        return self._state_cache

    @state.setter
    def state(self, value):
        if getattr(self, "_ready", False) and value:
            raise AttributeError("signlion: the state is the optimizer's own; use load_state_dict() to change it")

    def add_param_group(self, param_group):
        """As torch.optim's; after construction it is collective (every rank adds the same group)
        and makes new buckets, checked across ranks and broadcast from rank 0 like the first ones."""
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        try:
            _check_group(group)
            for p in group["params"]:
                if p.device.type not in ("cpu", "cuda"):
                    raise TypeError("signlion: parameters must be CPU or CUDA tensors, not %s" % p.device)
                if p.dtype not in _DTYPES:
                    raise TypeError("signlion: parameters must be fp32, fp16 or bf16, not %s" % p.dtype)
                if getattr(self, "_ready", False) and p.device != self.device:
                    raise ValueError("signlion: a parameter on %s; this optimizer's are on %s" % (p.device,
                                                                                               self.device))
        except Exception:
            self.param_groups.pop()
            raise
        if getattr(self, "_ready", False):
            try:
                self._add_buckets([len(self.param_groups) - 1])
            except Exception:
                self.param_groups.pop()
                raise
            self._state_cache = None

    def _param_indices(self):
        """Each parameter's index in state_dict() (torch's numbering: groups in order)."""
        out, i = {}, 0
        for g in self.param_groups:
            for p in g["params"]:
                out[id(p)] = i
                i += 1
        return out

    def _description(self, group_indices):
        """What must be identical on every rank, as [name, value] pairs (values JSON-able)."""
        d = [["aggregation", self.aggregation], ["options", _jsonable(sorted(self._options.items()))],
             ["vote rules", list(self._rules)], ["device type", self.device.type],
             ["number of param groups", len(self.param_groups)]]
        for gi in group_indices:
            g = self.param_groups[gi]
            d += [["group %d: %s" % (gi, k), _jsonable(g[k])] for k in _HYPERPARAMETERS]
            d.append(["group %d: number of parameters" % gi, len(g["params"])])
            d += [["group %d, parameter %d: shape, dtype" % (gi, j), [list(p.shape), str(p.dtype)]]
                  for j, p in enumerate(g["params"])]
        return json.loads(json.dumps(d))

    def _check_across_ranks(self, group_indices):
        ch = self._channel
        mine = self._description(group_indices)
        root = json.loads(_broadcast_bytes(ch, json.dumps(mine).encode(), 0).decode())
        diff = _first_difference(mine, root)
        flags = torch.zeros(ch.nranks)
        flags[ch.rank] = 1.0 if diff else 0.0
        bad = [r for r, f in enumerate(ch.sum(flags).tolist()) if f]
        if bad:
            first = _broadcast_bytes(ch, diff.encode() if ch.rank == bad[0] else b"", bad[0]).decode()
            raise ValueError("signlion: the ranks' parameters differ (every rank must give the optimizer the same "
                             "parameters, shapes, dtypes and hyper-parameters): on rank %d, %s; ranks differing from "
                             "rank 0: %s" % (bad[0], first, bad))

    def _add_buckets(self, group_indices):
        """Buckets for these param groups: checked across ranks, then rank 0's values everywhere."""
        if self._channel is not None and self._channel.nranks > 1:
            self._check_across_ranks(group_indices)
        index = self._param_indices()
        new = []
        for gi in group_indices:
            group = self.param_groups[gi]
            for dtype in (torch.float32, torch.bfloat16, torch.float16):
                ps = [p for p in group["params"] if p.dtype == dtype]
                if not ps:
                    continue
                b = _Bucket(gi, dtype, ps, [index[id(p)] for p in ps], self.device)
                b.has_master = bool(self._options["master_weights"]) and dtype != torch.float32
                with torch.cuda.device(self.device) if self.device.type == "cuda" else contextlib.nullcontext():
                    b.lion = capi.Lion(b.numel, _DTYPES[dtype], self._comm, lr=float(group["lr"]),
                                       betas=group["betas"], weight_decay=float(group["weight_decay"]),
                                       aggregation=self.aggregation, nccl_comm=self._nccl_comm, **self._options)
                new.append(b)
        if self._broadcast_parameters and self._channel is not None and self._channel.nranks > 1:
            with torch.no_grad():
                for b in new:
                    self._channel.broadcast_(b.flat)
        self._buckets += new

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
        self._state_cache = None
        if self._nccl_comm:
            capi.nccl_comm_release(self._nccl_comm)
            self._nccl_comm = None

    def step_counts(self):
        """(applied, skipped) steps, from the first bucket."""
        return self._buckets[0].lion.step_counts() if self._buckets else (0, 0)

    def _gradient_somewhere(self):
        """Per bucket, per parameter: whether some rank has a gradient for it (the same on every rank).
        One sum all-reduce of one float per parameter; a rank that has every gradient does not wait
        for its result (every parameter then has one somewhere)."""
        local = [[p.grad is not None for p in b.params] for b in self._buckets]
        if self._channel is None or self._channel.nranks == 1:
            return local
        flat = [x for per in local for x in per]
        result = self._channel.sum_start(torch.tensor(flat, dtype=torch.float32))
        if all(flat):
            return local
        counts, out, i = result().tolist(), [], 0
        for per in local:
            out.append([c > 0 for c in counts[i:i + len(per)]])
            i += len(per)
        return out

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._state_cache = None
        somewhere = self._gradient_somewhere()
        for b, active in zip(self._buckets, somewhere):
            if not any(active):
                continue  # no rank has a gradient for this bucket: skipped everywhere, state and all
            group = self.param_groups[b.group_index]
            b.lion.set_hyperparameters(float(group["lr"]), group["betas"], float(group["weight_decay"]))
            for p, (offset, n, ptr) in zip(b.params, b.slices):
                if p.data.data_ptr() != ptr:
                    raise RuntimeError("signlion: a parameter's .data was replaced after the optimizer was made; "
                                       "copy into it in place (p.data.copy_(...)) instead")
                g = b.grad[offset:offset + n]
                if p.grad is None:
                    g.zero_()
                else:
                    if p.grad.is_sparse:
                        raise RuntimeError("signlion: sparse gradients are not supported")
                    g.copy_(p.grad.reshape(-1))
                    if group["maximize"]:
                        g.neg_()
            idle = [(offset, n) for (offset, n, _), a in zip(b.slices, active) if not a]
            if idle:  # kept as they are: values, momentum and master copy
                before = b.save()
                values = [b.flat[o:o + n].clone() for o, n in idle]
            if b.lion.on_device:
                b.lion.step_async(b.flat.data_ptr(), b.grad.data_ptr(),
                                  torch.cuda.current_stream(self.device).cuda_stream)
            else:
                b.lion.step(b.flat.data_ptr(), b.grad.data_ptr())
            if idle:
                after = b.save()
                for (o, n), v in zip(idle, values):
                    b.flat[o:o + n].copy_(v)
                    after[2][o:o + n] = before[2][o:o + n]
                    if b.has_master:
                        after[3][o:o + n] = before[3][o:o + n]
                b.load(after[0])
        return loss

    def _collect_state(self):
        out = {}
        for b in self._buckets:
            _, _, momentum, master = b.save()
            applied, _ = b.lion.step_counts()
            for p, (o, n, _) in zip(b.params, b.slices):
                st = {"step": torch.tensor(float(applied)),
                      "exp_avg": momentum[o:o + n].clone().view(p.shape).to(p.device)}
                if master is not None:
                    st["master"] = master[o:o + n].clone().view(p.shape).to(p.device)
                out[p] = st
        return out

    def state_dict(self):
        """torch's format: {"state": {index: {"exp_avg", "step"[, "master"]}}, "param_groups": [...]},
        plus "signlion": the aggregation and, per bucket, its parameters and the header of its saved
        state (step counters), so that a load continues bit for bit."""
        index = self._param_indices()
        groups = []
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            packed["params"] = [index[id(p)] for p in g["params"]]
            groups.append(packed)
        state = {index[id(p)]: st for p, st in self.state.items()}
        buckets = []
        for b in self._buckets:
            blob, header, _, _ = b.save()
            buckets.append({"group": b.group_index, "dtype": str(b.dtype), "params": list(b.indices),
                            "header": blob[:header].clone()})
        return {"state": state, "param_groups": groups,
                "signlion": {"format": 2, "aggregation": self.aggregation, "buckets": buckets}}

    def load_state_dict(self, state_dict):
        """Takes what state_dict() returned (this version's or the earlier opaque format), or the
        state_dict of another Lion over the same parameters, e.g. lion_pytorch.Lion (per parameter
        "exp_avg"; missing entries are zero momentum, as for a parameter that never stepped). Not
        collective: each rank loads its own state."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError("signlion: the state has %d param groups, this optimizer %d" % (len(groups),
                                                                                         len(self.param_groups)))
        for gi, (g, sg) in enumerate(zip(self.param_groups, groups)):
            if len(sg["params"]) != len(g["params"]):
                raise ValueError("signlion: param group %d of the state has %d parameters, this optimizer's %d" %
                                 (gi, len(sg["params"]), len(g["params"])))
        saved = state_dict.get("signlion")
        if saved is not None and "format" not in saved:
            self._load_opaque(saved)
        else:
            self._load_per_parameter(state_dict, saved)
        for g, sg in zip(self.param_groups, groups):
            merged = dict(g)
            merged.update({k: (tuple(v) if k == "betas" else v) for k, v in sg.items() if k != "params"})
            for k in _HYPERPARAMETERS:
                merged.setdefault(k, self.defaults[k])
            _check_group(merged)
            g.update({k: v for k, v in merged.items() if k != "params"})
        self._state_cache = None

    def _load_opaque(self, saved):
        """The format of signlion before per-parameter state: one state blob per bucket."""
        if saved["aggregation"] != self.aggregation:
            raise ValueError("signlion: state saved with aggregation %r, this optimizer uses %r" %
                             (saved["aggregation"], self.aggregation))
        layout = [(b.group_index, str(b.dtype), b.numel) for b in self._buckets]
        got = [(s["group"], s["dtype"], s["numel"]) for s in saved["buckets"]]
        if layout != got:
            raise ValueError("signlion: a state of buckets %s (group, dtype, count), this optimizer has %s" %
                             (got, layout))
        for b, s in zip(self._buckets, saved["buckets"]):
            b.load(s["state"])

    def _load_per_parameter(self, state_dict, saved):
        state = state_dict["state"]
        # Saved indices are positions in the saved param_groups, which map one to one onto ours.
        saved_order = [i for g in state_dict["param_groups"] for i in g["params"]]
        ours = self._param_indices()
        position = {}
        for g in self.param_groups:
            for p in g["params"]:
                position[id(p)] = saved_order[ours[id(p)]]
        headers = {}
        if saved is not None:
            if saved.get("aggregation") != self.aggregation:
                raise ValueError("signlion: state saved with aggregation %r, this optimizer uses %r" %
                                 (saved.get("aggregation"), self.aggregation))
            layout = [(b.group_index, str(b.dtype), [position[id(p)] for p in b.params]) for b in self._buckets]
            got = [(s["group"], s["dtype"], list(s["params"])) for s in saved["buckets"]]
            if layout == got:  # the same buckets: their counters come back too
                headers = {i: s["header"] for i, s in enumerate(saved["buckets"])}
        blobs = []
        for bi, b in enumerate(self._buckets):
            blob, header, momentum, master = b.save()
            if bi in headers:
                h = headers[bi].detach().to("cpu", torch.uint8).reshape(-1)
                if h.numel() != header:
                    raise ValueError("signlion: bucket %d's saved header is %d bytes, this library's %d" %
                                     (bi, h.numel(), header))
                blob[:header] = h
            for p, (o, n, _) in zip(b.params, b.slices):
                key = position[id(p)]
                st = state.get(key, {})
                if st and "exp_avg" not in st:
                    raise ValueError("signlion: the state of parameter %d has no 'exp_avg' (it has %s): not a "
                                     "Lion state" % (key, sorted(st)))
                m = st.get("exp_avg")
                if m is None:
                    momentum[o:o + n] = 0.0
                else:
                    if m.numel() != n:
                        raise ValueError("signlion: parameter %d's exp_avg has shape %s, the parameter %s" %
                                         (key, tuple(m.shape), tuple(p.shape)))
                    momentum[o:o + n] = m.detach().reshape(-1).to("cpu", torch.float32)
                if master is not None:
                    src = st.get("master")
                    src = src if src is not None else p.detach()  # the master copy is the parameters' value
                    master[o:o + n] = src.reshape(-1).to("cpu", torch.float32)
            blobs.append(blob)
        for b, blob in zip(self._buckets, blobs):
            try:
                b.load(blob)
            except capi.SignError as e:
                raise ValueError("signlion: the saved state does not fit this optimizer (%s)" % e)
