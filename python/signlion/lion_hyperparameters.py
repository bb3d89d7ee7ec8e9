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
