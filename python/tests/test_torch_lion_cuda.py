"""signlion.torch.DistributedLion on CUDA tensors: the optimizer state on the GPU, the steps
enqueued on the current stream, the process group's own ncclComm_t (ProcessGroupNCCL._comm_ptr(),
PyTorch 2.8+). Checked bit for bit against the same optimizer on CPU tensors:
 - "local" on one GPU, no process group;
 - two and four processes on one GPU, each its own NCCL_HOSTID, NCCL's traffic through our net plugin
   (SIGNLION_TEST_NET_PLUGIN): mavo, average and global on the NCCL group against the CPU
   optimizer on a gloo group of the same ranks, parameters after every step and state_dicts.
Issue 17 (gradients on some ranks, rank 0's values, the error for models that differ, lr
through 0, per-parameter state, maximize) on CUDA tensors against CPU tensors, likewise.
Overlap (hooks during backward, steps on a side stream) against overlap=False on CPU, also
with clip_grad_norm_ and torch's GradScaler in the loop, and sign_all_reduce on CUDA tensors
against CPU tensors. The message for a PyTorch without
_comm_ptr is checked on any machine. Exit code 77 (skip)
when everything asked for needed what this machine lacks (torch, CUDA, _comm_ptr, NCCL)."""
import os
import sys
import tempfile
import unittest

try:
    import torch
    import torch.distributed as dist
    import spawn_ranks
    HAVE_TORCH = True
except ImportError as e:  # pragma: no cover
    HAVE_TORCH, WHY = False, str(e)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

LR, WD = 0.01, 0.1


def have_cuda():
    return HAVE_TORCH and torch.cuda.is_available()


def have_comm_ptr():
    """ProcessGroupNCCL._comm_ptr exists in this PyTorch (2.8 and later)."""
    if not (have_cuda() and dist.is_available() and dist.is_nccl_available()):
        return False
    return hasattr(dist.ProcessGroupNCCL, "_comm_ptr")


def have_device_library():
    if not HAVE_TORCH:
        return False
    from signlion import capi
    return capi.has_device_support()


def grads_of(rank, step, shapes):
    """Multiples of 2^-8: any sum order is exact (the global mode's NCCL sum and host ring sum)."""
    g = torch.Generator().manual_seed(1000 * rank + step)
    return [torch.randint(-1024, 1025, s, generator=g).float() / 256.0 for s in shapes]


def make_model(device):
    torch.manual_seed(0)
    return [torch.nn.Parameter(torch.randn(5, 7).to(device)), torch.nn.Parameter(torch.randn(130).to(device)),
            torch.nn.Parameter(torch.randn(3, 33).to(torch.bfloat16).to(device))]


def step_both(cpu_opt, cuda_opt, cpu_params, cuda_params, rank, step):
    for ps in (cpu_params, cuda_params):
        for p, g in zip(ps, grads_of(rank, step, [p.shape for p in cpu_params])):
            p.grad = g.to(p.dtype).to(p.device)
    cpu_opt.step()
    cuda_opt.step()
    torch.cuda.current_stream().synchronize()
    for i, (a, b) in enumerate(zip(cpu_params, cuda_params)):
        assert torch.equal(a.detach(), b.detach().cpu()), "step %d: parameter %d differs between CPU and CUDA" % (
            step, i)


def same_states(cpu_opt, cuda_opt):
    sa, sb = cpu_opt.state_dict()["state"], cuda_opt.state_dict()["state"]
    assert sorted(sa) == sorted(sb)
    assert all(torch.equal(sa[i][k], sb[i][k].cpu()) for i in sa for k in sa[i]), "optimizer states differ"


def check_nccl_equals_cpu(rank, world):
    from signlion.torch import DistributedLion
    gloo = dist.new_group(backend="gloo")
    torch.cuda.set_device(0)
    for aggregation in ("mavo", "average", "global"):
        kw = dict(lr=LR, weight_decay=WD, aggregation=aggregation, master_weights=True, skip_nonfinite=True)
        cpu_params, cuda_params = make_model("cpu"), make_model("cuda")
        cpu_opt = DistributedLion(cpu_params, process_group=gloo, **kw)
        cuda_opt = DistributedLion(cuda_params, **kw)
        assert cuda_opt.nccl_comm, "no ncclComm_t"
        for step in range(4):
            step_both(cpu_opt, cuda_opt, cpu_params, cuda_params, rank, step)
        same_states(cpu_opt, cuda_opt)
        assert cuda_opt.step_counts() == cpu_opt.step_counts() == (4, 0)
        # The CUDA optimizer's state continues on a fresh one (made once the first is closed: a
        # parameter belongs to one open optimizer at a time).
        saved = cuda_opt.state_dict()
        cuda_opt.close()
        again = DistributedLion(cuda_params, **kw)
        again.load_state_dict(saved)
        same_states(cpu_opt, again)
        again.close()


def check_nccl_torch_api(rank, world):
    """Issue 17 on CUDA tensors over the NCCL group, against the CPU optimizer on gloo: rank 0's
    values, the error for models that differ, gradients on some ranks only, lr through 0 (a
    warmup), per-parameter state, and a CPU state_dict loaded into a CUDA optimizer."""
    from signlion.torch import DistributedLion
    gloo = dist.new_group(backend="gloo")
    torch.cuda.set_device(0)
    torch.manual_seed(rank)
    p = torch.nn.Parameter(torch.randn(7, device="cuda"))
    want = p.detach().clone()
    dist.broadcast(want, 0)
    DistributedLion([p], aggregation="mavo").close()
    assert torch.equal(p.detach(), want), "not rank 0's values"
    try:
        DistributedLion([torch.nn.Parameter(torch.zeros(3 if rank == 0 else 4, device="cuda"))], aggregation="mavo")
    except ValueError as e:
        assert "group 0, parameter 0" in str(e), str(e)
    else:
        raise AssertionError("models that differ were accepted")
    kw = dict(lr=LR, weight_decay=WD, aggregation="mavo", master_weights=True)
    cpu_params, cuda_params = make_model("cpu"), make_model("cuda")
    cpu_opt = DistributedLion(cpu_params, process_group=gloo, **kw)
    cuda_opt = DistributedLion(cuda_params, **kw)
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, lambda s: min(1.0, s / 2.0)) for o in (cpu_opt, cuda_opt)]
    for step in range(4):
        grads = grads_of(rank, step, [p.shape for p in cpu_params])
        has = [True, rank == 0 or step == 3, step != 1]  # some ranks only; then no rank at step 1
        for ps in (cpu_params, cuda_params):
            for p, g, h in zip(ps, grads, has):
                p.grad = g.to(p.dtype).to(p.device) if h else None
        cpu_opt.step()
        cuda_opt.step()
        torch.cuda.current_stream().synchronize()
        for i, (a, b) in enumerate(zip(cpu_params, cuda_params)):
            assert torch.equal(a.detach(), b.detach().cpu()), "step %d: parameter %d differs" % (step, i)
            for k in cpu_opt.state[a]:
                assert torch.equal(cpu_opt.state[a][k], cuda_opt.state[b][k].cpu()), (step, i, k)
                # torch.optim's convention: "step" is a CPU scalar tensor, the rest on the parameter's device.
                want_device = torch.device("cpu") if k == "step" else b.device
                assert cuda_opt.state[b][k].device == want_device, (step, i, k, cuda_opt.state[b][k].device)
        for s in scheds:
            s.step()
    same_states(cpu_opt, cuda_opt)
    cuda_opt.close()  # a parameter belongs to one open optimizer at a time
    again = DistributedLion(cuda_params, **kw)
    again.load_state_dict(cpu_opt.state_dict())
    same_states(cpu_opt, again)
    again.close()


def check_nccl_overlap_equals_cpu(rank, world):
    """Overlap on CUDA tensors (hooks on the autograd device thread, steps on a side stream)
    against overlap=False on CPU tensors over gloo: gradients made by backward (the Inject chain
    of test_torch_lion_overlap), some present on some ranks only, tiny and default caps."""
    from signlion.torch import DistributedLion
    from test_torch_lion_overlap import backward_with, make_params, used_at
    gloo = dist.new_group(backend="gloo")
    torch.cuda.set_device(0)
    for aggregation in ("mavo", "global"):
        for cap in (1e-5, 25.0):
            cpu_params, cuda_params = make_params("cpu"), make_params("cuda")
            kw = dict(lr=LR, weight_decay=WD, aggregation=aggregation, bucket_cap_mb=cap, master_weights=True)
            cpu_opt = DistributedLion(cpu_params, process_group=gloo, overlap=False, **kw)
            cuda_opt = DistributedLion(cuda_params, overlap=True, **kw)
            launched = []
            cuda_opt.launch_observer = lambda event, b, in_backward: launched.append((event, b, in_backward))
            for step in range(4):
                grads = grads_of(rank, step, [p.shape for p in cpu_params])
                used = used_at(rank, step, len(cpu_params))
                used[7] = True  # else the first bucket (which holds parameter 7) never completes in backward
                for ps, opt in ((cpu_params, cpu_opt), (cuda_params, cuda_opt)):
                    backward_with(ps, grads, used)
                    opt.step()
                    opt.zero_grad(set_to_none=step % 2 == 0)
                torch.cuda.current_stream().synchronize()
                for i, (a, b) in enumerate(zip(cpu_params, cuda_params)):
                    assert torch.equal(a.detach(), b.detach().cpu()), "%s cap %s step %d: parameter %d differs" % (
                        aggregation, cap, step, i)
            assert any(in_backward for event, _, in_backward in launched if event == "launch"), launched
            same_states(cpu_opt, cuda_opt)
            cuda_opt.close()


def check_nccl_sign_all_reduce(rank, world):
    """sign_all_reduce on CUDA tensors over the NCCL group equals it on CPU tensors over gloo."""
    from signlion.torch import sign_all_reduce
    gloo = dist.new_group(backend="gloo")
    torch.cuda.set_device(0)
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int8):
        for op in ("majority", "average"):
            if dtype == torch.int8 and op == "average":
                continue
            g = torch.Generator().manual_seed(rank)
            x = torch.randint(-2, 3, (1001,), generator=g).to(dtype)
            cpu, cuda = x.clone(), x.cuda()
            sign_all_reduce(cpu, op, group=gloo)
            work = sign_all_reduce(cuda, op, async_op=True)
            work.wait()
            assert torch.equal(cuda.cpu(), cpu), "%s %s: CUDA differs from CPU" % (dtype, op)
            assert work.get_future().wait() is cuda
    torch.cuda.current_stream().synchronize()


def check_nccl_rules_per_optimizer(rank, world):
    """Two optimizers with different vote rules on one process group (one ncclComm_t), stepping in
    turn, each equal to a CPU optimizer with its rules; closing one (ncclSignCommRelease on the
    comm) changes nothing for the other, nor for a sign_all_reduce with rules of its own after it.
    Gradients of -1, 0, +1 give zero votes and ties, so that each rule set has its own result."""
    from signlion.torch import DistributedLion, sign_all_reduce
    gloo = dist.new_group(backend="gloo")
    rules = [dict(zero_rule="abstain", tie_rule="negative"), dict(zero_rule="negative", tie_rule="positive")]
    shapes = [(7, 9), (200,)]
    pairs = []
    for r in rules:
        torch.manual_seed(0)
        start = [torch.randn(s) for s in shapes]
        cpu_params = [torch.nn.Parameter(x.clone()) for x in start]
        cuda_params = [torch.nn.Parameter(x.clone().cuda()) for x in start]
        kw = dict(lr=LR, weight_decay=WD, overlap=False, **r)
        pairs.append((DistributedLion(cpu_params, process_group=gloo, **kw), DistributedLion(cuda_params, **kw),
                      cpu_params, cuda_params))

    def step(i, s):
        cpu_opt, cuda_opt, cpu_params, cuda_params = pairs[i]
        g = torch.Generator().manual_seed(100 * rank + 10 * i + s)
        grads = [torch.randint(-1, 2, sh, generator=g).float() for sh in shapes]
        for ps in (cpu_params, cuda_params):
            for p, x in zip(ps, grads):
                p.grad = x.to(p.device)
        cpu_opt.step()
        cuda_opt.step()
        torch.cuda.current_stream().synchronize()
        for a, b in zip(cpu_params, cuda_params):
            assert torch.equal(a.detach(), b.detach().cpu()), "optimizer %d step %d: CUDA differs from CPU" % (i, s)

    for s in range(3):
        step(0, s)
        step(1, s)
    pairs[0][1].close()  # releases what signlion cached for the comm, the comm's rules with it
    for s in range(3, 5):
        step(1, s)
    for zero_rule in ("abstain", "negative"):
        g = torch.Generator().manual_seed(rank)
        x = torch.randint(-1, 2, (1001,), generator=g).float()
        cpu, cuda = x.clone(), x.cuda()
        sign_all_reduce(cpu, group=gloo, zero_rule=zero_rule, tie_rule="positive")
        sign_all_reduce(cuda, zero_rule=zero_rule, tie_rule="positive")
        assert torch.equal(cuda.cpu(), cpu), "sign_all_reduce %s after close(): CUDA differs from CPU" % zero_rule
    pairs[1][1].close()


def check_nccl_clipping_and_grad_scaler(rank, world):
    """The loops of test_torch_lion_loops on CUDA tensors with overlap on, against overlap=False
    on CPU tensors over gloo: clip_grad_norm_ between backward() and step(); then torch's own
    GradScaler (scale 2^10, exact) with unscale_ and clipping, an inf on the last rank at step
    2 skipping that step on every rank, the CPU run fed the unscaled gradients and skipping
    the same step."""
    from signlion.torch import DistributedLion
    from test_torch_lion_overlap import backward_with, make_params
    gloo = dist.new_group(backend="gloo")
    torch.cuda.set_device(0)
    scaler_type = getattr(torch.amp, "GradScaler", None)
    for use_scaler in (False, True):
        cpu_params, cuda_params = make_params("cpu"), make_params("cuda")
        if use_scaler:  # GradScaler unscales fp32 gradients only (autocast keeps parameters fp32)
            cpu_params, cuda_params = ([torch.nn.Parameter(p.detach().float()) for p in ps]
                                       for ps in (cpu_params, cuda_params))
        kw = dict(lr=LR, weight_decay=WD, bucket_cap_mb=1e-4)
        cpu_opt = DistributedLion(cpu_params, process_group=gloo, overlap=False, **kw)
        cuda_opt = DistributedLion(cuda_params, overlap=True, **kw)
        scaler = (scaler_type("cuda", init_scale=2.0 ** 10, growth_interval=1000) if scaler_type else
                  torch.cuda.amp.GradScaler(init_scale=2.0 ** 10, growth_interval=1000)) if use_scaler else None
        for step in range(4):
            grads = grads_of(rank, step, [p.shape for p in cpu_params])
            inf_step = use_scaler and step == 2
            if inf_step and rank == world - 1:
                grads[0][0, 0] = float("inf")
            if scaler is None:
                backward_with(cuda_params, grads, [True] * len(grads))
                torch.nn.utils.clip_grad_norm_(cuda_params, 0.5)
                cuda_opt.step()
            else:
                backward_with(cuda_params, [g * scaler.get_scale() for g in grads], [True] * len(grads))
                scaler.unscale_(cuda_opt)
                torch.nn.utils.clip_grad_norm_(cuda_params, 0.5)
                scaler.step(cuda_opt)
                scaler.update()
            cuda_opt.zero_grad()
            if not inf_step:
                backward_with(cpu_params, grads, [True] * len(grads))
                torch.nn.utils.clip_grad_norm_(cpu_params, 0.5)
                cpu_opt.step()
            cpu_opt.zero_grad()
            torch.cuda.current_stream().synchronize()
            for i, (a, b) in enumerate(zip(cpu_params, cuda_params)):
                assert torch.equal(a.detach(), b.detach().cpu()), "scaler %s step %d: parameter %d differs" % (
                    use_scaler, step, i)
        cuda_opt.close()
        cpu_opt.close()


def _nccl_body(scenario, rank, world, init_file):
    # Two processes on one GPU: distinct host ids make NCCL treat them as two hosts,
    # which then talk through the net plugin (our socket transport on loopback).
    os.environ["NCCL_HOSTID"] = "signlion-py-%d-%d" % (os.getppid(), rank)
    os.environ["NCCL_NET_PLUGIN"] = os.environ["SIGNLION_TEST_NET_PLUGIN"]
    os.environ["NCCL_SOCKET_IFNAME"] = "lo"
    os.environ["SIGNLION_SOCKET_IFNAME"] = "lo"
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method="file://" + init_file, rank=rank, world_size=world)
    globals()[scenario](rank, world)
    dist.barrier()
    dist.destroy_process_group()


def needs_nccl_group(test):
    """Skips a test of a 2-process NCCL group when this machine cannot make one."""
    test = unittest.skipUnless(os.environ.get("SIGNLION_TEST_NET_PLUGIN"), "SIGNLION_TEST_NET_PLUGIN (the built "
                               "libnccl-net-signlion.so) is not set")(test)
    test = unittest.skipUnless(have_device_library(), "libnccl-sign.so was built without NCCL")(test)
    return unittest.skipUnless(have_comm_ptr(), "needs CUDA and PyTorch's ProcessGroupNCCL._comm_ptr (PyTorch 2.8+)")(
        test)


@unittest.skipUnless(HAVE_TORCH, "torch is not importable")
class DistributedLionCuda(unittest.TestCase):
    def test_comm_ptr_missing_names_the_pytorch_version(self):
        """A backend without _comm_ptr: an error naming the PyTorch version needed (no GPU needed)."""
        from signlion import torch as sltorch

        class NoCommPtrBackend:
            pass

        class Group:
            def _get_backend(self, device):
                return NoCommPtrBackend()

        with tempfile.TemporaryDirectory() as tmp:
            dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, "init"), rank=0, world_size=1)
            try:
                with self.assertRaisesRegex(RuntimeError, r"_comm_ptr\(\) from version 2\.8"):
                    sltorch.nccl_comm_from_process_group(Group(), device="cuda:0")
            finally:
                dist.destroy_process_group()

    @unittest.skipUnless(have_cuda(), "no CUDA device")
    @unittest.skipUnless(have_device_library(), "libnccl-sign.so was built without NCCL")
    def test_local_cuda_equals_cpu(self):
        from signlion.torch import DistributedLion
        for master in (False, True):
            cpu_params, cuda_params = make_model("cpu"), make_model("cuda")
            kw = dict(lr=LR, weight_decay=WD, aggregation="local", master_weights=master, skip_nonfinite=True)
            cpu_opt, cuda_opt = DistributedLion(cpu_params, **kw), DistributedLion(cuda_params, **kw)
            self.assertEqual(cuda_opt.device.type, "cuda")
            for step in range(4):
                step_both(cpu_opt, cuda_opt, cpu_params, cuda_params, 0, step)
            same_states(cpu_opt, cuda_opt)
            # A non-finite gradient: skipped on both, counted on the device without a sync in step().
            for ps in (cpu_params, cuda_params):
                for p in ps:
                    p.grad = torch.full_like(p, float("nan"))
            cpu_opt.step()
            cuda_opt.step()
            self.assertEqual(cuda_opt.step_counts(), (4, 1))
            self.assertEqual(cpu_opt.step_counts(), (4, 1))
            same_states(cpu_opt, cuda_opt)
            cuda_opt.close()
        with self.assertRaises(ValueError):
            DistributedLion([torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(3, device="cuda"))],
                            aggregation="local")

    @needs_nccl_group
    def test_nccl_world2_equals_cpu(self):
        spawn_ranks.run_ranks(2, _nccl_body, "check_nccl_equals_cpu", timeout=500)

    @needs_nccl_group
    def test_nccl_world4_equals_cpu(self):
        """Four processes on the one GPU, each its own NCCL_HOSTID: every NCCL peer is across
        the net plugin, and the sign all-reduce runs with two peers per rank or more."""
        spawn_ranks.run_ranks(4, _nccl_body, "check_nccl_equals_cpu", timeout=500)

    @needs_nccl_group
    def test_nccl_world2_torch_api(self):
        spawn_ranks.run_ranks(2, _nccl_body, "check_nccl_torch_api", timeout=500)

    @needs_nccl_group
    def test_nccl_world2_overlap_equals_cpu(self):
        spawn_ranks.run_ranks(2, _nccl_body, "check_nccl_overlap_equals_cpu", timeout=500)

    @needs_nccl_group
    def test_nccl_world2_sign_all_reduce(self):
        spawn_ranks.run_ranks(2, _nccl_body, "check_nccl_sign_all_reduce", timeout=500)

    @needs_nccl_group
    def test_nccl_world2_clipping_and_grad_scaler(self):
        spawn_ranks.run_ranks(2, _nccl_body, "check_nccl_clipping_and_grad_scaler", timeout=500)

    @needs_nccl_group
    def test_nccl_world2_rules_per_optimizer(self):
        spawn_ranks.run_ranks(2, _nccl_body, "check_nccl_rules_per_optimizer", timeout=500)

    @unittest.skipUnless(have_cuda(), "no CUDA device")
    @unittest.skipUnless(have_device_library(), "libnccl-sign.so was built without NCCL")
    def test_local_cuda_overlap_equals_cpu(self):
        """Overlap with "local" on one GPU: the steps on the side stream, the hooks on the
        autograd device thread, against CPU tensors without overlap."""
        from signlion.torch import DistributedLion
        from test_torch_lion_overlap import backward_with, make_params
        for cap in (1e-5, 25.0):
            cpu_params, cuda_params = make_params("cpu"), make_params("cuda")
            kw = dict(lr=LR, weight_decay=WD, aggregation="local", bucket_cap_mb=cap)
            cpu_opt = DistributedLion(cpu_params, overlap=False, **kw)
            cuda_opt = DistributedLion(cuda_params, **kw)
            for step in range(3):
                grads = grads_of(0, step, [p.shape for p in cpu_params])
                for ps, opt in ((cpu_params, cpu_opt), (cuda_params, cuda_opt)):
                    backward_with(ps, grads, [True] * len(ps))
                    opt.step()
                    opt.zero_grad()
                for i, (a, b) in enumerate(zip(cpu_params, cuda_params)):
                    self.assertTrue(torch.equal(a.detach(), b.detach().cpu()), (cap, step, i))
            same_states(cpu_opt, cuda_opt)
            cuda_opt.close()

    @unittest.skipUnless(have_cuda(), "no CUDA device")
    @unittest.skipUnless(have_device_library(), "libnccl-sign.so was built without NCCL")
    def test_local_cuda_state_and_flags(self):
        """maximize, lr 0 and per-parameter state on CUDA tensors, against CPU tensors."""
        from signlion.torch import DistributedLion
        kw = dict(lr=0.0, weight_decay=WD, aggregation="local", maximize=True, master_weights=True)
        cpu_params, cuda_params = make_model("cpu"), make_model("cuda")
        cpu_opt, cuda_opt = DistributedLion(cpu_params, **kw), DistributedLion(cuda_params, **kw)
        step_both(cpu_opt, cuda_opt, cpu_params, cuda_params, 0, 0)  # lr 0: only the momentum moves
        for g in cpu_opt.param_groups + cuda_opt.param_groups:
            g["lr"] = LR
        for step in range(1, 4):
            step_both(cpu_opt, cuda_opt, cpu_params, cuda_params, 0, step)
        for a, b in zip(cpu_params, cuda_params):
            self.assertEqual(cuda_opt.state[b]["exp_avg"].device, b.device)
            self.assertTrue(torch.equal(cpu_opt.state[a]["exp_avg"], cuda_opt.state[b]["exp_avg"].cpu()))
        same_states(cpu_opt, cuda_opt)
        cuda_opt.close()


if __name__ == "__main__":
    import unittest_main
    unittest_main.main(HAVE_TORCH, None if HAVE_TORCH else WHY)
