"""The hyper-parameters of a DistributedLion param group: the keys torch.optim optimizers keep per
group (compared across ranks) and what signlion can honour of them, checked when a group is added
or loaded and again each time a step reads them (a schedule or a loop may write anything there);
and the optimizer's own options (master_weights, momentum_average_every, skip_nonfinite). Every
error names the argument and, for a group's value, the param group. A param group is kept as a
dict that counts the writes of its hyper-parameters (_WriteCountingGroup, read by overlap's probe)."""
import math
import numbers

import torch

# The hyper-parameters of a param group: what torch.optim optimizers keep per group, checked
# across ranks (the flags select implementations in torch; see _check_group for what they mean here).
_HYPERPARAMETERS = ("lr", "betas", "weight_decay", "maximize", "foreach", "fused", "capturable", "differentiable")

# momentum_average_every goes to the library as a C int.
_MAX_C_INT = (1 << 31) - 1


def _named(name, index):
    return "param group %d: %s" % (index, name) if index is not None else name


def _real(value, name):
    """value as a float: a real number (not a bool, not a string) or a one-element real tensor
    (torch 2.x schedulers may keep lr as a tensor); TypeError naming it otherwise."""
    if isinstance(value, torch.Tensor):
        if value.numel() == 1 and not value.is_complex() and value.dtype != torch.bool:
            return float(value.item())
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    raise TypeError("signlion: %s must be a real number, not %r (%s)" % (name, value, type(value).__name__))


def _check_group(group, index=None):
    """Raises ValueError (a value out of range) or TypeError (not a number, not a pair) naming the
    hyper-parameter, and param group `index` when given, that signlion cannot honour; returns
    the values a step uses: (lr, (beta1, beta2), weight_decay, maximize) as floats and a bool."""
    lr = _real(group["lr"], _named("lr", index))
    if not (math.isfinite(lr) and lr >= 0.0):
        raise ValueError("signlion: %s must be finite and >= 0, not %r" % (_named("lr", index), group["lr"]))
    betas = group["betas"]
    if not isinstance(betas, (tuple, list)):
        raise TypeError("signlion: %s must be a pair (beta1, beta2) of numbers in [0, 1), not %r (%s)"
                        % (_named("betas", index), betas, type(betas).__name__))
    if len(betas) != 2:
        raise ValueError("signlion: %s must be two values in [0, 1), not %r" % (_named("betas", index), betas))
    betas = tuple(_real(b, _named("betas", index)) for b in betas)
    if not all(0.0 <= b < 1.0 for b in betas):
        raise ValueError("signlion: %s must be two values in [0, 1), not %r" % (_named("betas", index),
                                                                                  group["betas"]))
    wd = _real(group["weight_decay"], _named("weight_decay", index))
    if not (math.isfinite(wd) and wd >= 0.0):
        raise ValueError("signlion: %s must be finite and >= 0, not %r" % (_named("weight_decay", index),
                                                                            group["weight_decay"]))
    for flag in ("foreach", "fused"):  # one fused call over a flat bucket is what both ask for
        if group[flag] not in (None, True, False):
            raise ValueError("signlion: %s must be None, True or False, not %r" % (_named(flag, index), group[flag]))
    if group["capturable"]:
        raise ValueError("signlion: capturable=True is not supported: a step cannot be captured in a CUDA graph "
                         "(the host decides momentum averaging and the master copy's first fill when it enqueues "
                         "a step; docs/LION.md)")
    if group["differentiable"]:
        raise ValueError("signlion: differentiable=True is not supported: the update runs in libnccl-sign.so, "
                         "outside autograd")
    if group["maximize"] not in (True, False):
        raise ValueError("signlion: %s must be True or False, not %r" % (_named("maximize", index),
                                                                          group["maximize"]))
    return lr, betas, wd, bool(group["maximize"])


def _check_options(master_weights, momentum_average_every, skip_nonfinite):
    """The optimizer's options as the library takes them: TypeError or ValueError naming the one
    that is not a bool (master_weights, skip_nonfinite) or an int >= 0 (momentum_average_every:
    an int, not a float that would be truncated nor a string)."""
    for name, value in (("master_weights", master_weights), ("skip_nonfinite", skip_nonfinite)):
        if value not in (True, False) or isinstance(value, float):
            raise ValueError("signlion: %s must be True or False, not %r" % (name, value))
    every = momentum_average_every
    if isinstance(every, bool) or not isinstance(every, numbers.Integral):
        raise TypeError("signlion: momentum_average_every must be an int >= 0 (0: never average the momentum), "
                        "not %r (%s)" % (every, type(every).__name__))
    if not 0 <= every <= _MAX_C_INT:
        raise ValueError("signlion: momentum_average_every must be an int in [0, %d] (0: never average the "
                         "momentum), not %r" % (_MAX_C_INT, every))


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
