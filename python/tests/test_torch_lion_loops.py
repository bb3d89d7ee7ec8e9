"""signlion.torch.DistributedLion under the training loops users write, CPU tensors, gloo
process groups of 2 and 3 spawned ranks (docs/PYTORCH.md, "Between backward() and step()"):
 1. torch.nn.utils.clip_grad_norm_ between backward() and step(): overlap on equals overlap
    off bit for bit, in every one of repeated runs, and clipping changes the result; the norm
    read by get_total_norm (PyTorch 2.6+) keeps buckets starting during backward;
 2. the learning rate changed between backward() and step() at every step, a parameter used
    on one rank only: overlap on equals overlap off, identical on every rank; also a schedule
    whose first value equals the initial lr (set by hand, or StepLR stepped there); with
    master_weights, a write into the parameters in place between steps is kept;
 3. a loop that starts changing gradients after steps that overlapped, or writes a bad
    hyper-parameter there: step() raises on every rank, naming the change, and the optimizer
    is failed (never a silently different result, never a bucket stepped twice);
 4. GradScaler's protocol for optimizers that handle scaling themselves (the grad_scale and
    found_inf attributes torch 2.x's GradScaler.step sets): an inf on one rank skips the step
    on every rank with nothing touched; a scale is divided out exactly as GradScaler.unscale_;
 5. any failure inside a step on one rank (here a replaced .data) aborts the communicator:
    the peers raise CommError within seconds, not after the 60 s timeout; calls that differ
    across ranks (a parameter frozen on one rank only) are named as such, not as a lost peer
    (a RuntimeError that is no CommError: a restart would fail the same way);
 6. frozen, unused and tied parameters: a bucket of frozen parameters and a parameter frozen
    after construction hold no later bucket back (they start during backward) and cost no
    state copy (a parameter frozen later is moved to a bucket of its own at the step that
    finds it frozen); a parameter listed twice steps once, as listed once; channels_last kept;
 7. gradients are views into the buckets (no second copy of the gradients);
 8. bucket_cap_mb, overlap and broadcast_parameters compared across ranks (ValueError);
 9. close(): every later step() raises;
10. a torch.compile'd model (PyTorch 2.x) with overlap on: buckets start during backward, and
    the result equals overlap off bit for bit, identical on every rank."""
import os
import sys
import time
import unittest
import warnings

try:
    import torch
    import torch.distributed as dist
    import spawn_ranks
    from test_torch_lion import LR, WD, grads_of
    from test_torch_lion_api import assert_same_on_all_ranks, expect_value_error
    from test_torch_lion_overlap import backward_with, make_params
    HAVE_TORCH = True
except ImportError as e:  # pragma: no cover
    HAVE_TORCH, WHY = False, str(e)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def _mlp(seed=0):
    """About 1.3M parameters: large enough that a bucket's step takes longer than the loop's
    clipping after backward (where today's race shows)."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                               torch.nn.ReLU(), torch.nn.Linear(1024, 10))


def _batch(rank, step):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(64, 256, generator=g), torch.randint(0, 10, (64,), generator=g)


def _train_mlp(rank, overlap, clip, steps=5, lr_between=False, cap=1.0):
    from signlion.torch import DistributedLion
    model = _mlp()
    head = torch.nn.Linear(10, 10)  # registered last: its bucket is the first to start
    params = list(model.parameters()) + list(head.parameters())
    opt = DistributedLion(params, lr=1e-3, weight_decay=0.1, overlap=overlap, bucket_cap_mb=cap)
    for step in range(steps):
        x, y = _batch(rank, step)
        # A head used from the second step on: the first step sees its bucket incomplete.
        out = model(x)
        out = out + head(out) if step else out
        loss = torch.nn.functional.cross_entropy(out, y)
        loss.backward()
        if clip == "value":  # through .data, as torch 1.13's clip_grad_value_: no version counter moves
            for p in params:
                if p.grad is not None:
                    p.grad.data.clamp_(-1e-3, 1e-3)
        elif clip is not None:
            torch.nn.utils.clip_grad_norm_(params, clip)
        if lr_between:
            for g in opt.param_groups:
                g["lr"] = 1e-3 * (step + 1)
        opt.step()
        opt.zero_grad()
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    opt.close()
    return flat


# ---- 1. clipping ----

def check_clipping(rank, world):
    off = _train_mlp(rank, False, 0.5)
    for run in range(3):
        on = _train_mlp(rank, True, 0.5)
        assert torch.equal(on, off), "run %d: overlap on and clip_grad_norm_ differ from overlap off" % run
    by_value = _train_mlp(rank, False, "value")
    for run in range(2):
        assert torch.equal(_train_mlp(rank, True, "value"), by_value), "run %d: a clip through .data differs" % run
    assert_same_on_all_ranks([off], world, "clipped")
    unclipped = _train_mlp(rank, True, None)
    assert not torch.equal(unclipped, off), "clipping changed nothing: the test would not see it ignored"



def check_norm_logging_keeps_overlap(rank, world):
    """The gradient norm read between backward() and step() by get_total_norm (PyTorch 2.6+),
    as docs/PYTORCH.md advises for logging: no gradient is written, so buckets start during
    backward from the second step on."""
    from signlion.torch import DistributedLion
    model = _mlp()
    opt = DistributedLion(model.parameters(), lr=1e-3, bucket_cap_mb=1.0)
    in_backward = []
    opt.launch_observer = lambda event, bucket, during: in_backward.append(during) if event == "launch" else None
    for step in range(3):
        x, y = _batch(rank, step)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
        assert torch.isfinite(norm), norm
        opt.step()
        opt.zero_grad()
    assert any(in_backward), "no bucket started during backward with the norm logged"
    opt.close()

# ---- 2. the learning rate changed between backward() and step() ----

def check_lr_between_backward_and_step(rank, world):
    from signlion.torch import DistributedLion
    results = []
    for overlap in (True, False):
        params = make_params()
        opt = DistributedLion(params, lr=LR, weight_decay=WD, overlap=overlap, bucket_cap_mb=1e-4)
        for step in range(4):
            used = [True] * len(params)
            used[1] = rank == 0  # a bucket complete in backward on rank 0 only
            backward_with(params, grads_of(rank, step, [p.shape for p in params]), used)
            for g in opt.param_groups:
                g["lr"] = LR * (step + 2)
            opt.step()
            opt.zero_grad()
        results.append(torch.cat([p.detach().float().reshape(-1) for p in params]))
        assert_same_on_all_ranks(params, world, "lr changed between backward and step, overlap=%s" % overlap)
        opt.close()
    assert torch.equal(results[0], results[1]), "lr changed between backward and step: overlap on != off"


def check_lr_schedule_starting_at_the_initial_lr(rank, world):
    """A schedule set between backward() and step() whose first value is the initial lr (a step
    decay; StepLR stepped there): the first step sees a write of an equal value, which must count
    as a loop that sets the lr there, so that the later decay is honoured with overlap as without."""
    from signlion.torch import DistributedLion
    for schedule in ("manual", "StepLR"):
        results = []
        for overlap in (True, False):
            params = make_params()
            opt = DistributedLion(params, lr=LR, weight_decay=WD, overlap=overlap, bucket_cap_mb=1e-4)
            steplr = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.1)
            for step in range(5):
                backward_with(params, grads_of(rank, step, [p.shape for p in params]), [True] * len(params))
                if schedule == "manual":
                    for g in opt.param_groups:
                        g["lr"] = LR if step < 2 else LR * 0.1
                else:
                    with warnings.catch_warnings():  # "lr_scheduler.step() before optimizer.step()"
                        warnings.simplefilter("ignore")
                        steplr.step()
                opt.step()
                opt.zero_grad()
            results.append(torch.cat([p.detach().float().reshape(-1) for p in params]))
            assert opt.param_groups[0]["lr"] < LR, "%s: the schedule never decayed the lr" % schedule
            assert_same_on_all_ranks(params, world, "%s between backward and step, overlap=%s" % (schedule, overlap))
            opt.close()
        assert torch.equal(results[0], results[1]), "%s between backward and step: overlap on != off" % schedule


def _master_run(rank, overlap, write):
    """bf16 and fp16 parameters with master_weights: two steps, then write(params) under
    no_grad(), then two more steps; the parameters and the master copies at the end."""
    from signlion.torch import DistributedLion
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s).to(dt)) for s, dt in (((40, 30), torch.bfloat16),
                                                                     ((50,), torch.float16), ((7, 3), torch.bfloat16))]
    opt = DistributedLion(params, lr=1e-3, weight_decay=0.1, overlap=overlap, master_weights=True, bucket_cap_mb=1e-3)
    for step in range(4):
        if step == 2:
            with torch.no_grad():
                write(params)
        backward_with(params, grads_of(rank, step, [p.shape for p in params]), [True] * len(params))
        opt.step()
        opt.zero_grad()
    out = [p.detach().float().clone() for p in params] + [opt.state[p]["master"].clone() for p in params]
    opt.close()
    return out


def check_master_weights_take_in_place_writes(rank, world):
    """master_weights: a write into the parameters in place between steps (weight clipping, a
    load of weights) is what the next step starts from, not lost to the master copy; a write of
    the values they already hold (the version counter moves, no value does) changes nothing."""
    for overlap in (True, False):
        clipped = _master_run(rank, overlap, lambda ps: [p.copy_(p.float().clamp(-0.05, 0.05)) for p in ps])
        bound = 0.05 + 2 * 1e-3 * (1 + 0.1 * 0.05) + 1e-3  # two steps of lr 1e-3 and a bf16 rounding
        for i, p in enumerate(clipped[:3]):
            assert float(p.abs().max()) <= bound, "overlap=%s: parameter %d reached %g after clamping to 0.05" % (
                overlap, i, float(p.abs().max()))
        untouched = _master_run(rank, overlap, lambda ps: None)
        rewritten = _master_run(rank, overlap, lambda ps: [p.copy_(p.clone()) for p in ps])
        for i, (a, b) in enumerate(zip(untouched, rewritten)):
            assert torch.equal(a, b), "overlap=%s: rewriting the same values changed %s %d" % (
                overlap, "parameter" if i < 3 else "master copy", i % 3)
        assert_same_on_all_ranks(clipped[:3], world, "master_weights after a clamp, overlap=%s" % overlap)


# ---- 3. a change that starts after overlapped steps ----

def check_late_change_raises(rank, world):
    from signlion.torch import CommError, DistributedLion
    model = _mlp()
    opt = DistributedLion(model.parameters(), lr=1e-3, bucket_cap_mb=1.0)
    for step in range(3):
        x, y = _batch(rank, step)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        if step == 2:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            try:
                opt.step()
            except CommError:
                pass  # the peer refused first and aborted the communicator
            except RuntimeError as e:
                msg = str(e)
                assert "changed after" in msg and "overlap=False" in msg and "get_total_norm" in msg, msg
            else:
                raise AssertionError("a gradient changed after its bucket started: step() raised nothing")
        else:
            opt.step()
            opt.zero_grad()
    _expect_failed(opt, "the optimizer went on after a refused step")


def _expect_failed(opt, why):
    """step() on a failed optimizer raises (CommError where a peer's abort came first)."""
    from signlion.torch import CommError
    try:
        opt.step()
    except CommError:
        pass
    except RuntimeError as e:
        assert "cannot be used again" in str(e), str(e)
    else:
        raise AssertionError(why)


def check_bad_hyperparameter_after_overlap_raises(rank, world):
    """A bad value written between backward() and step() after buckets started during backward:
    step() raises naming it, and the optimizer is failed (those buckets already stepped with the
    earlier value: a step() after the value is mended must not step them again)."""
    from signlion.torch import CommError, DistributedLion
    model = _mlp()
    opt = DistributedLion(model.parameters(), lr=1e-3, bucket_cap_mb=1.0)
    for step in range(3):
        x, y = _batch(rank, step)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        if step < 2:
            opt.step()
            opt.zero_grad()
    opt.param_groups[0]["lr"] = -1.0
    try:
        opt.step()
    except CommError:
        pass  # the peer failed first and aborted the communicator
    except ValueError as e:
        assert "param group 0: lr" in str(e) and "started during backward" in str(e), str(e)
    else:
        raise AssertionError("a negative lr was accepted")
    opt.param_groups[0]["lr"] = 1e-3
    _expect_failed(opt, "the buckets that stepped during backward were stepped again")


# ---- 4. GradScaler's protocol ----

def _scaled_step(opt, params, grads, scale, found_inf):
    """What torch 2.x's GradScaler.step does for an optimizer with _step_supports_amp_scaling:
    sets grad_scale and found_inf on it, calls step(), deletes them. (torch 1.13's GradScaler
    runs on CUDA only, so on the CPU the protocol is driven here as GradScaler drives it.)"""
    backward_with(params, [g * scale for g in grads], [True] * len(params))
    opt.grad_scale = torch.tensor(float(scale))
    opt.found_inf = torch.tensor(float(found_inf))
    try:
        opt.step()
    finally:
        del opt.grad_scale
        del opt.found_inf
    opt.zero_grad()


def check_grad_scaler_protocol(rank, world):
    from signlion.torch import DistributedLion
    assert getattr(DistributedLion, "_step_supports_amp_scaling", False), "GradScaler would skip step() per rank"
    for overlap in (True, False):
        params = make_params()
        plain = make_params()
        opt = DistributedLion(params, lr=LR, weight_decay=WD, overlap=overlap, bucket_cap_mb=1e-4)
        ref = DistributedLion(plain, lr=LR, weight_decay=WD, overlap=False, bucket_cap_mb=1e-4)
        scale = 2.0 ** 10  # a power of two: the unscaled gradient is exact
        for step in range(4):
            grads = [g.float() for g in grads_of(rank, step, [p.shape for p in params])]
            inf_here = step == 2 and rank == world - 1
            before = [p.detach().clone() for p in params]
            state_before = opt.state_dict()["signlion"]["buckets"]
            _scaled_step(opt, params, grads, scale, inf_here)
            if step == 2:  # skipped on every rank, nothing touched
                assert all(torch.equal(a, p.detach()) for a, p in zip(before, params)), "a skipped step moved a value"
                after = opt.state_dict()["signlion"]["buckets"]
                assert all(torch.equal(a["header"], b["header"]) for a, b in zip(state_before, after)), \
                    "a skipped step changed a counter"
                continue
            backward_with(plain, grads, [True] * len(plain))
            ref.step()
            ref.zero_grad()
            for i, (p, q) in enumerate(zip(params, plain)):
                assert torch.equal(p.detach(), q.detach()), "overlap=%s step %d: parameter %d differs from the " \
                    "unscaled run" % (overlap, step, i)
        opt.close()
        ref.close()


# ---- 5. a failure on one rank aborts ----

def check_failure_aborts(rank, world):
    from signlion.torch import CommError, DistributedLion
    params = make_params()
    opt = DistributedLion(params, lr=LR, bucket_cap_mb=1e-4, timeout=60.0)
    used = [True] * len(params)
    backward_with(params, grads_of(rank, 0, [p.shape for p in params]), used)
    opt.step()
    opt.zero_grad()
    dist.barrier()
    if rank == 1:
        culprit = opt.bucket_layout()[1]["params"][0]
        params[culprit].data = params[culprit].data.clone()  # refused at its bucket's step
    started = time.monotonic()
    try:
        backward_with(params, grads_of(rank, 1, [p.shape for p in params]), used)
        opt.step()
    except CommError as e:
        assert rank != 1, "the failing rank raised CommError: %s" % e
        elapsed = time.monotonic() - started
        assert elapsed < 20.0, "rank %d: CommError after %.1f s, the abort did not reach it" % (rank, elapsed)
    except RuntimeError as e:
        assert rank == 1 and ".data was replaced" in str(e), "rank %d: %s" % (rank, e)
    else:
        raise AssertionError("rank %d: no error" % rank)


def check_calls_that_differ(rank, world):
    """Rank 1 freezes a parameter alone: its next step moves its buckets (a check across ranks)
    while the others step, so the ranks' collectives differ. The rank whose call meets a
    different one raises a RuntimeError saying that the ranks made different calls and that a
    restart will not help (before: a CommError blaming a lost peer and telling to restart); a
    rank that only sees the abort raises CommError, which points at the other's error."""
    from signlion.torch import CommError, DistributedLion
    for overlap in (False, True):
        params = make_params()
        opt = DistributedLion(params, lr=LR, overlap=overlap, bucket_cap_mb=1e-4, timeout=60.0)
        used = [True] * len(params)
        started = time.monotonic()
        try:
            for step in range(4):
                if step == 1 and rank == 1:
                    params[3].requires_grad_(False)
                backward_with(params, grads_of(rank, step, [p.shape for p in params]), used)
                opt.step()
                opt.zero_grad()
        except CommError as e:
            assert "different calls" in str(e) and "restart" in str(e), str(e)
            mismatch = False
        except RuntimeError as e:
            msg = str(e)
            assert "rank %d of %d" % (rank, world) in msg, msg
            assert "The ranks made different calls" in msg and "WARN line" in msg, msg
            assert "Restarting will not help" in msg and "A peer exited" not in msg, msg
            mismatch = True
        else:
            raise AssertionError("rank %d: a parameter frozen on rank 1 only raised nothing" % rank)
        elapsed = time.monotonic() - started
        assert elapsed < 30.0, "rank %d: the error came after %.1f s" % (rank, elapsed)
        seen = [None] * world
        dist.all_gather_object(seen, mismatch)
        assert any(seen), "overlap=%s: no rank said that the ranks made different calls" % overlap
        try:
            opt.step()
        except RuntimeError as e:
            assert isinstance(e, CommError) != mismatch, "the refusal differs from the error: %s" % e
        else:
            raise AssertionError("rank %d: the failed optimizer stepped again" % rank)
        opt.close()


# ---- 6. frozen, tied, channels_last ----

def check_frozen_and_tied(rank, world):
    from signlion import torch as signlion_torch
    from signlion.torch import DistributedLion
    saves = []
    original_save = signlion_torch._Bucket.save

    def counting_save(self):
        saves.append(self.index)
        return original_save(self)

    signlion_torch._Bucket.save = counting_save
    try:
        params = make_params()
        params[0].requires_grad_(False)  # frozen at construction: a bucket of its own
        opt = DistributedLion(params, lr=LR, bucket_cap_mb=float("inf"))
        layout = opt.bucket_layout()
        frozen = [i for i, b in enumerate(layout) if 0 in b["params"]]
        assert layout[frozen[0]]["params"] == [0], layout
        params[6].requires_grad_(False)  # frozen after construction, in the fp32 bucket with 7, 3, 1
        log = []
        opt.launch_observer = lambda event, bucket, in_backward: log.append((event, bucket, in_backward))
        before = params[6].detach().clone()
        for step in range(4):
            used = [p.requires_grad for p in params]
            backward_with(params, grads_of(rank, step, [p.shape for p in params]), used)
            opt.step()
            opt.zero_grad()
            if step >= 1:  # the first step starts every bucket in step() (docs/PYTORCH.md)
                launches = [e for e in log if e[0] == "launch"]
                assert all(in_backward for _, _, in_backward in launches), "a bucket was held to step(): %s" % log
                assert not saves, "step %d: a frozen parameter cost a state copy (buckets %s)" % (step, saves)
            if step == 0:  # the step that found parameter 6 frozen made the buckets anew: 6 apart
                home = [b["params"] for b in opt.bucket_layout() if 6 in b["params"]][0]
                assert sorted(home) == [0, 6], opt.bucket_layout()  # with the other frozen one
            log.clear()
            saves.clear()
        assert torch.equal(before, params[6].detach()), "a frozen parameter moved"
        assert_same_on_all_ranks(params, world, "after freezing")
        opt.close()
        # The same run with a bucket per parameter (nothing to move): the same values, bit for bit.
        alone = make_params()
        alone[0].requires_grad_(False)
        opt = DistributedLion(alone, lr=LR, bucket_cap_mb=1e-5, overlap=False)
        alone[6].requires_grad_(False)
        for step in range(4):
            backward_with(alone, grads_of(rank, step, [p.shape for p in alone]), [p.requires_grad for p in alone])
            opt.step()
            opt.zero_grad()
        for i, (a, b) in enumerate(zip(params, alone)):
            assert torch.equal(a.detach(), b.detach()), "parameter %d: moving buckets changed a value" % i
        opt.close()
    finally:
        signlion_torch._Bucket.save = original_save
    # A parameter listed twice (tied weights) steps once: as the same list without the repeat.
    results = []
    for listing in ("twice", "once"):
        params = make_params()
        listed = params + [params[2]] if listing == "twice" else params
        opt = DistributedLion(listed, lr=LR, weight_decay=WD, bucket_cap_mb=1e-4)
        for step in range(3):
            backward_with(params, grads_of(rank, step, [p.shape for p in params]), [True] * len(params))
            opt.step()
            opt.zero_grad()
        results.append(torch.cat([p.detach().float().reshape(-1) for p in params]))
        opt.state_dict()
        opt.close()
    assert torch.equal(results[0], results[1]), "a parameter listed twice stepped differently from once"
    # channels_last parameters stay channels_last, and step as their contiguous twins do.
    outs = []
    for fmt in (torch.channels_last, torch.contiguous_format):
        torch.manual_seed(3)
        conv = torch.nn.Conv2d(3, 8, 3)
        conv = conv.to(memory_format=fmt)
        opt = DistributedLion(conv.parameters(), lr=LR, weight_decay=WD)
        for step in range(3):
            g = torch.Generator().manual_seed(10 * rank + step)
            x = torch.randn(2, 3, 8, 8, generator=g).to(memory_format=fmt)
            conv(x).square().sum().backward()
            opt.step()
            opt.zero_grad()
        assert conv.weight.is_contiguous(memory_format=fmt), "the weight's memory format was changed"
        exp_avg = opt.state[conv.weight]["exp_avg"]
        assert exp_avg.shape == conv.weight.shape
        outs.append((conv.weight.detach().contiguous(), exp_avg.contiguous()))
        opt.close()
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1]), \
        "channels_last stepped differently"


# ---- 7. gradients as views ----

def check_gradients_are_bucket_views(rank, world):
    from signlion.torch import DistributedLion
    params = make_params()
    opt = DistributedLion(params, lr=LR, bucket_cap_mb=float("inf"))
    for step in range(2):
        backward_with(params, grads_of(rank, step, [p.shape for p in params]), [True] * len(params))
        opt.step()
        for b in opt._buckets:
            lo, hi = b.grad.data_ptr(), b.grad.data_ptr() + b.grad.numel() * b.grad.element_size()
            for p in b.params:
                assert lo <= p.grad.data_ptr() < hi, "a gradient is not a view into its bucket"
        opt.zero_grad(set_to_none=False)
    opt.close()


# ---- 8. settings compared across ranks ----

def check_settings_compared(rank, world):
    from signlion.torch import DistributedLion
    for name, mine in (("bucket_cap_mb", dict(bucket_cap_mb=1.0 if rank == 0 else 2.0)),
                       ("overlap", dict(overlap=rank == 0)),
                       ("broadcast_parameters", dict(broadcast_parameters=rank == 0))):
        expect_value_error(lambda: DistributedLion(make_params(), lr=LR, **mine), name)


# ---- 9. close() ----

def check_close_refuses(rank, world):
    from signlion.torch import DistributedLion
    params = make_params()
    opt = DistributedLion(params, lr=LR)
    opt.close()
    for call in (opt.step, opt.state_dict):
        try:
            call()
        except RuntimeError as e:
            assert "closed" in str(e), str(e)
        else:
            raise AssertionError("%s after close() raised nothing" % call.__name__)


# ---- 10. a torch.compile'd model ----

def _train_compiled(rank, overlap, log=None, steps=4):
    from signlion.torch import DistributedLion
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10))
    # aot_eager: the autograd structure every torch.compile backend has (one compiled backward
    # node whose gradients reach the parameters through AccumulateGrad, where the optimizer's
    # hooks sit), without inductor's C++ code generation, which costs a minute per process here.
    compiled = torch.compile(model, backend="aot_eager")
    opt = DistributedLion(model.parameters(), lr=1e-3, weight_decay=0.1, overlap=overlap, bucket_cap_mb=0.1)
    if log is not None:
        opt.launch_observer = lambda event, bucket, in_backward: log.append((event, bucket, in_backward))
    for step in range(steps):
        g = torch.Generator().manual_seed(1000 * rank + step)
        x, y = torch.randn(32, 64, generator=g), torch.randint(0, 10, (32,), generator=g)
        torch.nn.functional.cross_entropy(compiled(x), y).backward()
        opt.step()
        opt.zero_grad()
        if log is not None and step >= 1:  # the first step starts every bucket in step() (docs/PYTORCH.md)
            launches = [e for e in log if e[0] == "launch"]
            assert len(launches) >= 2 and all(e[2] for e in launches), "a bucket waited for step(): %s" % log
        if log is not None:
            log.clear()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    opt.close()
    return flat


def check_compiled_model(rank, world):
    on = _train_compiled(rank, True, log=[])
    off = _train_compiled(rank, False)
    assert torch.equal(on, off), "a compiled model: overlap on differs from overlap off"
    assert_same_on_all_ranks([on], world, "compiled model")


def run_ranks(world, scenario):
    spawn_ranks.run_gloo_ranks(world, "test_torch_lion_loops", scenario)


@unittest.skipUnless(HAVE_TORCH, "torch is not importable")
class Loops(unittest.TestCase):
    def test_clipping_world2(self):
        run_ranks(2, "check_clipping")

    def test_clipping_world3(self):
        run_ranks(3, "check_clipping")

    @unittest.skipUnless(HAVE_TORCH and hasattr(torch.nn.utils, "get_total_norm"),
                         "torch.nn.utils.get_total_norm needs PyTorch 2.6 or later")
    def test_norm_logging_keeps_overlap_world2(self):
        run_ranks(2, "check_norm_logging_keeps_overlap")

    def test_lr_between_backward_and_step_world2(self):
        run_ranks(2, "check_lr_between_backward_and_step")

    def test_lr_schedule_starting_at_the_initial_lr_world2(self):
        run_ranks(2, "check_lr_schedule_starting_at_the_initial_lr")

    def test_master_weights_take_in_place_writes_world2(self):
        run_ranks(2, "check_master_weights_take_in_place_writes")

    def test_late_change_raises_world2(self):
        run_ranks(2, "check_late_change_raises")

    def test_bad_hyperparameter_after_overlap_raises_world2(self):
        run_ranks(2, "check_bad_hyperparameter_after_overlap_raises")

    def test_grad_scaler_protocol_world2(self):
        run_ranks(2, "check_grad_scaler_protocol")

    def test_failure_aborts_world3(self):
        run_ranks(3, "check_failure_aborts")

    def test_calls_that_differ_world2(self):
        run_ranks(2, "check_calls_that_differ")

    def test_calls_that_differ_world3(self):
        run_ranks(3, "check_calls_that_differ")

    def test_frozen_and_tied_world2(self):
        run_ranks(2, "check_frozen_and_tied")

    def test_gradients_are_bucket_views_world2(self):
        run_ranks(2, "check_gradients_are_bucket_views")

    def test_settings_compared_world2(self):
        run_ranks(2, "check_settings_compared")

    def test_close_refuses_world2(self):
        run_ranks(2, "check_close_refuses")

    @unittest.skipUnless(HAVE_TORCH and hasattr(torch, "compile"), "torch.compile needs PyTorch 2.0 or later")
    def test_compiled_model_world2(self):
        run_ranks(2, "check_compiled_model")


if __name__ == "__main__":
    import unittest_main
    unittest_main.main(HAVE_TORCH, None if HAVE_TORCH else WHY)
