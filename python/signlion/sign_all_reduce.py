"""The sign all-reduce for any PyTorch code, shaped like torch.distributed.all_reduce, and a
DDP communication hook made of it. Public names are re-exported by signlion.torch."""
import torch
import torch.distributed as dist

from . import capi
from .background import Work
from .host_comm_cache import clear_host_comm_cache, release_host_comm  # public here (__all__)
from .host_comm_cache import counts as _cache_counts
from .host_comm_cache import host_entry as _host_entry
from .process_groups import checked_group, nccl_comm_from_process_group

_OPS = {"majority": capi.MAJORITY, "average": capi.AVERAGE}
_DATATYPES = {torch.float32: capi.FLOAT32, torch.float16: capi.FLOAT16, torch.bfloat16: capi.BFLOAT16,
              torch.int8: capi.INT8}

# ncclResult_t values: an argument refused before the call moved anything; calls that do not match.
_NCCL_INVALID_ARGUMENT, _NCCL_INVALID_USAGE = 4, 5

# The most host communicators (host_comm_cache.py) one process holds for sign_all_reduce: a
# group's first call beyond it raises the same RuntimeError on every rank of the group. Read at
# each communicator's creation, so that raising it here (on every rank) takes effect.
HOST_COMM_CACHE_SIZE = 16


def host_comm_cache_info():
    """{"created": host communicators made by sign_all_reduce so far, "cached": held now,
    "capacity": HOST_COMM_CACHE_SIZE, the most one process may hold}."""
    created, cached = _cache_counts()
    return {"created": created, "cached": cached, "capacity": HOST_COMM_CACHE_SIZE}


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
    group = checked_group(group, "sign_all_reduce: group")
    datatype, code = _DATATYPES[tensor.dtype], _OPS[op]
    if tensor.device.type == "cuda":
        return _cuda_sign_all_reduce(tensor, datatype, code, group, async_op, (zero_rule, tie_rule))
    entry = _host_entry(group, HOST_COMM_CACHE_SIZE)
    comm = entry.comm

    def run():
        if entry.failure is not None:  # queued behind a call that failed: its communicator is aborted
            raise RuntimeError("signlion: sign_all_reduce: an earlier call on this group failed (%s), which aborted "
                               "the group's host communicator; the group's next call makes a new one"
                               % entry.failure)
        try:
            # An empty tensor is a call too: skipped here, it would pair this rank's next call
            # with another rank's current one. The library checks it against the other ranks'
            # calls like any other (a short round of headers), so a count that differs fails.
            comm.sign_all_reduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), datatype, code,
                                 zero_rule=zero_rule, tie_rule=tie_rule)
        except capi.SignError as e:
            if e.result == _NCCL_INVALID_ARGUMENT:
                raise  # refused alike on every rank before anything moved: the communicator goes on
            entry.fail(e)
            raise _call_failed(e) from e
        return tensor

    work = entry.executor.submit(run)
    if async_op:
        return work
    work.wait()
    return None


def _call_failed(e):
    """The error of a CPU call that failed on the host communicator (SignError e), in words."""
    if e.result == _NCCL_INVALID_USAGE:
        why = ("the ranks' calls did not match: a rank passed another numel (an empty tensor included), dtype, op or "
               "rules, or made a call the others did not make (the library's WARN line on stderr names the "
               "difference); a retry or a restart fails the same way")
    else:
        why = ("a peer exited, froze or failed, or its link broke; or another rank found that the ranks' calls did "
               "not match, and its error says so")
    return RuntimeError("signlion: sign_all_reduce failed (%s): %s. The group's host communicator was aborted, so "
                        "the other ranks' calls on it fail at once too, and the group's next call makes a new one "
                        "on every rank" % (e, why))


def _cuda_sign_all_reduce(tensor, datatype, code, group, async_op, rules):
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
