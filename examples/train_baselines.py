"""The contenders examples/train.py compares signlion with (scripts/train_bench.sh runs them all).

Each maker takes (model, args, device) and returns (model_to_train, optimizer, comm_counter):
model_to_train is the model the forward pass runs (a DDP wrapper where the contender is DDP),
comm_counter a function returning the payload bytes this rank has sent so far when the
contender can count them itself (signlion's communicator), else None.

  ddp-adamw           DistributedDataParallel (fp32 all-reduce of the gradients, overlapped
                      with backward, 25 MB buckets) + torch.optim.AdamW
  ddp-lion            DDP + lion_pytorch.Lion: plain ("global") Lion on the mean gradient
  ddp-fp16-lion       DDP with the fp16 compression hook (gradients all-reduced in fp16) + Lion
  ddp-bf16-lion       DDP with the bf16 compression hook (gradients all-reduced in bfloat16)
                      + Lion; refused (Unavailable) where gloo cannot all-reduce bfloat16
                      (PyTorch 1.13)
  ddp-powersgd-lion   DDP with the PowerSGD hook (rank 4, error feedback, warm start,
                      2 warm-up steps of plain all-reduce) + Lion; one bucket's round at a
                      time (OrderedPowerSGD: over gloo the hook as it comes aborts with more
                      than one bucket)
  allgather-lion      the reference code's pattern of Distributed Lion: every rank packs its
                      votes c >= 0 into bits, all-gathers the packed votes through
                      torch.distributed, counts them and steps on the majority (a baseline
                      written here, in plain PyTorch; not part of the library)
  local-lion          signlion's optimizer with aggregation="local": no communication at all,
                      each rank trains alone (the floor every distributed contender is
                      compared with; its ranks' parameters differ)
  signlion-mavo       signlion.torch.DistributedLion, majority vote of the ranks' signs
  signlion-average    the same, average of the signs
"""
import inspect

import torch
import torch.distributed as dist


class Unavailable(RuntimeError):
    """A contender that cannot run with this PyTorch and backend (train.py exits 3, a skip)."""


def _ddp(model, device, **kwargs):
    ids = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids, **kwargs)


def _lion(params, args):
    from lion_pytorch import Lion
    return Lion(params, lr=args.lr, betas=(0.9, 0.99), weight_decay=args.weight_decay)


def ddp_adamw(model, args, device):
    ddp = _ddp(model, device)
    return ddp, torch.optim.AdamW(ddp.parameters(), lr=args.lr, weight_decay=args.weight_decay), None


def ddp_lion(model, args, device):
    ddp = _ddp(model, device)
    return ddp, _lion(ddp.parameters(), args), None


def ddp_fp16_lion(model, args, device):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    ddp = _ddp(model, device)
    ddp.register_comm_hook(dist.group.WORLD, default_hooks.fp16_compress_hook)
    return ddp, _lion(ddp.parameters(), args), None


def _gloo_takes_bf16():
    """Whether this PyTorch's gloo all-reduces bfloat16 (1.13's refuses: "Invalid scalar type").
    Collective: every rank checks at the same point, and a refusal sends nothing."""
    try:
        dist.all_reduce(torch.zeros(1, dtype=torch.bfloat16))
        return True
    except RuntimeError:
        return False


def ddp_bf16_lion(model, args, device):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    if dist.get_backend() == "gloo" and not _gloo_takes_bf16():
        raise Unavailable("ddp-bf16-lion: PyTorch %s's gloo backend cannot all-reduce bfloat16 (\"Invalid scalar "
                          "type\"), which bf16_compress_hook needs; use a PyTorch whose gloo can, or the nccl "
                          "backend" % torch.__version__)
    ddp = _ddp(model, device)

    def bf16_hook(process_group, bucket):
        # DDP refuses torch's hook by its name unless PyTorch was built with CUDA 11 and NCCL 2.10
        # (a check meant for the nccl backend); under another name it runs over gloo unchanged.
        return default_hooks.bf16_compress_hook(process_group, bucket)
    ddp.register_comm_hook(dist.group.WORLD, bf16_hook if device.type == "cpu" else default_hooks.bf16_compress_hook)
    return ddp, _lion(ddp.parameters(), args), None


class OrderedPowerSGD:
    """torch's powerSGD_hook with one bucket's round at a time. The hook issues its P and Q
    all-reduces from the callbacks of the bucket's first all-reduce, on the backend's threads,
    while backward goes on issuing the next buckets' all-reduces on its own thread: the order
    in which a rank issues its collectives then differs between ranks, and gloo (which matches
    collectives by the order they are issued) aborts, e.g. "op.preamble.length <= op.nbytes.
    16424 vs 4096" (PyTorch 1.13, and 2.15 still: "2088 vs 512", on any model whose gradients
    span more than one bucket: DDP's first bucket holds at most 1 MB). Waiting, when a bucket becomes ready, for the previous
    bucket's round to finish keeps the order the same on every rank; a round still runs while
    backward computes the gradients of the next bucket."""

    def __init__(self, state):
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
        self.state, self.hook, self.previous = state, powerSGD_hook.powerSGD_hook, None

    def __call__(self, state, bucket):
        if self.previous is not None:
            self.previous.wait()
        self.previous = self.hook(state, bucket)
        return self.previous


def ddp_powersgd_lion(model, args, device):
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
    ddp = _ddp(model, device)
    state = powerSGD_hook.PowerSGDState(process_group=dist.group.WORLD, matrix_approximation_rank=4,
                                        start_powerSGD_iter=2, use_error_feedback=True, warm_start=True,
                                        random_seed=args.seed)
    ordered = OrderedPowerSGD(state)

    def powersgd_hook(state, bucket):  # register_comm_hook wants a function
        return ordered(state, bucket)
    ddp.register_comm_hook(state, powersgd_hook)
    return ddp, _lion(ddp.parameters(), args), None


class AllGatherVoteLion(torch.optim.Optimizer):
    """Distributed Lion as its reference code runs it over torch.distributed: each rank keeps its
    momentum m, forms c = beta1 m + (1 - beta1) g, packs the votes c >= 0 of all its parameters
    into one bit per element, all-gathers the packed votes of every rank, counts the positive
    votes n+ per element and steps on sign(2 n+ - N) (a tie moves nothing); then
    m = beta2 m + (1 - beta2) g: the rule of signlion's "mavo" with its default zero and tie rules
    (a zero votes +1, a tie is 0). Rank 0's parameters are broadcast at construction."""

    _SHIFTS = torch.arange(8, dtype=torch.uint8)

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))
        self.world = dist.get_world_size()
        with torch.no_grad():
            for g in self.param_groups:
                for p in g["params"]:
                    dist.broadcast(p.data, src=0)

    @torch.no_grad()
    def step(self, closure=None):
        entries = [(g, p) for g in self.param_groups for p in g["params"] if p.grad is not None]
        if not entries:
            return None
        cs = []
        for g, p in entries:
            st = self.state[p]
            if "exp_avg" not in st:
                st["exp_avg"] = torch.zeros_like(p)
            cs.append((st["exp_avg"] * g["betas"][0]).add_(p.grad, alpha=1 - g["betas"][0]).reshape(-1))
        votes = torch.cat(cs) >= 0
        n = votes.numel()
        padded = torch.zeros((n + 7) // 8 * 8, dtype=torch.uint8, device=votes.device)
        padded[:n] = votes
        shifts = self._SHIFTS.to(votes.device)
        packed = (padded.view(-1, 8) << shifts).sum(dim=1, dtype=torch.uint8)
        gathered = [torch.empty_like(packed) for _ in range(self.world)]
        dist.all_gather(gathered, packed)
        positive = torch.zeros(padded.numel(), dtype=torch.int16, device=votes.device)
        for q in gathered:
            positive += ((q.unsqueeze(1) >> shifts) & 1).view(-1)
        update = (2 * positive[:n] - self.world).sign_().to(cs[0].dtype)
        offset = 0
        for g, p in entries:
            k = p.numel()
            p.mul_(1 - g["lr"] * g["weight_decay"]).add_(update[offset:offset + k].view_as(p), alpha=-g["lr"])
            self.state[p]["exp_avg"].mul_(g["betas"][1]).add_(p.grad, alpha=1 - g["betas"][1])
            offset += k
        return None


def allgather_lion(model, args, device):
    return model, AllGatherVoteLion(model.parameters(), lr=args.lr, weight_decay=args.weight_decay), None


def _distributed_lion(aggregation):
    def make(model, args, device):
        from signlion.torch import DistributedLion
        kwargs = {}
        if "overlap" in inspect.signature(DistributedLion).parameters:
            kwargs["overlap"] = args.overlap == "on"
        elif args.overlap == "on" and aggregation != "local":
            raise SystemExit("train.py: --overlap on: this signlion's DistributedLion has no overlap argument")
        if getattr(args, "delay", 0):
            kwargs["delay"] = args.delay  # the previous step's vote applied (train.py --delay 1)
        opt = DistributedLion(model.parameters(), lr=args.lr, betas=(0.9, 0.99), weight_decay=args.weight_decay,
                              aggregation=aggregation, **kwargs)
        comm = opt.comm
        return model, opt, (lambda: comm.wire_bytes()[0]) if comm is not None else None
    return make


def overlap_supported():
    """Whether this signlion's DistributedLion takes overlap= (launching steps during backward)."""
    from signlion.torch import DistributedLion
    return "overlap" in inspect.signature(DistributedLion).parameters


CONTENDERS = {
    "signlion-mavo": _distributed_lion("mavo"),
    "signlion-average": _distributed_lion("average"),
    "local-lion": _distributed_lion("local"),
    "ddp-adamw": ddp_adamw,
    "ddp-lion": ddp_lion,
    "ddp-fp16-lion": ddp_fp16_lion,
    "ddp-bf16-lion": ddp_bf16_lion,
    "ddp-powersgd-lion": ddp_powersgd_lion,
    "allgather-lion": allgather_lion,
}
# Whose ranks must end with identical parameters (all but the one that does not communicate).
SYNCHRONOUS = set(CONTENDERS) - {"local-lion"}
# Whose resume continues bit for bit (PowerSGD's error feedback and low-rank factors live in the
# hook's state, outside the optimizer's state_dict: a resumed run starts them afresh).
EXACT_RESUME = set(CONTENDERS) - {"ddp-powersgd-lion"}
