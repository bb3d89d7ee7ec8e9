"""The sign all-reduce for any PyTorch code, shaped like torch.distributed.all_reduce, and a
DDP communication hook made of it. Public names are re-exported by signlion.torch."""
import collections
import itertools
import threading

import torch
import torch.distributed as dist

from . import capi
from .background import SerialExecutor, Work

_OPS = {"majority": capi.MAJORITY, "average": capi.AVERAGE}
_DATATYPES = {torch.float32: capi.FLOAT32, torch.float16: capi.FLOAT16, torch.bfloat16: capi.BFLOAT16,
              torch.int8: capi.INT8}

# Host communicators made for sign_all_reduce: one per process group, made by the group's first
# CPU call and kept until release_host_comm(group) or clear_host_comm_cache(). The vote rules
# travel with each call, so one communicator serves every rule set of its group. Nothing is
# evicted implicitly: a rank belongs to its own set of groups, so an eviction policy over all of
# them (least recently used, say) would drop a group's communicator on one rank while another
# rank of that group still holds it, and their next call would meet different communicators.
# HOST_COMM_CACHE_SIZE bounds how many one process holds: the ranks of a group agree, when its
# communicator is made, that each of them is below the bound, and otherwise all of them raise
# the same RuntimeError (_BoundError), so that the bound is never a hang.
HOST_COMM_CACHE_SIZE = 16
_host_comms = {}  # id(group) -> _Slot
_host_comms_lock = threading.Lock()  # guards _host_comms and _host_comms_created
_host_comms_created = 0
# Per group members: how many times this module has made a communicator for them, so that the
# ranks' agreement on the bound uses fresh store keys each time (every rank of a group makes its
# communicators in the same order, as it makes its calls).
_bound_serials = collections.defaultdict(itertools.count)


class _BoundError(RuntimeError):
    """A group's host communicator was not made: some rank of the group holds HOST_COMM_CACHE_SIZE."""


class _HostEntry:
    def __init__(self, group, comm):
        self.group = group  # held, so that the id in the key is not reused while cached
        self.comm = comm
        self.executor = SerialExecutor("signlion-sign-all-reduce")

    def close(self):
        self.executor.close()
        self.comm.destroy()


class _Slot:
    """A group's place in the cache. Its lock makes lookup and creation one step per group: the
    first thread to ask makes the communicator while the others wait for it (and get the same
    one, or the same error)."""

    def __init__(self, group):
        self.group = group
        self.lock = threading.Lock()
        self.entry = None
        self.error = None


def host_comm_cache_info():
    """{"created": host communicators made by sign_all_reduce so far, "cached": held now,
    "capacity": HOST_COMM_CACHE_SIZE, the most one process may hold}."""
    with _host_comms_lock:
        cached = sum(1 for slot in _host_comms.values() if slot.entry is not None)
        return {"created": _host_comms_created, "cached": cached, "capacity": HOST_COMM_CACHE_SIZE}


def release_host_comm(group=None):
    """Waits for the calls in flight on `group`'s host communicator (default: WORLD) and destroys
    it; the group's next CPU call makes a new one. Call it on every rank of the group at the same
    point of the program (between the same two calls on the group), as the group's calls are
    made. Returns whether there was one."""
    group = group if group is not None else dist.group.WORLD
    with _host_comms_lock:
        slot = _host_comms.pop(id(group), None)
    if slot is None:
        return False
    with slot.lock:  # a creation under way ends first
        entry, slot.entry = slot.entry, None
    if entry is None:
        return False
    entry.close()
    return True


def clear_host_comm_cache():
    """Waits for the calls in flight and destroys every cached host communicator (e.g. before
    torch.distributed.destroy_process_group()). If sign_all_reduce runs on CPU tensors after it,
    call it on every rank at the same point of the program: a group's next call makes a new
    communicator on each of its ranks."""
    with _host_comms_lock:
        slots = list(_host_comms.values())
        _host_comms.clear()
    for slot in slots:
        with slot.lock:
            entry, slot.entry = slot.entry, None
        if entry is not None:
            entry.close()


def _members(group):
    return "all" if group is dist.group.WORLD else "-".join(str(r) for r in dist.get_process_group_ranks(group))


def _agree_on_bound(group, held):
    """Collective over the group's ranks (through the store): raises _BoundError on every one of
    them when any holds HOST_COMM_CACHE_SIZE communicators for other groups already."""
    from .torch import _store_of

    members = _members(group)
    nranks, rank = dist.get_world_size(group), dist.get_rank(group)
    store = _store_of(group)
    prefix = "signlion/hostcomm-bound/%s/%d/" % (members, next(_bound_serials[members]))
    bound = HOST_COMM_CACHE_SIZE
    store.set(prefix + str(rank), "%d %d %d" % (held >= bound, held, bound))
    ranks = list(range(nranks)) if group is dist.group.WORLD else dist.get_process_group_ranks(group)
    over = []
    for r in range(nranks):
        full, n, b = (int(x) for x in bytes(store.get(prefix + str(r))).decode().split())
        if full:
            over.append("rank %d holds %d host communicators for other groups, HOST_COMM_CACHE_SIZE is %d"
                        % (ranks[r], n, b))
    if over:
        raise _BoundError(
            "signlion: sign_all_reduce: cannot make the host communicator of the group of ranks %s: %s. "
            "Host communicators are kept until released, never evicted by others (ranks of different groups "
            "would evict different ones and then wait on each other): release those of groups no longer used "
            "with signlion.sign_all_reduce.release_host_comm(group) or clear_host_comm_cache() on every rank of "
            "groups, or raise signlion.sign_all_reduce.HOST_COMM_CACHE_SIZE on every rank. Every rank of this "
            "group raises this error." % (members, "; ".join(over)))


def _host_entry(group):
    """The cached host communicator of `group`, made on first use (collective over the group's
    ranks, through the store as host_comm_from_process_group). Threads asking for the same group
    at once make one communicator."""
    global _host_comms_created
    from .torch import host_comm_from_process_group

    key = id(group)
    with _host_comms_lock:
        slot = _host_comms.get(key)
        if slot is None:
            slot = _host_comms[key] = _Slot(group)
    with slot.lock:
        if slot.entry is not None:
            return slot.entry
        if slot.error is not None:  # the thread that made the attempt failed: the same error here
            raise slot.error
        try:
            with _host_comms_lock:
                held = sum(1 for other in _host_comms.values() if other is not slot and other.entry is not None)
            _agree_on_bound(group, held)
            # The default rules here; each call passes its own.
            entry = _HostEntry(group, host_comm_from_process_group(group))
        except BaseException as e:
            slot.error = e
            with _host_comms_lock:  # the next call (of every rank) tries again with a fresh slot
                if _host_comms.get(key) is slot:
                    del _host_comms[key]
            raise
        slot.entry = entry
        with _host_comms_lock:
            _host_comms_created += 1
        return entry


class _CudaWork:
    """The work handle of a sign all-reduce enqueued on a CUDA stream (as ProcessGroupNCCL's):
    wait() makes the current stream wait for it; is_completed() asks whether the GPU is done."""

    def __init__(self, tensor, stream):
        self._tensor = tensor
        self._event = torch.cuda.Event()
        self._event.record(stream)

    def wait(self, timeout=None):
        torch.cuda.current_stream(self._tensor.device).wait_event(self._event)
        return True

    def is_completed(self):
        return self._event.query()

    def is_success(self):
        return self.is_completed()

    def exception(self):
        return None

    def result(self):
        return self._tensor

    def get_future(self):
        """A future holding the tensor at once: its values are ordered on the stream the call
        was enqueued on (use them there, or after wait())."""
        fut = torch.futures.Future()
        fut.set_result(self._tensor)
        return fut


def sign_all_reduce(tensor, op="majority", group=None, async_op=False, zero_rule="positive", tie_rule="zero"):
    """In place, like torch.distributed.all_reduce: `tensor`'s values become, on every rank of
    `group` (default: the default process group), the majority of the ranks' signs (op
    "majority": -1, 0 or +1) or their average (op "average": the sum of the votes divided by the
    number of ranks, rounded once to fp32, then to the tensor's dtype), as defined in
    docs/SEMANTICS.md: x > 0 votes +1, x < 0 votes -1, and a zero or NaN follows zero_rule
    ("positive": votes +1, the default; "negative"; "abstain"); a tie of the majority follows
    tie_rule ("zero", the default; "positive"; "negative"). The result is identical on every rank.

    tensor: contiguous, fp32, fp16, bf16 or int8 (int8 with "majority" only), on the CPU or on a
    CUDA device. Every rank of the group calls with the same numel, dtype, op and rules, in the
    same order as its other sign_all_reduce calls on that group.

    The rules are the call's own, on CPU and CUDA alike: other calls, optimizers or libraries
    on the same group or communicator never change them.

    CPU tensors: signlion's host communicator over the group's ranks, one per group, made at the
    group's first call (collective, through the process group's store, whatever its backend) and
    kept until release_host_comm(group) or clear_host_comm_cache(). A process holds at most
    HOST_COMM_CACHE_SIZE of them: a group's first call beyond that raises RuntimeError on every
    rank of the group (nothing is evicted behind a group's back). Calls on one communicator run in
    call order on one background thread.
    CUDA tensors: the group's NCCL communicator (PyTorch 2.8 or later, as DistributedLion) and
    the current stream (ncclSignAllReduceWithConfig, the rules passed with the call).

    async_op=False: returns None once the result is in `tensor` (CUDA: once enqueued on the
    current stream, as torch.distributed with NCCL). async_op=True: returns a work handle with
    wait(), is_completed() and get_future() (a torch.futures.Future of the tensor); CPU calls
    then run on the background thread; do not touch `tensor` before wait()."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("signlion: sign_all_reduce: tensor must be a torch.Tensor, not %s" % type(tensor).__name__)
    if op not in _OPS:
        raise ValueError("signlion: sign_all_reduce: op must be one of %s, not %r" % (sorted(_OPS), op))
    if tensor.dtype not in _DATATYPES:
        raise TypeError("signlion: sign_all_reduce: tensor must be float32, float16, bfloat16 or int8, not %s"
                        % tensor.dtype)
    if tensor.dtype == torch.int8 and op == "average":
        raise TypeError("signlion: sign_all_reduce: op 'average' needs a floating-point tensor, not int8")
    if tensor.device.type not in ("cpu", "cuda"):
        raise ValueError("signlion: sign_all_reduce: tensor must be on the CPU or a CUDA device, not %s"
                         % tensor.device)
    if tensor.is_sparse or not tensor.is_contiguous():
        raise ValueError("signlion: sign_all_reduce: tensor must be dense and contiguous (call .contiguous() "
                         "and copy the result back)")
    if zero_rule not in capi.ZERO_RULES:
        raise ValueError("signlion: sign_all_reduce: zero_rule must be one of %s, not %r"
                         % (sorted(capi.ZERO_RULES), zero_rule))
    if tie_rule not in capi.TIE_RULES:
        raise ValueError("signlion: sign_all_reduce: tie_rule must be one of %s, not %r"
                         % (sorted(capi.TIE_RULES), tie_rule))
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("signlion: sign_all_reduce: group: torch.distributed is not initialized; call "
                           "init_process_group first")
    group = group if group is not None else dist.group.WORLD
    if group is None or dist.get_rank(group) < 0:
        raise ValueError("signlion: sign_all_reduce: group: this rank is not a member of the group")
    datatype, code = _DATATYPES[tensor.dtype], _OPS[op]
    if tensor.device.type == "cuda":
        return _cuda_sign_all_reduce(tensor, datatype, code, group, async_op, (zero_rule, tie_rule))
    entry = _host_entry(group)
    comm = entry.comm

    def run():
        if tensor.numel():
            comm.sign_all_reduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), datatype, code,
                                 zero_rule=zero_rule, tie_rule=tie_rule)
        return tensor

    work = entry.executor.submit(run)
    if async_op:
        return work
    work.wait()
    return None


def _cuda_sign_all_reduce(tensor, datatype, code, group, async_op, rules):
    from .torch import nccl_comm_from_process_group

    nccl_comm = nccl_comm_from_process_group(group, tensor.device)
    stream = torch.cuda.current_stream(tensor.device)
    with torch.cuda.device(tensor.device):
        # The rules go with the call: whatever another user sets on the comm (or a release resets).
        capi.nccl_sign_all_reduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), datatype, code, nccl_comm,
                                  stream.cuda_stream, zero_rule=rules[0], tie_rule=rules[1])
    return _CudaWork(tensor, stream) if async_op else None


class SignHookState:
    """The state of sign_majority_hook: the process group (None: DDP's default group) and the
    vote rules (default: a zero gradient abstains, a tie gives 0, so an element whose gradient
    is zero on every rank stays 0)."""

    def __init__(self, group=None, zero_rule="abstain", tie_rule="zero"):
        self.group, self.zero_rule, self.tie_rule = group, zero_rule, tie_rule


def sign_majority_hook(state, bucket):
    """A DDP communication hook (ddp_model.register_comm_hook(state, sign_majority_hook)) that
    turns a DDP job into signSGD with majority vote (Bernstein et al., 2018): each bucket's
    gradient is replaced by the majority of the ranks' signs of their local gradients,
    elementwise -1, 0 or +1, identical on every rank (not divided by the world size). An
    optimizer then sees, in every parameter's .grad, that vote: torch.optim.SGD(lr) on it is
    signSGD with majority vote (p -= lr * vote; with momentum it is the vote's momentum, not
    signum's local momentum). 1 bit per element on the wire instead of 32 (or 16).

    state: None, a process group, or a SignHookState(group, zero_rule, tie_rule). With None the
    rules are SignHookState's defaults: a zero gradient abstains and a tie gives 0 (so with 2
    ranks an element where their signs differ gets 0). Returns a torch.futures.Future of the
    bucket's tensor, as DDP expects (PyTorch 1.13 and 2.x)."""
    if state is None:
        state = SignHookState()
    elif not isinstance(state, SignHookState):
        state = SignHookState(group=state)
    tensor = bucket.buffer()
    work = sign_all_reduce(tensor, "majority", group=state.group, async_op=True, zero_rule=state.zero_rule,
                           tie_rule=state.tie_rule)
    return work.get_future()


__all__ = ["sign_all_reduce", "sign_majority_hook", "SignHookState", "host_comm_cache_info",
           "clear_host_comm_cache", "release_host_comm", "HOST_COMM_CACHE_SIZE", "Work"]
