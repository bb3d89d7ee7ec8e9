"""The host communicators that sign_all_reduce makes for CPU tensors: one per process group, made
by the group's first CPU call and kept until release_host_comm(group) or clear_host_comm_cache().
The vote rules travel with each call, so one communicator serves every rule set of its group.
Nothing is evicted implicitly: a rank belongs to its own set of groups, so an eviction policy over
all of them (least recently used, say) would drop a group's communicator on one rank while another
rank of that group still holds it, and their next call would meet different communicators. A bound
(signlion.sign_all_reduce.HOST_COMM_CACHE_SIZE, passed to host_entry) limits how many one process
holds: the ranks of a group agree, when its communicator is made, that each of them is below the
bound, and otherwise all of them raise the same RuntimeError (_BoundError), so that the bound is
never a hang."""
import collections
import itertools
import threading

import torch.distributed as dist

from .background import SerialExecutor, exit_timeout
from .process_groups import _store_of, host_comm_from_process_group

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
        self.executor = SerialExecutor("signlion-sign-all-reduce", exit_timeout=exit_timeout(comm))
        self.failure = None  # the error of the call that failed, after which the communicator was aborted

    def fail(self, error):
        """After a call failed on the communicator (a peer lost, or calls that did not match), on
        the executor's thread, so that no call is inside it: aborts it, so that the peers waiting
        on this rank fail at once rather than after the timeout (the library names a mismatch on
        the rank that sees it, while its peer may still wait), and takes the entry out of the
        cache, so that the group's next call makes a new communicator (on every rank, as each
        one's call failed)."""
        self.failure = error
        self.comm.abort()
        with _host_comms_lock:
            slot = _host_comms.get(id(self.group))
            if slot is not None and slot.entry is self:
                del _host_comms[id(self.group)]

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


def _agree_on_bound(group, held, bound):
    """Collective over the group's ranks (through the store): raises _BoundError on every one of
    them when any holds `bound` (HOST_COMM_CACHE_SIZE) communicators for other groups already."""
    members = _members(group)
    nranks, rank = dist.get_world_size(group), dist.get_rank(group)
    store = _store_of(group)
    prefix = "signlion/hostcomm-bound/%s/%d/" % (members, next(_bound_serials[members]))
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


def host_entry(group, bound):
    """The cached host communicator of `group` (with the background thread its calls run on),
    made on first use (collective over the group's ranks, through the store as
    host_comm_from_process_group) where every rank of the group holds fewer than `bound`
    communicators for other groups. Threads asking for the same group at once make one
    communicator."""
    global _host_comms_created

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
            _agree_on_bound(group, held, bound)
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


def counts():
    """(host communicators made so far, held now)."""
    with _host_comms_lock:
        cached = sum(1 for slot in _host_comms.values() if slot.entry is not None)
        return _host_comms_created, cached
