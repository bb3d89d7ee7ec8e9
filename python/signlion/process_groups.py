"""A torch.distributed process group's ranks as signlion communicators: the host communicator
made over a group's ranks through its store (host_comm_from_process_group), the timeout its waits
take from the group (process_group_timeout, resolve_timeout), and the ncclComm_t of a group's NCCL
backend (nccl_comm_from_process_group). Public names are re-exported by signlion.torch."""
import collections
import datetime
import itertools
import math

import torch
import torch.distributed as dist

from . import capi

# Per group membership, how many host communicators this process made over it: the store key of
# the next one. Counted per membership, because only a group's members make its communicators
# (one count for all groups would differ between a member and a non-member of a subgroup).
_comm_serials = collections.defaultdict(itertools.count)


def _store_of(group):
    """The store of the default process group (where torch.distributed keeps it in 1.13 and 2.x)."""
    from torch.distributed import distributed_c10d as c10d
    if hasattr(c10d, "_get_default_store"):
        return c10d._get_default_store()
    raise RuntimeError("signlion: cannot reach the torch.distributed store of this PyTorch")


def process_group_timeout(group=None):
    """The timeout torch.distributed applies to `group`'s collectives (default: WORLD), what
    init_process_group(timeout=...) or new_group(timeout=...) set (PyTorch's default: 30 minutes),
    as a datetime.timedelta; None where this PyTorch does not expose it. Read from the group's
    options (ProcessGroupGloo/NCCL.options._timeout, PyTorch 1.13 and later; the backend's on
    2.x), else from the timeout of the store the group was made with."""
    group = group if group is not None else dist.group.WORLD
    holders = [group]
    get_backend = getattr(group, "_get_backend", None)
    if get_backend is not None:
        for device in ("cpu", "cuda"):
            try:
                holders.append(get_backend(torch.device(device)))
            except Exception:  # no backend for that device
                pass
    for holder in holders:
        try:
            timeout = holder.options._timeout
        except Exception:  # not exposed by this PyTorch or backend
            continue
        if isinstance(timeout, datetime.timedelta) and timeout.total_seconds() > 0:
            return timeout
    try:
        timeout = _store_of(group).timeout
    except Exception:
        return None
    return timeout if isinstance(timeout, datetime.timedelta) and timeout.total_seconds() > 0 else None


def _as_float(value):
    """value as a float, NaN when it is not a number (so that a range check refuses it)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


# The host communicator's config.timeoutMs is an int of milliseconds.
_MAX_TIMEOUT_MS = (1 << 31) - 1


def resolve_timeout(timeout=None, group=None):
    """(timeout_ms, source) for a host communicator over `group`: `timeout` when given (a
    datetime.timedelta or seconds > 0), else the process group's timeout
    (process_group_timeout), else 0 (the library's: SIGNLION_TIMEOUT_MS, 60 s by default).
    A longer timeout than the communicator can hold (2^31 - 1 ms, about 24.8 days) is capped."""
    if timeout is not None:
        seconds = _as_float(timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else timeout)
        if not seconds > 0.0:
            raise ValueError("signlion: timeout must be a datetime.timedelta or a number of seconds > 0, not %r"
                             % (timeout,))
        source = "the timeout argument"
    else:
        pg_timeout = process_group_timeout(group) if dist.is_available() and dist.is_initialized() else None
        if pg_timeout is None:
            return 0, "SIGNLION_TIMEOUT_MS or the library's default"
        seconds, source = pg_timeout.total_seconds(), "the process group's timeout"
    return max(1, min(_MAX_TIMEOUT_MS, int(math.ceil(seconds * 1000.0)))), source


def checked_group(group, what="process_group"):
    """`group` (None: WORLD) once it is known to be a process group this rank belongs to; else
    ValueError (this rank is not a member: torch.distributed.new_group gave it
    GroupMember.NON_GROUP_MEMBER) or TypeError (not a process group), naming `what`. Checked
    before any collective, because a non-member would otherwise wait in the store for a key
    that only the members write."""
    from torch.distributed import distributed_c10d as c10d
    non_member = c10d.GroupMember.NON_GROUP_MEMBER
    if group is non_member or (type(group) is type(non_member) and group == non_member):
        raise ValueError("signlion: %s: this rank (rank %d of the default group) is not a member of the group "
                         "(torch.distributed.new_group returns a group only on its members): only the members of "
                         "a group may use it" % (what, dist.get_rank()))
    if group is None:
        return dist.group.WORLD
    if not isinstance(group, dist.ProcessGroup):
        if hasattr(group, "_get_backend"):
            return group  # a stand-in for one (a wrapper, a test's fake backend): used as it is
        raise TypeError("signlion: %s must be a torch.distributed process group (dist.new_group(...)) or None, "
                        "not %s" % (what, type(group).__name__))
    if dist.get_rank(group) < 0:
        raise ValueError("signlion: %s: this rank (rank %d of the default group) is not a member of the group"
                         % (what, dist.get_rank()))
    return group


def _agree_on_rules(store, key, rank, nranks, rules):
    """Collective over the group's ranks, through the store, before their communicator is made
    (which would refuse rules that differ with an unnamed SignError): raises the same ValueError
    on every rank when some rank's (zero_rule, tie_rule) differs from rank 0's. A few store
    operations per rank, whatever the number of ranks: rank 0 publishes its rules, each rank
    compares its own with them, the first to differ describes itself, and the last rank to
    arrive publishes how many differ."""
    mine = "%s %s" % rules
    if rank == 0:
        store.set(key + "/rules0", mine)
        root = mine
    else:
        root = bytes(store.get(key + "/rules0")).decode()
    if mine != root:
        if store.add(key + "/rules-differ", 1) == 1:
            ours, theirs = mine.split(), root.split()
            name = "zero_rule" if ours[0] != theirs[0] else "tie_rule"
            value, root_value = (ours[0], theirs[0]) if name == "zero_rule" else (ours[1], theirs[1])
            store.set(key + "/rules-first", "on rank %d, %s is %r here, %r on rank 0" % (rank, name, value,
                                                                                       root_value))
    if store.add(key + "/rules-arrived", 1) == nranks:
        store.set(key + "/rules-verdict", str(store.add(key + "/rules-differ", 0)))
    differing = int(bytes(store.get(key + "/rules-verdict")).decode())
    if differing:
        first = bytes(store.get(key + "/rules-first")).decode()
        raise ValueError("signlion: the ranks' vote rules differ (every rank must pass the same zero_rule and "
                         "tie_rule): %s; %d rank%s differ%s from rank 0" % (first, differing,
                                                                          "s" if differing > 1 else "",
                                                                          "" if differing > 1 else "s"))


def host_comm_from_process_group(group=None, zero_rule="positive", tie_rule="zero", store=None, timeout=None):
    """A host communicator over the ranks of `group` (default: WORLD), its unique id
    passed through the process group's store. Collective over the group. Every wait for a peer
    is bounded by `timeout` (a datetime.timedelta or seconds), by default the process group's
    own timeout (resolve_timeout); the communicator's timeout_ms and timeout_source tell which.
    A rank that is not a member of `group` gets a ValueError at once; rules that differ across
    the ranks give every rank a ValueError naming the first difference."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("signlion: torch.distributed is not initialized; call init_process_group first "
                           "(or use aggregation='local')")
    group = checked_group(group)
    if zero_rule not in capi.ZERO_RULES:
        raise ValueError("signlion: zero_rule must be one of %s, not %r" % (sorted(capi.ZERO_RULES), zero_rule))
    if tie_rule not in capi.TIE_RULES:
        raise ValueError("signlion: tie_rule must be one of %s, not %r" % (sorted(capi.TIE_RULES), tie_rule))
    timeout_ms, source = resolve_timeout(timeout, group)
    nranks, rank = dist.get_world_size(group), dist.get_rank(group)
    store = store if store is not None else _store_of(group)
    members = "all" if group is dist.group.WORLD else "-".join(str(r) for r in dist.get_process_group_ranks(group))
    key = "signlion/hostcomm/%s/%d" % (members, next(_comm_serials[members]))
    if nranks > 1:
        _agree_on_rules(store, key, rank, nranks, (zero_rule, tie_rule))
    if rank == 0:
        uid = capi.get_unique_id()
        store.set(key, uid)
    else:
        uid = store.get(key)
    comm = capi.Comm(nranks, uid, rank, zero_rule=zero_rule, tie_rule=tie_rule, timeout_ms=timeout_ms)
    comm.timeout_source = source if timeout_ms else "SIGNLION_TIMEOUT_MS or the library's default"
    return comm


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
    group = checked_group(group)
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
