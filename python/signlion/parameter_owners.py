"""Which open DistributedLion manages a parameter. An optimizer makes each of its parameters' .data
a view of its own bucket and hooks the parameter's gradient; a second optimizer over the same
parameter would move .data into its bucket while the first still steps the old one, and the
first would then fail at its next step on a replaced .data. So a parameter has one owner at a
time: claim() at construction (and add_param_group), release() by close(). Weak references
only: an optimizer that is garbage-collected without close() frees its parameters, and the
table never keeps a parameter or an optimizer alive."""
import threading
import weakref

_lock = threading.Lock()
_owners = {}  # id(parameter) -> (weakref to the parameter, weakref to its optimizer)


def _live_owner(p):
    entry = _owners.get(id(p))
    if entry is None or entry[0]() is not p:  # a dead parameter whose id was reused
        return None
    return entry[1]()


def check_unowned(params, optimizer, group_index):
    """Raises ValueError naming the first of `params` (param group `group_index`) that another
    open optimizer manages."""
    with _lock:
        for i, p in enumerate(params):
            owner = _live_owner(p)
            if owner is not None and owner is not optimizer and not getattr(owner, "_closed", True):
                raise ValueError(
                    "signlion: param group %d, parameter %d (shape %s) is already managed by another open "
                    "DistributedLion, whose buckets hold its .data and whose hooks watch its gradient: call "
                    "close() on that optimizer before making a new one over the same parameters (a reference "
                    "that an LR scheduler still holds keeps it open)" % (group_index, i, list(p.shape)))


def claim(params, optimizer):
    """Records `optimizer` as the owner of `params` (after check_unowned)."""
    me = weakref.ref(optimizer)
    with _lock:
        for key in [k for k, (pref, oref) in _owners.items() if pref() is None or oref() is None]:
            del _owners[key]  # entries of parameters or optimizers that are gone
        for p in params:
            _owners[id(p)] = (weakref.ref(p), me)


def release(optimizer):
    """Forgets every parameter `optimizer` owns (close())."""
    with _lock:
        for key in [k for k, (_, oref) in _owners.items() if oref() is optimizer]:
            del _owners[key]
