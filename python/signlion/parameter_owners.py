"""Which open DistributedLion manages a parameter. An optimizer makes each of its parameters' .data
a view of its own bucket and hooks the parameter's gradient; a second optimizer over the same
parameter moves .data into its bucket, and the first, still stepping its old bucket and still
hooked, would then fail at its next backward or step on a replaced .data. So a parameter has one
owner at a time: the optimizer made last over it takes it over (claim()), and the one it was
taken from is closed (the caller closes what claim() returns); close() releases the rest.
Weak references only: an optimizer that is garbage-collected without close() holds nothing, and
the table never keeps a parameter or an optimizer alive."""
import threading
import weakref

_lock = threading.Lock()
_owners = {}  # id(parameter) -> (weakref to the parameter, weakref to its optimizer)


def _open_owner(p):
    entry = _owners.get(id(p))
    if entry is None or entry[0]() is not p:  # none, or a dead parameter whose id was reused
        return None
    owner = entry[1]()
    return owner if owner is not None and not getattr(owner, "_closed", True) else None


def _other_owners_locked(params, optimizer):
    found = []
    for p in params:
        owner = _open_owner(p)
        if owner is not None and owner is not optimizer and all(owner is not o for o in found):
            found.append(owner)
    return found


def other_owners(params, optimizer):
    """The open optimizers other than `optimizer` that manage some of `params`, in order."""
    with _lock:
        return _other_owners_locked(params, optimizer)


def claim(params, optimizer):
    """Records `optimizer` as the owner of `params`; returns the other open optimizers that
    managed some of them (to be closed: their buckets no longer hold these parameters)."""
    me = weakref.ref(optimizer)
    with _lock:
        previous = _other_owners_locked(params, optimizer)
        for key in [k for k, (pref, oref) in _owners.items() if pref() is None or oref() is None]:
            del _owners[key]  # entries of parameters or optimizers that are gone
        for p in params:
            _owners[id(p)] = (weakref.ref(p), me)
        return previous


def release(optimizer):
    """Forgets every parameter `optimizer` still owns (close())."""
    with _lock:
        for key in [k for k, (_, oref) in _owners.items() if oref() is optimizer]:
            del _owners[key]
