"""The hyper-parameters of a DistributedLion param group: the keys torch.optim optimizers keep per
group (compared across ranks) and what signlion can honour of them."""
import math


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


class _WriteCountingGroup(dict):
    """A param group that counts the writes of its hyper-parameters (`hyper_writes`), a value
    equal to the old one included: with overlap, the first step learns from it whether the loop
    sets hyper-parameters between backward() and step() (a schedule that writes this step's lr
    there, equal to the initial lr at step 0, must not be taken for a loop that never does).
    Everything else is a plain dict."""

    def _count(self, keys):
        if any(k in _HYPERPARAMETERS for k in keys):
            self.hyper_writes = getattr(self, "hyper_writes", 0) + 1

    def __setitem__(self, key, value):
        self._count((key,))
        dict.__setitem__(self, key, value)

    def __delitem__(self, key):
        self._count((key,))
        dict.__delitem__(self, key)

    def update(self, *args, **kwargs):
        other = dict(*args, **kwargs)
        self._count(other)
        dict.update(self, other)

    def __ior__(self, other):
        self.update(other)
        return self

    def setdefault(self, key, default=None):
        if key not in self:
            self._count((key,))
        return dict.setdefault(self, key, default)

    def pop(self, key, *default):
        self._count((key,))
        return dict.pop(self, key, *default)

    def popitem(self):
        item = dict.popitem(self)
        self._count((item[0],))
        return item

    def clear(self):
        self._count(tuple(self))
        dict.clear(self)


def _hyper_writes(param_groups):
    """The writes counted so far over these groups (a group replaced by a plain dict counts none:
    its values are still compared)."""
    return sum(getattr(g, "hyper_writes", 0) for g in param_groups)
