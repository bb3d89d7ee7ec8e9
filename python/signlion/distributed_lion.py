"""DistributedLion, Distributed Lion as a torch.optim.Optimizer (re-exported by signlion.torch,
whose docstring is the overview): its construction, gradient hooks and overlap with backward, the
step (delay 0 and 1), failures and the step timeline. Its buckets, state, hyper-parameter checks
and agreement across ranks live in lion_buckets, lion_state, lion_hyperparameters and
rank_agreement; its communicators come from process_groups."""
import contextlib
import functools
import json
import math
import threading
import weakref

import torch
import torch.distributed as dist

from . import capi
from .background import SerialExecutor as _SerialExecutor
from .background import exit_timeout as _exit_timeout
from .lion_buckets import _DTYPES, _Bucket, _group_buckets
from .lion_hyperparameters import _HYPERPARAMETERS, _WriteCountingGroup, _check_group, _check_options, _hyper_writes
from .lion_state import LionStateDict
from .parameter_owners import claim as _claim_parameters
from .parameter_owners import other_owners as _other_owners
from .parameter_owners import release as _release_parameters
from .process_groups import _as_float, checked_group, host_comm_from_process_group, nccl_comm_from_process_group
from .rank_agreement import _broadcast_bytes, _first_difference, _HostChannel, _jsonable, _ProcessGroupChannel
from .timeline import Timeline as _Timeline
from .timeline import bucket_track as _bucket_track
from .timeline import now_us as _now_us

_NCCL_INVALID_ARGUMENT = 4
_NCCL_INVALID_USAGE = 5  # what the host communicator returns when the ranks' calls do not match


class CommError(RuntimeError):
    """A step could not complete because the host communicator failed: a peer exited or froze, or
    its link broke, and no data came from it for the communicator's timeout (or its connection
    reported the loss at once). The communicator has been aborted, so the other ranks fail at
    once too, and the optimizer refuses every further step and state_dict(): what this rank
    applied of the failed step is undefined. Restart the job from a checkpoint (docs/PYTORCH.md,
    "When a rank fails"). Attributes: rank, nranks, timeout_s (the bound on a wait), result
    (the ncclResult_t). Calls that did not match across ranks (ncclInvalidUsage) are no
    CommError but a RuntimeError saying so, on the rank that found them: a restart would fail
    the same way."""

    def __init__(self, message, rank, nranks, timeout_s, result):
        super().__init__(message)
        self.rank, self.nranks, self.timeout_s, self.result = rank, nranks, timeout_s, result


# Elements of fp16/bf16 gradient unscaled (GradScaler) per pass through the fp32 scratch.
_UNSCALE_CHUNK = 1 << 20


def _grad_hook_path():
    """How a hook learns that a parameter's gradient is final in a backward: PyTorch 2.1 and
    later have Tensor.register_post_accumulate_grad_hook; before, a hook on the parameter's
    AccumulateGrad node (as DDP's reducer did) runs after the node has accumulated."""
    return "post_accumulate" if hasattr(torch.Tensor, "register_post_accumulate_grad_hook") else "grad_accumulator"


def _on_gradient_ready(optimizer_ref, bucket_index, position, *_):
    """The gradient hook of one parameter; holds the optimizer weakly (a hook lives as long as
    the parameter, which must not keep the optimizer alive)."""
    optimizer = optimizer_ref()
    if optimizer is not None:
        optimizer._gradient_ready(bucket_index, position)


class DistributedLion(LionStateDict, torch.optim.Optimizer):
    """Distributed Lion (Liu et al., Algorithm 1): each rank keeps its own momentum; the
    ranks' sign(c) are combined by majority vote ("mavo") or averaged ("average") through
    the sign all-reduce; "global" is plain Lion on the mean gradient (an fp32 sum
    all-reduce: the baseline); "local" does not communicate. Weight decay is decoupled,
    local, times lr, outside the sign. Options beyond the paper: master_weights (fp32
    master copy of fp16/bf16 parameters), momentum_average_every (Lion Cub), and
    skip_nonfinite (every rank skips a bucket's step where any rank's gradient in that bucket
    holds inf/NaN). zero_rule / tie_rule are this optimizer's vote rules (docs/SEMANTICS.md),
    carried by each of its sign all-reduces: other optimizers and sign_all_reduce calls on the
    same communicator keep their own.

    Buckets: the parameters of each (param group, dtype) are flattened, in reverse registration
    order, into buckets of at most bucket_cap_mb MiB (a larger parameter is a bucket of its own),
    like DDP's buckets; bucket_layout() lists them. Each bucket is one fused call per step.
    Within it (CPU tensors, mavo and average) three nested cuts, each bit for bit the uncut
    step (docs/LION.md, "A step"): the step runs in chunks of SIGNLION_LION_CHUNK elements
    (default 1M; read once, when the optimizer is made), one sign all-reduce per chunk while
    the passes over the chunks around it run; the host communicator runs a call in segments of
    SIGNLION_HOST_SEGMENT elements (default 32M), and each transfer of a segment in messages of
    SIGNLION_HOST_CHUNK_BYTES.

    Overlap (overlap=True, the default): during backward, a gradient hook on every parameter
    marks it ready; once all of a bucket's gradients are accumulated, its step (the Lion update
    and its sign all-reduce) starts at once, on a background thread (CPU tensors) or a side
    CUDA stream, while backward goes on. Buckets start strictly in bucket order on every rank
    (bucket k after 0..k-1: the ranks' collectives must come in the same order), so a bucket
    not complete at the end of backward (an unused parameter, a gradient that is None on this
    rank) and every bucket after it start in step(). A frozen parameter (requires_grad=False)
    is not waited for. step() starts what is left, waits for all of it, and returns; an error
    of a background step is raised by step() (or the next call) naming the bucket.

    Between backward() and step() (docs/PYTORCH.md): a step uses the gradients and the
    hyper-parameters as they are when step() is called, with overlap on or off alike, so
    clip_grad_norm_, GradScaler (scaler.step(opt)), a learning rate set before step() and any
    other change of .grad work as with any torch optimizer. The first step tells the optimizer
    what the loop does: if it changes a gradient (its version counter moves, or .grad is
    replaced) or a hyper-parameter between backward() and step(), or a GradScaler drives the
    step, every later step starts its buckets in step() (the overlap with backward is given
    up, since a clipped gradient is only known once backward is over); otherwise buckets start
    during backward from the second step on, and a later step that finds such a change raises
    RuntimeError on every rank rather than use the gradient it read during backward.
      - every backward outside no_sync() that completes a bucket steps it (once overlapping),
        whether step() follows or not (inspect gradients inside no_sync());
      - gradient accumulation over several backward passes needs `with opt.no_sync():` around
        all but the last (as with DDP): inside it, backward only accumulates; a gradient that
        arrives for a bucket already started since the last step() is a RuntimeError;
      - skip_nonfinite decides per bucket; with a GradScaler a step with an inf or NaN on any
        rank is skipped on every rank, nothing touched (each rank's scaler still backs off
        from its own infs only, on torch 2.x).
    overlap=False keeps every step inside step() (the same buckets: results are bit for bit
    those of overlap=True).

    Gradients: each parameter's .grad becomes a view into its bucket's gradient buffer (as
    DDP's gradient_as_bucket_view: one copy of the gradients, not two); with
    zero_grad(set_to_none=False) backward accumulates straight into it. A parameter listed
    twice (tied weights) is one parameter; parameters keep their memory format
    (channels_last); frozen parameters get buckets of their own and cost nothing per step
    (parameters frozen or unfrozen later are moved at the step that finds them so, every rank
    alike).

    As a torch.optim optimizer: param_groups (lr, betas, weight_decay, maximize, foreach, fused,
    capturable, differentiable) are read at every step, so schedulers work, lr = 0 included;
    add_param_group adds buckets; state[p]["exp_avg"] is the momentum (a copy; "master" too with
    master_weights, and "step"); state_dict() is torch's format and load_state_dict() also takes
    one saved by lion_pytorch.Lion; both run PyTorch 2.x's state-dict hooks as torch.optim's do.
    maximize ascends; foreach and fused are accepted (the step is always one fused call per
    bucket); capturable and differentiable are refused. A bad argument or hyper-parameter (also
    one written into param_groups later) is a ValueError or TypeError naming it and its param
    group. A parameter belongs to one open DistributedLion at a time: one made later over it
    takes it over and closes the earlier one (whose later calls raise, saying so).

    Across ranks (every aggregation but "local"): at construction and in add_param_group (both
    collective) the ranks check that their parameters (count, shapes, dtypes, requires_grad),
    group hyper-parameters and the settings that shape the collectives (aggregation, options,
    vote rules, bucket_cap_mb, overlap, broadcast_parameters) are identical, a ValueError
    naming the first difference on every rank otherwise, and, with broadcast_parameters (the default), take rank 0's parameter values. At
    every step the ranks agree on which parameters have a gradient (a sum all-reduce of one float
    per parameter: one per step without overlap, one per bucket with it): a parameter with a
    gradient on some rank steps on every rank, with a zero gradient where a rank has None; one
    with a gradient on no rank keeps its value and its state on every rank, as torch optimizers
    skip it.

    Failures (CPU tensors): every wait of the host communicator for a peer is bounded by `timeout`
    (a datetime.timedelta or seconds), by default the process group's own timeout, the one
    init_process_group(timeout=...) set (process_group_timeout; PyTorch's default is 30 minutes);
    without one, SIGNLION_TIMEOUT_MS (60 s). A peer that exits, freezes or loses its link makes
    the step fail on every other rank within that time with CommError (a RuntimeError naming this
    rank, the bucket, the timeout and the library's error), raised by step() or, with overlap, by
    the next gradient hook or step(); the communicator is aborted at once (no thread stays
    blocked on it, and the peers still waiting fail too) and the optimizer refuses every further
    step and state_dict(). Any other error inside a step on one rank (a replaced .data, a sparse
    gradient, KeyboardInterrupt) aborts the communicator too, so the peers get CommError at
    once rather than after the timeout. Restart the job from a checkpoint (docs/PYTORCH.md, "When a rank fails").
    Calls that differ across ranks (a parameter frozen on one rank only) are no lost peer: the
    rank that finds them raises a RuntimeError saying so (not CommError: a restart fails alike).

    CUDA tensors (all parameters on one GPU) use the ncclComm_t of the process group's NCCL
    backend (PyTorch 2.8 or later) and the current stream; the optimizer state lives on that
    GPU. Call close() before destroying the process group; every later call raises.

    Timeline: start_trace() records, until stop_trace(), when each bucket's gradients were ready,
    when its step started, the library's phases (pass 1 = this rank's vote, the sign all-reduce
    chunk by chunk, pass 2 = the update applied) and the waits in step(); export_chrome_trace(path)
    writes them as torch.profiler does (Trace Event JSON, for chrome://tracing or ui.perfetto.dev;
    docs/TRAINING.md, "Where a step's time goes"). Off by default: then no clock is read and nothing
    is recorded. CUDA parameters: the events of the host only (the library's phases run on the GPU).

    Delayed vote (delay=1; 0, the default, is the synchronous step above): step t applies the
    vote of step t-1 while step t's vote travels during the next forward and backward (the
    pipelining of Pipe-SGD), so a step can approach max(compute, wire) instead of compute plus
    the wire time of the last bucket's vote. Per bucket, step() of step t (t = 1, 2, ...):
      1. starts step t's vote from a copy of this step's gradients on the background thread,
         queued behind step t-1's (the library's step: c_t = beta1 m_{t-1} + (1-beta1) g_t voted
         and sign all-reduced, m_t = beta2 m_{t-1} + (1-beta2) g_t at once, with step t's betas);
      2. waits for the votes started by step t-1 (the step's only wait for the wire);
      3. applies u_{t-1}, the update the ranks agreed at step t-1 (majority or average of their
         sign(c_{t-1}), or sign of the mean gradient's c for "global"): p = p - lr_t * (u_{t-1} +
         wd_t * p) per element in fp32, each operation rounded once (the library's pass 2), lr_t
         and wd_t this step's param_groups values (what a scheduler set for step t scales the
         update applied at step t), and returns. Step 1 has no earlier vote and applies nothing,
         not even weight decay: waiting for its own vote would make it synchronous and then
         either apply one vote twice or leave one out; so T steps apply T-1 votes, each exactly
         once.
    Every rank applies the same u_{t-1}. A parameter without a gradient votes with a zero
    gradient (there is no per-step agreement round with delay=1: its momentum still decays and
    votes); frozen buckets (requires_grad=False) do not vote. zero_grad() and the next backward
    do not touch the vote in flight (it reads its copy). state, state_dict() and step_counts()
    wait for it; state[p]["delayed_update"] (fp32) is the agreed update the next step applies,
    saved and restored by state_dict()/load_state_dict(), so 2K steps equal K steps + save +
    load + K steps bit for bit (a state without it, e.g. saved with delay=0, applies nothing at
    the next step; a delay=0 optimizer ignores it). close() waits for the vote in flight and
    drops it, unapplied. step() starts step t's votes before it waits for and applies step
    t-1's, so the link goes from one step's votes to the next without a gap; this costs four more
    buffers of a bucket's size (two copies of the gradients and two agreed updates, step t-1's
    and step t's) and fp32 work space for the apply. Not with CUDA parameters,
    master_weights, skip_nonfinite or a GradScaler (ValueError or RuntimeError), nor
    aggregation="average" with fp16/bf16 parameters. With delay=1 votes start in step() only, so
    overlap changes nothing in the results (its hooks only adopt the gradients). Whether the
    delay keeps a model's convergence must be checked per model.

    Debugging: launch_observer, when set to a callable, is called as observer(event,
    bucket_index, in_backward) with event "launch" (on the thread that starts the bucket: the
    backward's, or step()'s), "run" and "done" (when its step begins and ends: on the
    background thread for CPU tensors; when it is enqueued for CUDA tensors).
    """

    # GradScaler.step() then always calls step(), which skips a step with an inf or NaN on every
    # rank alike (a rank-local skip would leave the others waiting in the collective).
    _step_supports_amp_scaling = True

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0, aggregation="mavo",
                 process_group=None, master_weights=False, momentum_average_every=0, skip_nonfinite=False,
                 zero_rule="positive", tie_rule="zero", comm=None, maximize=False, foreach=None, fused=None,
                 capturable=False, differentiable=False, broadcast_parameters=True, overlap=True,
                 bucket_cap_mb=25.0, timeout=None, delay=0):
        if aggregation not in capi.AGGREGATIONS:
            raise ValueError("signlion: aggregation must be one of %s, not %r" % (sorted(capi.AGGREGATIONS),
                                                                               aggregation))
        if overlap not in (True, False):
            raise ValueError("signlion: overlap must be True or False, not %r" % (overlap,))
        _check_options(master_weights, momentum_average_every, skip_nonfinite)
        if process_group is not None:
            checked_group(process_group)  # before any collective: a non-member would wait for the members
        if isinstance(delay, bool) or delay not in (0, 1):
            raise ValueError("signlion: delay must be 0 (each step applies its own vote) or 1 (each step applies "
                             "the previous step's vote), not %r" % (delay,))
        if delay and master_weights:
            raise ValueError("signlion: delay=1 does not take master_weights=True (the delayed update is applied "
                             "outside the library, which keeps the master copy)")
        if delay and skip_nonfinite:
            raise ValueError("signlion: delay=1 does not take skip_nonfinite=True (a skipped vote is only known "
                             "after the next forward and backward have used the parameters)")
        cap = _as_float(bucket_cap_mb)
        if not cap > 0.0:
            raise ValueError("signlion: bucket_cap_mb must be a number > 0 (MiB; inf for one bucket per "
                             "param group and dtype), not %r" % (bucket_cap_mb,))
        self._ready = False
        self._state_cache = None
        betas = tuple(betas) if isinstance(betas, (tuple, list)) else betas  # anything else: refused by name
        defaults = dict(lr=lr, betas=betas, weight_decay=weight_decay, maximize=maximize, foreach=foreach,
                        fused=fused, capturable=capturable, differentiable=differentiable)
        super().__init__(params, defaults)
        self.aggregation = aggregation
        self.overlap = overlap
        self.delay = int(delay)
        self.bucket_cap_mb = cap
        self.launch_observer = None
        self._timeline = None  # a signlion.timeline.Timeline while a trace is on
        self._options = dict(master_weights=master_weights, momentum_average_every=momentum_average_every,
                             skip_nonfinite=skip_nonfinite)
        self._rules = (zero_rule, tie_rule)
        devices = {p.device for g in self.param_groups for p in g["params"]}
        if len(devices) > 1:
            raise ValueError("signlion: parameters on several devices (%s); one optimizer takes the parameters of "
                             "one device" % ", ".join(sorted(str(d) for d in devices)))
        self.device = devices.pop() if devices else torch.device("cpu")
        self._comm = comm
        self._owns_comm = comm is None  # a comm given stays the caller's: a failure does not abort it
        self._nccl_comm = None  # CUDA: the process group's ncclComm_t (0 for "local")
        self._channel = None  # how the ranks agree (None for "local")
        if self.device.type == "cuda" and self.delay:
            raise ValueError("signlion: delay=1 is implemented for CPU parameters only (its vote travels on the "
                             "host communicator's background thread); CUDA parameters take delay=0")
        if self.device.type == "cuda":
            if comm is not None:
                raise ValueError("signlion: comm is a host communicator; CUDA parameters use the process group's "
                                 "NCCL communicator")
            if timeout is not None:
                raise ValueError("signlion: timeout bounds the host communicator; CUDA parameters use the process "
                                 "group's NCCL communicator, whose collectives the process group's timeout bounds")
            self._nccl_comm = 0
            if aggregation != "local":
                self._nccl_comm = nccl_comm_from_process_group(process_group, self.device)
                self._channel = _ProcessGroupChannel(process_group, self.device)
        elif aggregation != "local":
            if self._comm is None:
                self._comm = host_comm_from_process_group(process_group, zero_rule, tie_rule, timeout=timeout)
            elif timeout is not None:
                raise ValueError("signlion: timeout is for the host communicator the optimizer makes; a comm given "
                                 "keeps its own (capi.Comm(timeout_ms=...))")
            self._channel = _HostChannel(self._comm)
        self._broadcast_parameters = broadcast_parameters
        self._buckets = []
        # Overlap: the next bucket to launch, whether backward launches (not inside no_sync()),
        # what runs the launched steps, and the first error of a launched step.
        self._lock = threading.RLock()
        self._closed = False
        self._comm_aborted = False
        self._abort_lock = threading.Lock()
        # Overlap: "probe" until the first step tells whether the loop changes gradients or
        # hyper-parameters between backward() and step(); then "overlap" (buckets start in
        # backward) or "deferred" (they start in step()). _hyper_seen: the hyper-parameters when
        # this backward's first gradient was ready, and _hyper_writes_seen the writes of them
        # counted by then (a write of an equal value is a loop that sets them there too).
        self._mode = "probe" if not self.delay else "delayed"  # delayed: votes start in step() only
        self._hyper_seen = None
        self._hyper_writes_seen = None
        self._hooks_fire_twice = False
        self._unscale_scratch = None  # GradScaler's unscaling of fp16/bf16 buckets
        self._next_launch = 0
        self._accumulating = False
        self._executor = None
        self._side_stream = None
        self._failure = None
        if overlap or self.delay:
            if self.device.type == "cuda":
                self._side_stream = torch.cuda.Stream(self.device)
            else:
                self._executor = _SerialExecutor("signlion-lion-steps", exit_timeout=_exit_timeout(self._comm))
        self._add_buckets(range(len(self.param_groups)))
        self._ready = True

    # torch.optim.Optimizer.__init__ assigns self.state; here it is made from the buckets.
    @property
    def state(self):
        """{parameter: {"exp_avg": fp32 momentum, "step": tensor, ["master": fp32 master copy],
        ["delayed_update": fp32, delay=1's vote in flight]}}, copies made from the optimizer's
        state (refreshed after each step or load)."""
        if not getattr(self, "_ready", False):
            return {}
        if self._state_cache is None:
            self._wait_in_flight()
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
        # Kept as a dict that counts hyper-parameter writes (the probe of overlap reads them). The
        # group is this copy from here on, as after torch's own load_state_dict.
        group = self.param_groups[-1] = _WriteCountingGroup(self.param_groups[-1])
        try:
            _check_group(group, len(self.param_groups) - 1)
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
                self._wait_in_flight()  # the host communicator is the calling thread's from here
                self._add_buckets([len(self.param_groups) - 1])
            except Exception:
                self.param_groups.pop()
                raise
            self._state_cache = None

    def _param_indices(self):
        """Each parameter's index in state_dict() (torch's numbering: groups in order, a
        parameter listed twice numbered where it first appears)."""
        out, i = {}, 0
        for g in self.param_groups:
            for p in g["params"]:
                out.setdefault(id(p), i)
                i += 1
        return out

    def _description(self, group_indices):
        """What must be identical on every rank, as [name, value] pairs (values JSON-able)."""
        d = [["aggregation", self.aggregation], ["options", _jsonable(sorted(self._options.items()))],
             ["vote rules", list(self._rules)], ["device type", self.device.type],
             ["bucket_cap_mb", self.bucket_cap_mb if math.isfinite(self.bucket_cap_mb) else "inf"],
             ["overlap", self.overlap], ["delay", self.delay],
             ["broadcast_parameters", bool(self._broadcast_parameters)],
             ["number of param groups", len(self.param_groups)]]
        for gi in group_indices:
            g = self.param_groups[gi]
            d += [["group %d: %s" % (gi, k), _jsonable(g[k])] for k in _HYPERPARAMETERS]
            d.append(["group %d: number of parameters" % gi, len(g["params"])])
            d += [["group %d, parameter %d: shape, dtype, requires_grad" % (gi, j),
                   [list(p.shape), str(p.dtype), bool(p.requires_grad)]] for j, p in enumerate(g["params"])]
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

    def _requires_grad_pattern(self):
        return tuple(bool(p.requires_grad) for g in self.param_groups for p in g["params"])

    def _add_buckets(self, group_indices, broadcast=True):
        """Buckets for these param groups: checked across ranks, then rank 0's values everywhere."""
        if self._channel is not None and self._channel.nranks > 1:
            self._check_across_ranks(group_indices)
        # Another open optimizer over some of these parameters: its steps in flight still read
        # them; once they are done, the buckets made here take the parameters' values.
        for owner in _other_owners([p for gi in group_indices for p in self.param_groups[gi]["params"]], self):
            owner._wait_in_flight(raise_failure=False)
        index = self._param_indices()
        cap_bytes = self.bucket_cap_mb * 1024 * 1024
        new = []
        for gi in group_indices:
            group = self.param_groups[gi]
            for ps in _group_buckets(group["params"], index, cap_bytes):
                if self.delay and self.aggregation == "average" and ps[0].dtype != torch.float32:
                    raise ValueError("signlion: delay=1 with aggregation='average' takes fp32 parameters only (the "
                                     "averaged update in flight is kept in the parameters' dtype, and %s would "
                                     "round it)" % ps[0].dtype)
                b = _Bucket(len(self._buckets) + len(new), gi, ps[0].dtype, ps, [index[id(p)] for p in ps],
                            self.device)
                b.has_master = bool(self._options["master_weights"]) and b.dtype != torch.float32
                with torch.cuda.device(self.device) if self.device.type == "cuda" else contextlib.nullcontext():
                    b.lion = capi.Lion(b.numel, _DTYPES[b.dtype], self._comm, lr=float(group["lr"]),
                                       betas=group["betas"], weight_decay=float(group["weight_decay"]),
                                       aggregation=self.aggregation, nccl_comm=self._nccl_comm,
                                       zero_rule=self._rules[0], tie_rule=self._rules[1], **self._options)
                new.append(b)
        if broadcast and self._broadcast_parameters and self._channel is not None and self._channel.nranks > 1:
            with torch.no_grad():
                for b in new:
                    self._channel.broadcast_(b.flat)
        if self._timeline is not None and self.device.type != "cuda":
            for b in new:
                b.lion.record_phases(True)
        self._buckets += new
        for owner in _claim_parameters([p for b in new for p in b.params], self):
            # Its buckets no longer hold these parameters, and its hooks must not adopt their
            # gradients: it is closed, and says why when used (docs/PYTORCH.md).
            owner._closed_why = "a DistributedLion made later over its parameters took them over"
            owner.close()
        self._layout_pattern = self._requires_grad_pattern()
        if self.overlap:
            self._register_hooks(new)

    def _rebucket_if_frozen_changed(self):
        """When parameters were frozen or unfrozen since the buckets were made, makes the buckets
        anew (frozen ones apart, as at construction) and moves the state into them (momenta,
        master copies and counters, as a load across layouts does): a trainable bucket would
        otherwise keep its frozen part as it is by copying its whole state at every step. Every
        rank freezes alike, so every rank makes the same buckets at the same step (checked
        across ranks as at construction)."""
        if self._requires_grad_pattern() == self._layout_pattern:
            return
        saved = self._buckets_state_dict()  # without the user's state-dict hooks: not a save
        for b in self._buckets:
            for h in b.hook_handles:
                h.remove()
            b.lion.destroy()
        self._buckets = []
        self._next_launch = 0
        self._add_buckets(range(len(self.param_groups)), broadcast=False)
        self._load_buckets_state_dict(saved)

    def bucket_layout(self):
        """The buckets in launch order: [{"group", "dtype", "params" (indices as in state_dict()),
        "numel", "bytes"}]."""
        return [{"group": b.group_index, "dtype": str(b.dtype), "params": list(b.indices), "numel": b.numel,
                 "bytes": b.numel * b.flat.element_size()} for b in self._buckets]

    @property
    def comm(self):
        """The host communicator (None for aggregation='local' and for CUDA parameters)."""
        return self._comm

    @property
    def nccl_comm(self):
        """CUDA parameters: the process group's ncclComm_t as an integer (0 for 'local'); else None."""
        return self._nccl_comm

    def close(self):
        """Waits for the steps in flight, frees the optimizer states now and, for CUDA parameters,
        what signlion cached for the process group's NCCL communicator (ncclSignCommRelease): call
        it before torch.distributed.destroy_process_group(). Every later step(), state_dict() or
        load_state_dict() raises RuntimeError."""
        self._closed = True
        try:
            self._wait_in_flight(raise_failure=False)
        finally:
            for b in self._buckets:
                for h in b.hook_handles:
                    h.remove()
                b.hook_handles, b.grad_accumulators, b.hooked = [], [], set()
                b.lion.destroy()
            self._buckets = []
            _release_parameters(self)
            self._state_cache = None
            if self._executor is not None:
                self._executor.close()
            if self._nccl_comm:
                capi.nccl_comm_release(self._nccl_comm)
                self._nccl_comm = None

    def start_trace(self):
        """Starts recording the step timeline (see the class's "Timeline"); call it between steps.
        A trace already on is discarded and started again. Not collective."""
        self._wait_in_flight()
        # The trace's pid: the rank in the default group (the same across the optimizers of subgroups).
        if dist.is_available() and dist.is_initialized():
            rank = dist.get_rank()
        else:
            rank = self._channel.rank if self._channel is not None else 0
        timeline = _Timeline(rank)
        if self.device.type != "cuda":
            for b in self._buckets:
                b.lion.record_phases(True)
        for b in self._buckets:
            b.trace_ready = b.trace_launch = None
        self._timeline = timeline

    def stop_trace(self):
        """Stops recording (after the steps in flight); what was recorded stays for
        export_chrome_trace() and trace_events() until the next start_trace()."""
        self._wait_in_flight(raise_failure=False)
        timeline, self._timeline = self._timeline, None
        if self.device.type != "cuda":
            for b in self._buckets:
                b.lion.record_phases(False)
        if timeline is not None:
            self._last_timeline = timeline

    def _recorded_timeline(self):
        timeline = self._timeline if self._timeline is not None else getattr(self, "_last_timeline", None)
        if timeline is None:
            raise RuntimeError("signlion: no trace was recorded: call start_trace() before the steps to trace")
        return timeline

    def trace_events(self):
        """The recorded timeline as torch.profiler's chrome trace: {"traceEvents": [...]} (of the
        trace on, or the last one stopped)."""
        self._wait_in_flight(raise_failure=False)
        return self._recorded_timeline().chrome_trace()

    def export_chrome_trace(self, path):
        """Writes trace_events() to `path` as JSON, like torch.profiler.profile.export_chrome_trace:
        open it in chrome://tracing or ui.perfetto.dev."""
        trace = self.trace_events()
        with open(path, "w") as f:
            json.dump(trace, f)

    def _trace_launch(self, timeline, b, launched_us, ready_us=None):
        """Notes when bucket b's step started and when its gradients were ready: ready_us when
        given, else its last hook in this backward when backward completed it, else the start."""
        ready = launched_us if ready_us is None else ready_us
        if ready_us is None and b.trace_ready is not None and b.complete_in_backward():
            ready = min(b.trace_ready[1], launched_us)
        b.trace_launch = (timeline.step, ready, launched_us)
        b.trace_ready = None

    def _trace_bucket_step(self, timeline, b, begin_us):
        """After bucket b's step on this thread: the library call, its phases and the bucket's span."""
        end = _now_us()
        step, ready, launched = b.trace_launch if b.trace_launch is not None else (timeline.step, begin_us, begin_us)
        timeline.add("lion step b%d" % b.index, begin_us, end, step=step, bucket=b.index)
        if not b.lion.on_device:
            timeline.add_library_phases(b.index, step, b.lion.phases())
        timeline.add("bucket %d" % b.index, ready, end, tid=_bucket_track(b.index), step=step, bucket=b.index,
                     numel=b.numel, ready_to_start_us=launched - ready, start_to_applied_us=end - launched)

    def step_counts(self):
        """(applied, skipped) steps, from the first bucket."""
        self._wait_in_flight()
        return self._buckets[0].lion.step_counts() if self._buckets else (0, 0)

    @contextlib.contextmanager
    def no_sync(self):
        """A context in which backward passes only accumulate gradients (as DDP's no_sync()):
        no bucket starts its step. Run every backward of an accumulation but the last inside
        it; the last one, outside, starts the buckets. Without overlap it changes nothing."""
        previous, self._accumulating = self._accumulating, True
        try:
            yield
        finally:
            self._accumulating = previous

    # ---- overlap: hooks, launches, waits ----

    def _register_hooks(self, buckets):
        """A gradient hook on every parameter of these buckets that requires a gradient and has
        none yet (step() calls it again for parameters unfrozen since)."""
        path = _grad_hook_path()
        me = weakref.ref(self)
        for b in buckets:
            for j, p in enumerate(b.params):
                if j in b.hooked or not p.requires_grad:
                    continue
                hook = functools.partial(_on_gradient_ready, me, b.index, j)
                if path == "post_accumulate":
                    b.hook_handles.append(p.register_post_accumulate_grad_hook(hook))
                else:
                    with torch.enable_grad():
                        accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
                    b.hook_handles.append(accumulator.register_hook(hook))
                    b.grad_accumulators.append(accumulator)  # the node lives as long as a reference to it
                b.hooked.add(j)

    def _hyperparameters(self, group_index):
        # Checked at every read: a value a schedule or the loop wrote is refused naming it and its group.
        return _check_group(self.param_groups[group_index], group_index)

    def _all_hyperparameters(self):
        return [self._hyperparameters(gi) for gi in range(len(self.param_groups))]

    def _gradient_ready(self, bucket_index, position):
        """A parameter's gradient is final in this backward: its .grad becomes the bucket's view;
        when overlapping, what is complete launches, in order."""
        if not self._ready or self._closed:
            return
        with self._lock:
            self._raise_failure()
            if bucket_index >= len(self._buckets):
                return
            b = self._buckets[bucket_index]
            if b.launched:
                # Autograd has already accumulated into the gradient the started step reads: the
                # step's result is undefined, so the optimizer fails (and its peers with it).
                error = RuntimeError(
                    "signlion: a gradient of parameter %d arrived in a backward pass after its %s had started "
                    "its step (overlap=True starts a bucket's step during backward, as soon as its gradients are "
                    "ready, so gradients cannot be accumulated over several backward passes that way): run all "
                    "but the last backward of an accumulation inside `with optimizer.no_sync():`, call step() "
                    "after each backward, or make the optimizer with overlap=False. A backward meant for "
                    "another optimizer counts too (a GAN's generator loss through the discriminator this "
                    "optimizer steps): freeze these parameters with requires_grad_(False) during it"
                    % (b.indices[position], b.describe()))
                self._fail(b, error)
                raise error
            with self._aborting_on_failure(b):
                b.adopt(position)
            if self._accumulating:
                return
            if self._hyper_seen is None:  # the first gradient of this backward
                self._hyper_seen = self._all_hyperparameters()
                self._hyper_writes_seen = _hyper_writes(self.param_groups)
            if position in b.ready:
                # A second gradient in one backward (a weight used in two reentrant checkpointed
                # segments): overlapping would start the bucket before the last of them.
                self._hooks_fire_twice = True
            b.ready.add(position)
            timeline = self._timeline
            if timeline is not None:
                t = _now_us()
                if b.trace_ready is None:
                    b.trace_ready = [t, t]
                b.trace_ready[1] = t
                if b.complete_in_backward():
                    timeline.add("gradients b%d" % b.index, b.trace_ready[0], t, step=timeline.step, bucket=b.index)
            b.seen_version = b.grad._version
            if self._mode == "probe":
                with self._aborting_on_failure(b):
                    b.record_probe(position)
            if self._mode == "overlap":
                self._launch_in_order(in_backward=True)

    def _launch_in_order(self, in_backward):
        """Launches the buckets from the next one on: in backward while they are complete; in
        step() all of them."""
        while self._next_launch < len(self._buckets):
            b = self._buckets[self._next_launch]
            if in_backward and not b.complete_in_backward():
                return
            self._next_launch += 1
            self._launch(b, in_backward)

    def _launch(self, b, in_backward):
        """Starts bucket b's step: which parameters have a gradient and the hyper-parameters are
        taken now (a missing gradient's slice is zeroed here, on the thread that owns the
        gradients); the step reads the gradients from the bucket's buffer."""
        timeline = self._timeline
        if timeline is not None:
            t = _now_us()
            self._trace_launch(timeline, b, t)
        with self._aborting_on_failure(b):
            has_grad = b.prepare_gradients()
            hyper = self._hyperparameters(b.group_index)
            b.launched = True
            b.seen_version = b.grad._version
            self._state_cache = None
            if self.launch_observer is not None:
                self.launch_observer("launch", b.index, in_backward)
            if self._side_stream is not None:
                self._launch_on_side_stream(b, has_grad, hyper, in_backward)
                return
        self._executor.submit(self._run_in_background, b, has_grad, hyper, in_backward)
        if timeline is not None:
            timeline.add("start b%d" % b.index, t, _now_us(), step=timeline.step, bucket=b.index,
                         in_backward=in_backward)

    def _run_in_background(self, b, has_grad, hyper, in_backward):
        """A bucket's agreement and step on the background thread; the first error is kept
        (step() raises it) and the buckets after it are not stepped."""
        if self._failure is not None:
            return
        try:
            if self.launch_observer is not None:
                self.launch_observer("run", b.index, in_backward)
            with torch.no_grad():
                self._step_bucket(b, hyper, self._agree(b, has_grad))
            if self.launch_observer is not None:
                self.launch_observer("done", b.index, in_backward)
        except BaseException as e:
            self._fail(b, e)

    def _launch_on_side_stream(self, b, has_grad, hyper, in_backward):
        """CUDA: the bucket's step on the side stream, after what the launching thread's current
        stream has enqueued so far (the gradients' accumulation and their copy into the bucket)."""
        stream = self._side_stream
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream), torch.no_grad():
            if self.launch_observer is not None:
                self.launch_observer("run", b.index, in_backward)
            self._step_bucket(b, hyper, self._agree(b, has_grad), stream)
            if self.launch_observer is not None:
                self.launch_observer("done", b.index, in_backward)

    def _wait_in_flight(self, raise_failure=True):
        """Waits for every launched step (CUDA: orders the current stream after them); the
        host communicator is then free for the calling thread."""
        if self._executor is not None and not self._executor.on_worker_thread():
            self._executor.drain()
        if self._side_stream is not None:
            torch.cuda.current_stream(self.device).wait_stream(self._side_stream)
        if raise_failure:
            self._raise_failure()

    @contextlib.contextmanager
    def _aborting_on_failure(self, b):
        """Any exception inside (an error of this rank, KeyboardInterrupt included) fails the
        optimizer and aborts the host communicator, so that the peers waiting for this rank
        fail at once instead of after the timeout; an Exception is raised as the optimizer's
        failure (naming the bucket), anything else (KeyboardInterrupt, SystemExit) as itself."""
        try:
            yield
        except BaseException as e:
            if self._failure is not None and self._failure[1] is e:
                raise
            self._fail(b, e)
            if isinstance(e, Exception):
                raise self._failure_error() from e
            raise

    def _fail(self, b, e):
        """Keeps the first error of a step (bucket b's) and aborts the host communicator: its
        links close, so the peers waiting on this rank fail at once (a step that failed on one
        rank only, for whatever reason, would otherwise leave them blocked for the whole
        timeout), and no thread stays blocked on it. Callable from any thread."""
        if self._failure is None:
            self._failure = (b, e)
        with self._abort_lock:
            if self._comm is None or self._comm_aborted or not self._owns_comm:
                return
            self._comm_aborted = True
        if self._executor is not None and not self._executor.on_worker_thread():
            # The background thread may be inside a call on the communicator, which an abort must
            # not overlap (it frees the communicator): the abort runs there, after that call (the
            # steps queued behind it see the failure and return at once).
            self._executor.submit(self._comm.abort)
        else:
            self._comm.abort()

    def _failure_error(self):
        b, e = self._failure
        what = b.describe() if b is not None else "the optimizer"
        comm = self._comm
        if isinstance(e, capi.SignError) and e.result == _NCCL_INVALID_USAGE and comm is not None:
            # No peer was lost: the program made other calls on some ranks. A RuntimeError, not
            # CommError: a restart from a checkpoint would fail the same way.
            return RuntimeError(
                "signlion: rank %d of %d: the step of %s failed: %s. The ranks made different calls: a collective "
                "of this rank met one of another rank that differs (its count, datatype or op, or a call that "
                "some ranks made and others did not), e.g. a parameter frozen, added or left without a gradient "
                "on some ranks only, or a setting such as SIGNLION_LION_CHUNK that differs across ranks; the "
                "library's WARN line on stderr names the difference. The host communicator was aborted (the other "
                "ranks fail at once) and this optimizer refuses further steps and state_dict(). Restarting will "
                "not help: every rank must make the same calls in the same order."
                % (comm.rank, comm.nranks, what, e))
        if isinstance(e, capi.SignError) and e.result != _NCCL_INVALID_ARGUMENT and comm is not None:
            timeout_s = comm.timeout_ms / 1000.0
            return CommError(
                "signlion: rank %d of %d: the step of %s failed: %s. A peer exited, froze or failed, or its link "
                "broke: no data came from it for the timeout of %g s (%s), or its connection reported the loss (the "
                "library's WARN line on stderr names the cause). The host communicator was aborted (the other ranks "
                "fail at once) and this optimizer refuses further steps and state_dict(): what this rank applied of "
                "the failed step is undefined. Restart the job from the last checkpoint (torchrun --max-restarts), "
                "unless another rank's error says that the ranks made different calls: then a restart fails the "
                "same way."
                % (comm.rank, comm.nranks, what, e, timeout_s, getattr(comm, "timeout_source", "its config")),
                comm.rank, comm.nranks, timeout_s, e.result)
        return RuntimeError("signlion: the step of %s failed (%s: %s); the optimizer state is undefined and "
                            "this optimizer cannot be used again (make a new one, and a new process group if "
                            "the communicator failed)" % (what, type(e).__name__, e))

    def _raise_failure(self):
        if self._closed:
            raise RuntimeError("signlion: this DistributedLion was closed (%s); make a new optimizer to go on"
                               % getattr(self, "_closed_why", "close()"))
        if self._failure is not None:
            raise self._failure_error() from self._failure[1]

    # ---- the step ----

    def _agree(self, b, has_grad):
        """Per parameter of bucket b: whether some rank has a gradient for it (the same on every
        rank). One sum all-reduce of one float per parameter; a rank that has every gradient
        does not wait for its result (every parameter then has one somewhere)."""
        if self._channel is None or self._channel.nranks == 1:
            return has_grad
        timeline = self._timeline
        t = _now_us() if timeline is not None else 0
        result = self._channel.sum_start(torch.tensor(has_grad, dtype=torch.float32))
        agreed = has_grad if all(has_grad) else [c > 0 for c in result().tolist()]
        if timeline is not None:
            step = b.trace_launch[0] if b.trace_launch is not None else timeline.step
            timeline.add("agree b%d" % b.index, t, _now_us(), step=step, bucket=b.index)
        return agreed

    def _gradient_somewhere(self, has_grad_per_bucket):
        """_agree for every bucket at once (overlap=False): one sum all-reduce per step."""
        if self._channel is None or self._channel.nranks == 1:
            return has_grad_per_bucket
        timeline = self._timeline
        t = _now_us() if timeline is not None else 0
        flat = [x for per in has_grad_per_bucket for x in per]
        result = self._channel.sum_start(torch.tensor(flat, dtype=torch.float32))
        if all(flat):
            out = has_grad_per_bucket
        else:
            counts, out, i = result().tolist(), [], 0
            for per in has_grad_per_bucket:
                out.append([c > 0 for c in counts[i:i + len(per)]])
                i += len(per)
        if timeline is not None:
            timeline.add("agree (all buckets)", t, _now_us(), step=timeline.step)
        return out

    def _any_rank(self, flag):
        """Whether `flag` is true on some rank (every rank calls it, in the same place)."""
        if self._channel is None or self._channel.nranks == 1:
            return bool(flag)
        return self._channel.sum(torch.tensor([1.0 if flag else 0.0]))[0].item() > 0

    def _step_bucket(self, b, hyper, active, stream=None):
        """Bucket b's Lion step from the gradients in its buffer (zero where a rank has none)
        with hyper = (lr, betas, weight_decay, maximize); parameters not active keep their values
        and state. Leaves the gradient buffer as it is (what the loop sees in .grad)."""
        if not any(active):
            return  # no rank has a gradient for this bucket: skipped everywhere, state and all
        lr, betas, weight_decay, maximize = hyper
        b.lion.set_hyperparameters(lr, betas, weight_decay)
        for p, (offset, n, ptr) in zip(b.params, b.slices):
            if p.data.data_ptr() != ptr:
                raise RuntimeError("signlion: a parameter's .data was replaced after the optimizer was made; "
                                   "copy into it in place instead (with torch.no_grad(): p.copy_(...))")
        if b.has_master and b.params_versions is not None and \
                any(p._version != v for p, v in zip(b.params, b.params_versions)):
            self._adopt_parameter_writes(b)
        grad = b.grad
        if maximize:
            if b.negated is None:
                b.negated = torch.empty_like(b.grad)
            torch.neg(b.grad, out=b.negated)
            grad = b.negated
        idle = [(offset, n) for (offset, n, _), a in zip(b.slices, active) if not a]
        if idle:  # kept as they are: values, momentum and master copy
            before = b.save()
            values = [b.flat[o:o + n].clone() for o, n in idle]
        timeline = self._timeline
        t = _now_us() if timeline is not None else 0
        if b.lion.on_device:
            if stream is None:
                stream = torch.cuda.current_stream(self.device)
            b.lion.step_async(b.flat.data_ptr(), grad.data_ptr(), stream.cuda_stream)
        else:
            b.lion.step(b.flat.data_ptr(), grad.data_ptr())
        if timeline is not None:
            self._trace_bucket_step(timeline, b, t)
        if idle:
            after = b.save()
            for (o, n), v in zip(idle, values):
                b.flat[o:o + n].copy_(v)
                after[2][o:o + n] = before[2][o:o + n]
                if b.has_master:
                    after[3][o:o + n] = before[3][o:o + n]
            b.load(after[0])
        # The parameters' version counters after this step: a later change is the loop's in-place
        # write (the library's writes do not move them; nor do writes through .data).
        if b.has_master:
            b.params_versions = [p._version for p in b.params]

    def _adopt_parameter_writes(self, b):
        """master_weights: the loop wrote into b's parameters in place since its last step
        (weight clipping under no_grad(), module.load_state_dict()): the master copy takes the written values,
        element by element where the parameter no longer equals the master rounded to its
        dtype, so that the write is not lost at the next step; the others keep the master's
        extra bits."""
        blob, _, _, master = b.save()
        params = b.flat.detach().to("cpu")  # the state comes back through host memory as well
        bits = torch.int16  # fp16 and bf16: NaN == NaN and -0 != +0 here
        written = master.to(b.dtype).view(bits) != params.view(bits)
        if bool(written.any()):
            master[written] = params[written].float()
            b.load(blob)

    def _amp_inputs(self, grad_scaler):
        """GradScaler's part in this step: (found_inf on this rank, grad_scale or None), or None
        without a GradScaler. torch 2.x's GradScaler.step sets the attributes grad_scale (None
        once unscale_ ran) and found_inf on an optimizer with _step_supports_amp_scaling; torch
        1.13's passes itself as step(grad_scaler=...)."""
        if grad_scaler is not None:
            state = grad_scaler._per_optimizer_states[id(self)]
            if not state["found_inf_per_device"]:  # unscale_ did not run: run it (it checks for infs)
                grad_scaler.unscale_(self)
            found = any(v.item() for v in state["found_inf_per_device"].values())
            return found, None, state["found_inf_per_device"]
        if not hasattr(self, "found_inf"):
            return None
        found = self.found_inf
        found = bool(found.item()) if isinstance(found, torch.Tensor) else bool(found)
        return found, getattr(self, "grad_scale", None), None

    def _unscale(self, grad_scale):
        """Divides the gradients by GradScaler's scale as GradScaler.unscale_ does (the same
        kernel and the reciprocal taken in fp64), in place in the buckets."""
        inv_scale = grad_scale.double().reciprocal().float().to(self.device)
        for b in self._buckets:
            if b.grad.dtype == torch.float32:
                b.grad.mul_(inv_scale)
                continue
            # fp16/bf16: in fp32, rounded once to the gradient's dtype, as GradScaler's kernel
            # does, through a bounded fp32 scratch made once (no allocation per step).
            if self._unscale_scratch is None:
                self._unscale_scratch = torch.empty(_UNSCALE_CHUNK, dtype=torch.float32, device=self.device)
            for start in range(0, b.numel, _UNSCALE_CHUNK):
                part = b.grad[start:start + _UNSCALE_CHUNK]
                scratch = self._unscale_scratch[:part.numel()]
                scratch.copy_(part).mul_(inv_scale)
                part.copy_(scratch)

    @torch.no_grad()
    def step(self, closure=None, **kwargs):
        """One step of every bucket, from the gradients and hyper-parameters as they are now
        (docs/PYTORCH.md, "Between backward() and step()"). With overlap, the buckets not started
        during backward start here, in bucket order, and step() returns once every bucket's
        step is done (CUDA: once the current stream waits for them). Raises the error of a
        failed background step. With a GradScaler (scaler.step(optimizer)), a step in which any
        rank found an inf or NaN is skipped on every rank, nothing touched."""
        grad_scaler = kwargs.pop("grad_scaler", None)
        if kwargs:
            raise TypeError("signlion: step() got unexpected keyword arguments %s" % sorted(kwargs))
        with self._lock:
            self._raise_failure()
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._state_cache = None
        timeline = self._timeline
        t = _now_us() if timeline is not None else 0
        if timeline is not None:
            timeline.step_called_us = t
        with self._lock:
            try:
                self._step_locked(grad_scaler)
            finally:
                if timeline is not None:
                    timeline.add("step()", t, _now_us(), step=timeline.step)
                    timeline.step += 1
                if self.overlap:
                    self._next_launch = 0
                    for b in self._buckets:
                        b.ready.clear()
                        b.trace_ready = None
                        b.launched = False
                        b.seen_version = None
                        if self._mode != "probe":
                            b.probe_copy = None  # the first step is over: its copy is not needed
                    self._hyper_seen = None
                    self._hyper_writes_seen = None
            if self._failure is None:
                with self._aborting_on_failure(None):  # its checks are collectives: a failure aborts the peers
                    self._rebucket_if_frozen_changed()
            if self.overlap:
                self._register_hooks(self._buckets)  # parameters unfrozen since the last step
        self._state_cache = None
        return loss

    def _refuse_step(self, b, error):
        """A step refused after buckets started during backward: fails the optimizer with error
        (bucket b's) once the steps in flight are done, so that it cannot be used again."""
        try:
            self._wait_in_flight(raise_failure=False)
        finally:
            self._fail(b, error)

    def _step_locked(self, grad_scaler):
        first = self._buckets[0] if self._buckets else None
        changed = [b for b in self._buckets if b.grads_changed()]
        try:
            now = self._all_hyperparameters()
        except (TypeError, ValueError) as e:
            launched = [b for b in self._buckets if b.launched]
            if not launched:
                raise  # nothing stepped yet: the loop may mend the value and call step() again
            # Buckets that started during backward stepped with the earlier value: failed, so
            # that a step() after the value is mended cannot step them a second time.
            error = type(e)("%s (written between backward() and step() after the step of %s had started "
                            "during backward with the earlier value: this optimizer cannot be used again)"
                            % (e, launched[0].describe()))
            self._refuse_step(launched[0], error)
            raise error from None
        # Compared per group that existed in backward, and (overlapping) only where a bucket of
        # the group started: a group none of whose buckets started takes this step's values.
        hyper_changed = self._hyper_seen is not None and any(
            seen != now[gi] and (self._mode != "overlap" or any(b.launched for b in self._buckets if b.group_index == gi))
            for gi, seen in enumerate(self._hyper_seen))
        # Written at all since backward's first gradient, equal values included (the probe's
        # question is what the loop does there, not what it did this once).
        hyper_written = self._hyper_writes_seen is not None and \
            _hyper_writes(self.param_groups) != self._hyper_writes_seen
        with self._aborting_on_failure(first):
            amp = self._amp_inputs(grad_scaler)
        if self.delay:
            if amp is not None:
                raise RuntimeError("signlion: a GradScaler cannot drive a DistributedLion with delay=1 (a step "
                                   "skipped for an inf would still apply the previous vote); use delay=0")
            self._step_delayed(first)
            return
        if self.overlap and self._mode == "overlap":
            started = [b for b in changed if b.launched]
            # With a GradScaler the ranks would agree on found_inf by a collective that a rank with
            # a bucket in flight issues in another order: refused before any, on every rank.
            if started or hyper_changed or amp is not None:
                what = ("the gradients of %s" % started[0].describe() if started else
                        "a learning rate or other hyper-parameter" if hyper_changed else
                        "GradScaler's scale")
                error = RuntimeError(
                    "signlion: %s changed after its step had started during backward (overlap=True): the "
                    "previous steps left gradients and hyper-parameters as backward made them, so this optimizer "
                    "overlapped its steps with backward. A loop that changes them between backward() and step() "
                    "(clip_grad_norm_, GradScaler, a schedule) must do so from its first step, or make the "
                    "optimizer with overlap=False; to log the gradient norm only, use torch.nn.utils.get_total_norm "
                    "(clip_grad_norm_ writes every gradient even where it does not clip) (docs/PYTORCH.md, "
                    "\"Between backward() and step()\")" % what)
                self._refuse_step(started[0] if started else first, error)
                raise error
        elif self.overlap and self._mode == "probe" and (self._hyper_seen is not None or changed or amp):
            # The first step after backward decides: a loop that changes nothing between backward()
            # and step() gets its buckets started during backward from the next step on.
            self._mode = "deferred" if (changed or hyper_changed or hyper_written or amp is not None
                                        or self._hooks_fire_twice) else "overlap"
        with self._aborting_on_failure(first):
            for b in self._buckets:
                if not b.launched:
                    for j in range(len(b.params)):
                        b.adopt(j)
        if amp is not None:
            found, grad_scale, per_device = amp
            with self._aborting_on_failure(first):
                found = self._any_rank(found)
            if per_device is not None:  # torch 1.13: update() backs off on every rank alike
                for t in per_device.values():
                    t.fill_(1.0 if found else 0.0)
            if found:
                self._wait_in_flight()
                return  # skipped on every rank: nothing launched, nothing touched
            if grad_scale is not None:
                self._unscale(grad_scale)
        if not self.overlap:
            with self._aborting_on_failure(first):
                has_grad = [b.prepare_gradients() for b in self._buckets]
            timeline = self._timeline
            if timeline is not None:
                t = _now_us()
                for bucket in self._buckets:  # without hooks, the gradients are known final when step() is called
                    self._trace_launch(timeline, bucket, t, timeline.step_called_us)
            b = first
            try:
                for b, active in zip(self._buckets, self._gradient_somewhere(has_grad)):
                    self._step_bucket(b, self._hyperparameters(b.group_index), active)
            except BaseException as e:
                self._fail(b, e)  # the buckets before b have stepped: the state is now undefined
                if isinstance(e, Exception):
                    raise self._failure_error() from e
                raise
            return
        try:
            self._launch_in_order(in_backward=False)
        finally:
            try:
                timeline = self._timeline
                t = _now_us() if timeline is not None else 0
                self._wait_in_flight(raise_failure=False)
                if timeline is not None:
                    timeline.add("wait for buckets", t, _now_us(), step=timeline.step)
            except BaseException as e:  # KeyboardInterrupt while waiting: the peers must not hang
                self._fail(first, e)
                raise
        self._raise_failure()

    # ---- delay=1: each step applies the previous step's vote ----

    def _step_delayed(self, first):
        """Step t with delay=1 (see the class's "Delayed vote"): starts step t's votes from this
        step's gradients (copied, so that zero_grad() and the next backward may run) on the
        background thread, queued behind step t-1's, where they travel during the next forward
        and backward; then waits for the votes of step t-1 and applies them with this step's lr
        and weight_decay. Starting first keeps the link busy: the wire goes from step t-1's last
        vote straight to step t's, with no gap for this step's applies (a vote reads only the
        momentum and its gradients, never the parameters)."""
        timeline = self._timeline
        self._raise_failure()
        previous = []  # (bucket, the Work of its vote in flight, if any) of step t-1
        b = first
        with self._aborting_on_failure(b):
            for b in self._buckets:
                b.prepare_gradients()  # a missing gradient votes as zero (no agreement round with delay=1)
            for b in self._buckets:
                previous.append((b, b.vote_work))
                b.vote_work = None
                if not any(p.requires_grad for p in b.params):
                    continue  # frozen on every rank alike (checked): no vote, nothing to apply
                self._start_delayed_vote(b, self._hyperparameters(b.group_index))
        t = _now_us() if timeline is not None else 0
        try:
            for _, work in previous:
                if work is not None:
                    work.wait()
        except BaseException as e:  # KeyboardInterrupt while waiting: the peers must not hang
            self._fail(first, e)
            raise
        self._raise_failure()
        if timeline is not None:
            timeline.add("wait for votes", t, _now_us(), step=timeline.step)
        b = first
        with self._aborting_on_failure(b):
            for b, _ in previous:
                if b.vote_pending:
                    lr, _, weight_decay, _ = self._hyperparameters(b.group_index)
                    t = _now_us() if timeline is not None else 0
                    self._apply_delayed(b, lr, weight_decay)
                    if timeline is not None:
                        timeline.add("apply b%d (vote of step %d)" % (b.index, timeline.step - 1), t, _now_us(),
                                     step=timeline.step, bucket=b.index)
                # The vote started above becomes the one in flight.
                b.vote_pending = b.vote_work is not None
                if b.vote_pending:
                    b.vote_grad, b.next_vote_grad = b.next_vote_grad, b.vote_grad
                    b.vote_out, b.next_vote_out = b.next_vote_out, b.vote_out

    def _delay_buffers(self, b):
        if b.vote_out is None:
            b.vote_grad = torch.empty_like(b.grad)
            b.vote_out = torch.zeros_like(b.flat)
            b.next_vote_grad = torch.empty_like(b.grad)
            b.next_vote_out = torch.zeros_like(b.flat)
            b.apply_work = torch.empty(b.numel, dtype=torch.float32, device=b.flat.device)
            if b.dtype != torch.float32:
                b.apply_param32 = torch.empty(b.numel, dtype=torch.float32, device=b.flat.device)

    def _start_delayed_vote(self, b, hyper):
        """Step t's vote of bucket b, into the bucket's next_vote_* buffers (those of step t-1's
        vote may still be in use): the gradients copied (negated with maximize), then on the
        background thread the library's step with lr = 1 and weight_decay = 0 into next_vote_out
        holding zeros, which makes it 0 - 1 * (u + 0 * 0) = -u exactly, u the agreed update, while
        the momentum moves as in any step."""
        _, betas, _, maximize = hyper
        for p, (offset, n, ptr) in zip(b.params, b.slices):
            if p.data.data_ptr() != ptr:
                raise RuntimeError("signlion: a parameter's .data was replaced after the optimizer was made; "
                                   "copy into it in place instead (with torch.no_grad(): p.copy_(...))")
        self._delay_buffers(b)
        grads, out = b.next_vote_grad, b.next_vote_out
        if maximize:
            torch.neg(b.grad, out=grads)
        else:
            grads.copy_(b.grad)
        out.zero_()
        self._state_cache = None
        timeline = self._timeline
        step = timeline.step if timeline is not None else 0
        b.vote_work = self._executor.submit(self._run_delayed_vote, b, betas, grads, out, step)

    def _run_delayed_vote(self, b, betas, grads, out, step):
        if self._failure is not None:
            return
        try:
            timeline = self._timeline
            t = _now_us() if timeline is not None else 0
            b.lion.set_hyperparameters(1.0, betas, 0.0)
            b.lion.step(out.data_ptr(), grads.data_ptr())
            if timeline is not None:
                timeline.add("vote b%d (applied at step %d)" % (b.index, step + 1), t, _now_us(), step=step,
                             bucket=b.index)
                timeline.add_library_phases(b.index, step, b.lion.phases())
        except BaseException as e:
            self._fail(b, e)

    def _apply_delayed(self, b, lr, weight_decay):
        """p = p - lr * (u + weight_decay * p) per element in fp32, each operation rounded once
        (the library's pass 2), u = -vote_out; the result rounded to the parameter's dtype."""
        p32 = b.flat if b.apply_param32 is None else b.apply_param32.copy_(b.flat)
        work = b.apply_work
        torch.mul(p32, weight_decay, out=work)
        work.sub_(b.vote_out)  # u + wd * p, as wd * p - (-u): the same rounding
        work.mul_(lr)
        p32.sub_(work)
        if b.apply_param32 is not None:
            b.flat.copy_(p32)
        b.vote_pending = False
        self._state_cache = None
