#!/usr/bin/env python3
"""Data-parallel training with Distributed Lion, launched by torchrun (docs/TRAINING.md).

  torchrun --nproc_per_node 4 examples/train.py --workload mlp --steps 300
  torchrun --nnodes 2 --nproc_per_node 8 --rdzv_backend c10d --rdzv_endpoint HOST:29500 \\
      examples/train.py --workload lm --ckpt-dir ckpt --ckpt-every 100 [--resume]

torchrun's environment (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK) is all it needs:
init_process_group("env://") with gloo for CPU tensors (nccl for --device cuda), and
signlion.torch.DistributedLion finds its peers through that process group's store. On hosts
with several interfaces, set GLOO_SOCKET_IFNAME (or NCCL_SOCKET_IFNAME): signlion follows it
when SIGNLION_SOCKET_IFNAME is unset.

Workloads (data that Debian packages ship; scripts/setup.sh installs them):
  mlp  a 784-4096-4096-10 MLP (20.0M parameters; --width) on Fashion-MNIST (dataset-fashion-mnist);
       metric: accuracy on the first --val-size test images
  lm   a byte-level transformer language model (6 layers, width 384, 10.8M parameters) on
       the fortune cookies of Debian's fortunes package (/usr/share/games/fortunes, 1.7 MB of
       English text; the last 5 % held out); metric: validation loss (nats per byte)
  SIGNLION_FASHION_DIR and SIGNLION_FORTUNES_DIR name other folders with the same files.

--optimizer picks the contender (examples/train_baselines.py): signlion-mavo (the default),
signlion-average, local-lion, ddp-adamw, ddp-lion, ddp-fp16-lion, ddp-powersgd-lion,
allgather-lion. Every rank draws its own --batch examples per step (a global batch of
--batch x WORLD_SIZE) in an order fixed by --seed and the step number, so a checkpoint (the
model, this rank's optimizer state_dict, the step and the RNG states, written every
--ckpt-every steps to a temporary file, then renamed; the --keep newest kept) resumes exactly
where the run left off: --resume continues from the newest step whose checkpoint every rank
has complete and ends with the parameters an uninterrupted run has, bit for bit. It refuses a
checkpoint whose run settings (every option that changes the result, and the rank count)
differ from this run's, naming the first; a run without --resume refuses a --ckpt-dir that
holds checkpoints when it writes its own.

--trace FILE (signlion-* and local-lion) records the optimizer's step timeline over --trace-steps steps
(3) after --trace-warmup steps (5): each rank writes its own Chrome/Perfetto trace, FILE with
.rank<r> before its extension (trace.json: trace.rank0.json, trace.rank1.json, ...), to open in
ui.perfetto.dev or chrome://tracing beside torch.profiler's (docs/TRAINING.md, "Where a step's
time goes"); signlion.timeline.merge_chrome_traces puts the ranks in one file.

--clip-grad-norm MAX clips each rank's gradients between backward() and step(); --amp
(--device cuda) runs the forward pass under autocast, fp16 with a GradScaler or bf16 without.

A lost rank (killed, frozen, its link down) makes every other rank fail within --timeout
seconds (the process group's timeout, which signlion's communicator follows) and exit with
status 1 at once; torchrun then stops the remaining workers and, with --max-restarts, starts
the job again, which continues from the last checkpoint when run with --resume:
  torchrun --nnodes 2 --nproc_per_node 8 --max-restarts 3 ... examples/train.py \
      --ckpt-dir ckpt --ckpt-every 100 --resume --timeout 60

Rank 0 shows a progress bar (on a terminal) and every --log-every steps a line: loss,
samples/s, and the bytes this rank sent per step (signlion's own counter, and the interface's
tx_bytes when GLOO_SOCKET_IFNAME names one). --json PATH writes rank 0's step times (forward +
backward, optimizer step), evaluations and byte counts for scripts/train_bench.sh. At the end
the ranks compare a digest of their parameters: a contender that communicates must end
identical on every rank (exit 1 otherwise).
"""
import argparse
import contextlib
import glob
import hashlib
import json
import datetime
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import signlion  # noqa: F401  the installed package (pip install .), which carries its library
except ImportError:
    sys.path.insert(0, os.path.join(HERE, "..", "python"))  # signlion from a source checkout
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import train_baselines  # noqa: E402
from fashion_mnist import FASHION_DIR, read_idx as _read_idx  # noqa: E402

FORTUNES_DIR = os.environ.get("SIGNLION_FORTUNES_DIR") or "/usr/share/games/fortunes"
# Learning rates for (workload, optimizer family): Lion's is a tenth of AdamW's, as its paper advises.
DEFAULT_LR = {("mlp", "lion"): 1e-4, ("mlp", "adamw"): 1e-3, ("lm", "lion"): 3e-4, ("lm", "adamw"): 1e-3}
DEFAULT_WD = {"lion": 0.1, "adamw": 0.01}


# ---- workloads -------------------------------------------------------------------------------

class FashionMLP:
    """Fashion-MNIST, a wide MLP: the parameters are many for the compute (a layer of 4096 x 4096)."""
    metric, higher_is_better = "accuracy", True

    def __init__(self, args):
        self.width = args.width
        if not os.path.isdir(FASHION_DIR):
            raise SystemExit("train.py: %s is missing (Debian package dataset-fashion-mnist; scripts/setup.sh)"
                             % FASHION_DIR)
        self.x = torch.from_numpy(_read_idx("train-images-idx3-ubyte.gz").copy()).float().div_(255).view(-1, 784)
        self.y = torch.from_numpy(_read_idx("train-labels-idx1-ubyte.gz").astype(np.int64))
        self.vx = torch.from_numpy(_read_idx("t10k-images-idx3-ubyte.gz").copy()).float().div_(255).view(-1, 784)
        self.vy = torch.from_numpy(_read_idx("t10k-labels-idx1-ubyte.gz").astype(np.int64))
        self.vx, self.vy = self.vx[:args.val_size], self.vy[:args.val_size]

    def model(self):
        w = self.width
        return nn.Sequential(nn.Linear(784, w), nn.ReLU(), nn.Linear(w, w), nn.ReLU(), nn.Linear(w, 10))

    def batch(self, step, rank, world, b, seed):
        """This rank's examples of `step`: a slice of the epoch's permutation (fixed by seed and epoch)."""
        n = len(self.y)
        start = step * b * world + rank * b
        idx = []
        while len(idx) < b:
            epoch, pos = divmod(start + len(idx), n)
            perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1000 + epoch))
            idx += perm[pos:pos + b - len(idx)].tolist()
        idx = torch.tensor(idx)
        return self.x[idx], self.y[idx]

    def loss(self, model, x, y):
        return F.cross_entropy(model(x), y)

    def evaluate(self, model, rank, world):
        """(sum, count) of correct predictions over this rank's share of the validation images."""
        xs, ys = self.vx[rank::world], self.vy[rank::world]
        correct = 0
        for i in range(0, len(ys), 500):
            correct += (model(xs[i:i + 500]).argmax(1) == ys[i:i + 500]).sum().item()
        return float(correct), float(len(ys))


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class ByteLM(nn.Module):
    def __init__(self, context, width=384, layers=6, heads=6):
        super().__init__()
        self.tok = nn.Embedding(256, width)
        self.pos = nn.Parameter(torch.zeros(context, width))
        self.blocks = nn.ModuleList([Block(width, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, 256)
        self.register_buffer("mask", torch.triu(torch.full((context, context), float("-inf")), 1), persistent=False)

    def forward(self, tokens):
        t = tokens.shape[1]
        x = self.tok(tokens) + self.pos[:t]
        for blk in self.blocks:
            x = blk(x, self.mask[:t, :t])
        return self.head(self.ln(x))


class FortunesLM:
    """Debian's fortune cookies as bytes; windows of --context + 1 bytes at offsets drawn per step."""
    metric, higher_is_better = "val loss", False

    def __init__(self, args):
        files = sorted(f for f in glob.glob(os.path.join(FORTUNES_DIR, "*"))
                       if os.path.isfile(f) and not f.endswith((".dat", ".u8")))
        if not files:
            raise SystemExit("train.py: no texts in %s (Debian package fortunes; scripts/setup.sh)" % FORTUNES_DIR)
        data = b"".join(open(f, "rb").read() for f in files)
        text = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
        cut = int(len(text) * 0.95)
        self.train, self.val, self.context = text[:cut], text[cut:], args.context
        g = torch.Generator().manual_seed(4321)
        self.val_offsets = torch.randint(0, len(self.val) - self.context - 1, (args.val_size,), generator=g)

    def model(self):
        return ByteLM(self.context)

    def _windows(self, text, offsets):
        idx = offsets.unsqueeze(1) + torch.arange(self.context + 1)
        w = text[idx]
        return w[:, :-1], w[:, 1:]

    def batch(self, step, rank, world, b, seed):
        g = torch.Generator().manual_seed((seed * 1000003 + step) * 4099 + rank)
        return self._windows(self.train, torch.randint(0, len(self.train) - self.context - 1, (b,), generator=g))

    def loss(self, model, x, y):
        return F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))

    def evaluate(self, model, rank, world):
        """(sum, count) of the per-window mean losses over this rank's share of the validation windows."""
        offs = self.val_offsets[rank::world]
        total = 0.0
        for i in range(0, len(offs), 32):
            x, y = self._windows(self.val, offs[i:i + 32])
            total += F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1), reduction="sum").item() / self.context
        return total, float(len(offs))


WORKLOADS = {"mlp": FashionMLP, "lm": FortunesLM}


# ---- checkpoints -----------------------------------------------------------------------------

def _atomic_save(obj, path):
    """The file appears complete or not at all (also after a crash of the machine: synced first)."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dirfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)


CHECKPOINT_NAME = re.compile(r"step(\d{8})-rank(\d+)\.pt(\.tmp)?$")

# The options that do not change what a run computes: a resumed run may set them differently.
# Every other option (and any added later) is a setting of the run, saved with its checkpoints
# and compared by --resume. --threads may change the last bits of OpenBLAS's sums, but it is a
# property of the machine the run continues on, not of the run; --overlap gives the same
# parameters bit for bit on or off (DistributedLion's contract), and tracing only observes.
NOT_RUN_SETTINGS = {"steps", "threads", "ckpt_dir", "ckpt_every", "resume", "keep", "timeout", "eval_every",
                    "val_size", "log_every", "json", "save_params", "overlap", "trace", "trace_warmup",
                    "trace_steps"}
# Options that only one workload reads.
WORKLOAD_SETTINGS = {"width": "mlp", "context": "lm"}


def run_settings(args, world):
    """What defines the run (its parameters after each step), in the order of the options; the
    defaults resolved (--lr, --weight-decay, --overlap), the rank count last."""
    settings = {}
    for key, value in vars(args).items():
        if key in NOT_RUN_SETTINGS or WORKLOAD_SETTINGS.get(key, args.workload) != args.workload:
            continue
        settings[key] = value
    settings["ranks"] = world
    return settings


def _setting_name(key):
    return "the rank count (WORLD_SIZE)" if key == "ranks" else "--" + key.replace("_", "-")


def settings_difference(saved, current):
    """None when the run settings are the same, else a sentence naming the first that differs."""
    for key in list(current) + [k for k in saved if k not in current]:
        if key in NOT_RUN_SETTINGS:
            continue  # saved by a train.py that still counted it as a setting of the run
        if key not in saved:
            return "%s is %r in this run and was not set in the checkpoint's" % (_setting_name(key), current[key])
        if key not in current:
            return "%s was %r in the checkpoint's run and is unknown to this train.py" % (_setting_name(key),
                                                                                          saved[key])
        if saved[key] != current[key]:
            return "%s was %r and is %r now" % (_setting_name(key), saved[key], current[key])
    return None


class Refused(Exception):
    """A checkpoint folder this run must not use (every rank raises it alike; train.py exits 2)."""


def checkpoint_path(ckpt_dir, step, rank):
    return os.path.join(ckpt_dir, "step%08d-rank%d.pt" % (step, rank))


def save_checkpoint(args, step, module, optimizer, scaler, rank):
    """Every rank writes its own file (the optimizer states differ: each rank keeps its momentum)
    once its step has completed (a failed step raises before this, and its optimizer refuses
    state_dict()); once all have, rank 0 renames LATEST to point at the step, and each rank
    deletes its own files of the steps older than the --keep newest that every rank has.
    A failure during the writes leaves some ranks' files of that step: load_checkpoint() picks
    the newest step every rank has, which the deletions, done after every rank's write, spare;
    a crash during the deletions leaves some of the files they would have deleted."""
    world = dist.get_world_size()
    _atomic_save({"step": step, "model": module.state_dict(), "optimizer": optimizer.state_dict(),
                  "scaler": scaler.state_dict() if scaler is not None else None,
                  "torch_rng": torch.get_rng_state(), "settings": run_settings(args, world)},
                 checkpoint_path(args.ckpt_dir, step, rank))
    dist.barrier()
    if rank == 0:
        tmp = os.path.join(args.ckpt_dir, "LATEST.tmp")
        with open(tmp, "w") as f:
            f.write("%d\n" % step)
        os.replace(tmp, os.path.join(args.ckpt_dir, "LATEST"))
    keep = sorted(s for s in common_steps(args.ckpt_dir, rank) if s <= step)[-args.keep:]
    for name in os.listdir(args.ckpt_dir):
        m = CHECKPOINT_NAME.match(name)  # this rank's files, and what a failed write of them left
        if m and int(m.group(2)) == rank and int(m.group(1)) < step and int(m.group(1)) not in keep:
            os.remove(os.path.join(args.ckpt_dir, name))
    dist.barrier()


def complete_steps(ckpt_dir, rank):
    """The steps of which this rank's checkpoint file is complete (written files are renamed into
    place whole; a .tmp left by a failure is not one)."""
    steps = set()
    for name in os.listdir(ckpt_dir) if os.path.isdir(ckpt_dir) else []:
        m = CHECKPOINT_NAME.match(name)
        if m and int(m.group(2)) == rank and not m.group(3):
            steps.add(int(m.group(1)))
    return steps


def steps_per_rank(ckpt_dir, rank):
    """Every rank's complete_steps, sorted, in rank order (the ranks agree on them: their
    folders may be on different machines). Collective."""
    per_rank = [None] * dist.get_world_size()
    dist.all_gather_object(per_rank, sorted(complete_steps(ckpt_dir, rank)))
    return per_rank


def common_steps(ckpt_dir, rank):
    """The steps whose checkpoint every rank has complete. Collective."""
    per_rank = steps_per_rank(ckpt_dir, rank)
    return set(per_rank[0]).intersection(*per_rank[1:])


def find_checkpoint(args, rank):
    """--resume: (step, this rank's checkpoint) of the newest step every rank has complete, or
    (0, None) when no rank has any; refused where some ranks have checkpoints but no step is
    complete on all (starting over would overwrite and --keep delete them); --ckpt-every without --resume: (0, None), refused where some rank's
    folder holds checkpoint files (of an earlier run, which the new run's would mix with and
    --keep would delete). A checkpoint whose run settings differ from this run's is refused on
    every rank, naming the first setting that differs. Collective: every rank returns or raises
    Refused alike."""
    world = dist.get_world_size()
    if not args.resume and not args.ckpt_every:
        return 0, None  # the folder is neither read nor written
    per_rank = steps_per_rank(args.ckpt_dir, rank)
    held = sorted(set().union(*per_rank))
    if not args.resume:
        if held:
            raise Refused("train.py: --ckpt-dir %s holds the checkpoints of an earlier run (steps %s); continue "
                          "it with --resume (with its settings), or give this run a folder of its own"
                          % (args.ckpt_dir, ", ".join(str(s) for s in held)))
        return 0, None
    common = set(per_rank[0]).intersection(*per_rank[1:])
    if not common:
        if held:
            # Starting over would overwrite (and --keep delete) the checkpoints some ranks hold.
            raise Refused("train.py: --resume refused: no step's checkpoint in %s is complete on all %d ranks "
                          "(%s): a rank's files are missing (a machine replaced with an empty disk?), or they "
                          "were written by a run with another number of ranks. Restore the missing files, resume "
                          "with the rank count that wrote them, or give a new run a folder of its own"
                          % (args.ckpt_dir, world, "; ".join(
                              "rank %d: %s" % (r, ", ".join(str(s) for s in steps) if steps else "none")
                              for r, steps in enumerate(per_rank))))
        return 0, None  # an empty folder: the first start of a job launched with --resume
    step = max(common)
    ck = torch.load(checkpoint_path(args.ckpt_dir, step, rank))
    if "settings" in ck:
        why = settings_difference(ck["settings"], run_settings(args, world))
    else:
        why = "it records no run settings (an earlier train.py wrote it), so it cannot be checked against this run"
    whys = [None] * world
    dist.all_gather_object(whys, why)
    for r, why in enumerate(whys):
        if why is not None:
            raise Refused("train.py: --resume refused: the checkpoint of step %d in %s (rank %d's file) is of "
                          "another run: %s. Resume with the settings it was written with, or give a new run a "
                          "folder of its own" % (step, args.ckpt_dir, r, why))
    return step, ck


def load_checkpoint(ck, module, optimizer, scaler):
    """Model, optimizer, GradScaler and RNG states from this rank's checkpoint (find_checkpoint)."""
    with torch.no_grad():
        module.load_state_dict(ck["model"])  # copies into the parameters in place
    optimizer.load_state_dict(ck["optimizer"])
    if scaler is not None:
        scaler.load_state_dict(ck["scaler"])
    torch.set_rng_state(ck["torch_rng"])


# ---- what rank 0 shows -----------------------------------------------------------------------

class Progress:
    """A progress bar on rank 0's terminal (stderr), redrawn at most 10 times a second."""

    def __init__(self, total, first, enabled):
        self.total, self.first, self.enabled = total, first, enabled and sys.stderr.isatty()
        self.t0, self.last = time.monotonic(), 0.0

    def update(self, step, text):
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.last < 0.1 and step < self.total:
            return
        self.last = now
        done = step / max(self.total, 1)
        rate = (step - self.first) / max(now - self.t0, 1e-9)
        eta = (self.total - step) / rate if rate > 0 else float("nan")
        bar = "#" * int(30 * done) + "." * (30 - int(30 * done))
        sys.stderr.write("\r[%s] %d/%d %s eta %.0fs " % (bar, step, self.total, text, eta))
        if step >= self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def interface_tx_bytes():
    """Bytes the interface named by GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME has sent (None when
    unnamed or unreadable): what every contender put on this rank's link, headers included."""
    name = os.environ.get("GLOO_SOCKET_IFNAME") or os.environ.get("NCCL_SOCKET_IFNAME")
    if not name or "," in name:
        return None
    try:
        with open("/sys/class/net/%s/statistics/tx_bytes" % name.lstrip("=^")) as f:
            return int(f.read())
    except OSError:
        return None


def parameter_digest(module):
    h = hashlib.sha256()
    for p in module.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


# ---- mixed precision -------------------------------------------------------------------------

def make_scaler(args):
    """--amp fp16's GradScaler (None without --amp and for bf16, whose range needs no scaling)."""
    if args.amp != "fp16":
        return None
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):  # PyTorch 2.3 and later
        return torch.amp.GradScaler("cuda")
    return torch.cuda.amp.GradScaler()


def autocast(args):
    if args.amp is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type="cuda", dtype=torch.float16 if args.amp == "fp16" else torch.bfloat16)


def agree_on_overflow(scaler, optimizer):
    """After scaler.unscale_(optimizer): every rank sees the inf/NaN that any rank's gradients hold,
    so that all ranks skip the step, and lower the scale, alike. DDP's gradients are the same on
    every rank already; Distributed Lion's are each rank's own, and one rank skipping step() while
    the others step would leave their collectives unmatched. GradScaler keeps the flags in a
    private table (what torch's ShardedGradScaler all-reduces the same way)."""
    for found in scaler._found_inf_per_device(optimizer).values():
        dist.all_reduce(found, op=dist.ReduceOp.MAX)


# ---- the run ---------------------------------------------------------------------------------

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="mlp")
    ap.add_argument("--optimizer", choices=sorted(train_baselines.CONTENDERS), default="signlion-mavo")
    ap.add_argument("--overlap", choices=["on", "off"], default=None,
                    help="signlion: launch each bucket's step during backward (default on where supported)")
    ap.add_argument("--delay", type=int, choices=[0, 1], default=0,
                    help="signlion: 1 applies each step's vote one step later (DistributedLion(delay=1)), "
                         "while it travels during the next forward and backward")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=32, help="examples per rank per step")
    ap.add_argument("--context", type=int, default=64, help="lm: bytes per example")
    ap.add_argument("--width", type=int, default=4096, help="mlp: width of the two hidden layers")
    ap.add_argument("--lr", type=float, default=None, help="default: per workload and optimizer family")
    ap.add_argument("--weight-decay", type=float, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--clip-grad-norm", type=float, default=None, metavar="MAX",
                    help="clip each rank's gradients to a total norm of MAX (torch.nn.utils.clip_grad_norm_) "
                         "between backward() and step()")
    ap.add_argument("--amp", nargs="?", const="fp16", choices=["fp16", "bf16"], default=None,
                    help="--device cuda: forward under autocast, fp16 (--amp) with a GradScaler, or bf16 "
                         "(--amp bf16) without one")
    ap.add_argument("--threads", type=int, default=0, help="torch threads per rank (0: torch's default)")
    ap.add_argument("--ckpt-dir", default=None)
    ap.add_argument("--ckpt-every", type=int, default=0, help="steps between checkpoints (0: none)")
    ap.add_argument("--resume", action="store_true",
                    help="continue from the newest checkpoint in --ckpt-dir that every rank has complete; refused "
                         "when it was written with other run settings")
    ap.add_argument("--keep", type=int, default=3,
                    help="checkpoints to keep: each save deletes the ones older than the K newest")
    ap.add_argument("--timeout", type=float, default=1800.0,
                    help="seconds: the process group's timeout (init_process_group(timeout=)), which bounds every "
                         "wait for a peer, signlion's included; a lost rank makes the others exit 1 within it")
    ap.add_argument("--eval-every", type=int, default=0, help="steps between evaluations (0: at the end only)")
    ap.add_argument("--val-size", type=int, default=2000)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--json", default=None, help="rank 0 writes its measurements here")
    ap.add_argument("--save-params", default=None, help="rank r writes its final parameters to PATH.rank<r>")
    ap.add_argument("--trace", default=None, metavar="FILE",
                    help="signlion: record the optimizer's step timeline; rank r writes a Chrome/Perfetto trace to "
                         "FILE with .rank<r> before its extension")
    ap.add_argument("--trace-warmup", type=int, default=5, help="--trace: steps run before the trace starts")
    ap.add_argument("--trace-steps", type=int, default=3, help="--trace: steps traced")
    args = ap.parse_args(argv)
    family = "adamw" if args.optimizer == "ddp-adamw" else "lion"
    if args.lr is None:
        args.lr = DEFAULT_LR[(args.workload, family)]
    if args.weight_decay is None:
        args.weight_decay = DEFAULT_WD[family]
    if args.overlap is None:
        args.overlap = "on" if args.optimizer.startswith("signlion") and train_baselines.overlap_supported() else "off"
    if args.delay and not args.optimizer.startswith("signlion"):
        ap.error("--delay 1 is DistributedLion's delayed vote; %s has none" % args.optimizer)
    if (args.resume or args.ckpt_every) and not args.ckpt_dir:
        ap.error("--resume and --ckpt-every need --ckpt-dir")
    if args.clip_grad_norm is not None and not args.clip_grad_norm > 0:
        ap.error("--clip-grad-norm %s: the largest gradient norm must be a number > 0" % args.clip_grad_norm)
    if args.amp and args.device != "cuda":
        ap.error("--amp is for --device cuda (autocast %s%s on the GPU); this run's device is %s: run it without "
                 "--amp" % (args.amp, " with a GradScaler" if args.amp == "fp16" else "", args.device))
    if args.trace is not None and not (args.optimizer.startswith("signlion") or args.optimizer == "local-lion"):
        ap.error("--trace records signlion's DistributedLion; for %s use torch.profiler" % args.optimizer)
    if args.trace_warmup < 0 or args.trace_steps < 1:
        ap.error("--trace-warmup must be >= 0 and --trace-steps >= 1")
    if args.keep < 1:
        ap.error("--keep %d: the checkpoints to keep must be 1 or more (the newest is the one to resume from)"
                 % args.keep)
    return args


def trace_path(path, rank):
    """--trace FILE for rank r: FILE with .rank<r> before its extension (trace.json: trace.rank0.json)."""
    root, ext = os.path.splitext(path)
    return "%s.rank%d%s" % (root, rank, ext)


def trace_window(args, first):
    """The steps --trace records, [start, stop): --trace-steps after --trace-warmup from the first
    step this run takes, ending no later than the last step."""
    stop = min(first + args.trace_warmup + args.trace_steps, args.steps)
    return max(first, stop - args.trace_steps), stop


def main(argv=None):
    args = parse_args(argv)
    if "RANK" not in os.environ:
        raise SystemExit("train.py: launch it with torchrun (it reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "cuda":
        # Ranks beyond the GPUs share them (several processes on one GPU, each its own NCCL_HOSTID).
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                            timeout=datetime.timedelta(seconds=args.timeout))
    rank = dist.get_rank()
    try:
        return train(args, device, rank)
    except Exception as e:
        # A lost peer (signlion's CommError, gloo's error) or any other failure: exit at once and
        # non-zero, without the teardown that would wait on the lost peer, so that torchrun stops
        # the other workers and restarts the job (--max-restarts), which resumes from the newest
        # complete checkpoint (--resume). The time is taken before the traceback is printed: it
        # says when the error reached this process, for comparing ranks' logs.
        failed_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")
        import traceback
        traceback.print_exc()
        print("train.py: rank %d failed at %s (%s: %s); exiting with status 1"
              % (rank, failed_at, type(e).__name__, e), file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(1)


def train(args, device, rank):
    world = dist.get_world_size()
    if args.ckpt_dir:
        os.makedirs(args.ckpt_dir, exist_ok=True)

    try:
        first, ck = find_checkpoint(args, rank) if args.ckpt_dir else (0, None)
    except Refused as e:
        print(e, file=sys.stderr, flush=True)
        dist.destroy_process_group()
        return 2
    work = WORKLOADS[args.workload](args)
    torch.manual_seed(args.seed)
    module = work.model().to(device)
    nparams = sum(p.numel() for p in module.parameters())
    try:
        model, optimizer, comm_sent = train_baselines.CONTENDERS[args.optimizer](module, args, device)
    except train_baselines.Unavailable as e:
        print("train.py: %s" % e, file=sys.stderr, flush=True)
        dist.destroy_process_group()
        return 3
    scaler = make_scaler(args)
    if ck is not None:
        load_checkpoint(ck, module, optimizer, scaler)
        ck = None
    if rank == 0:
        print("train.py: %s, %s (%.1fM parameters), %d ranks x %d examples, lr %g, overlap %s%s%s%s, steps %d..%d"
              % (args.workload, args.optimizer, nparams / 1e6, world, args.batch, args.lr, args.overlap,
                 ", delay 1" if args.delay else "",
                 "" if args.clip_grad_norm is None else ", clip-grad-norm %g" % args.clip_grad_norm,
                 "" if args.amp is None else ", amp %s" % args.amp, first, args.steps), flush=True)

    def evaluate():
        model.eval()
        with torch.no_grad():
            s, c = work.evaluate(module, rank, world)
        model.train()
        t = torch.tensor([s, c], dtype=torch.float64)
        dist.all_reduce(t)
        return (t[0] / t[1]).item()

    record = {"args": vars(args), "world": world, "parameters": nparams, "first_step": first,
              "fwd_bwd_s": [], "opt_s": [], "step_s": [], "loss": [], "evals": [], "sent_bytes": [],
              "tx_bytes": []}
    progress = Progress(args.steps, first, rank == 0)
    train_time = 0.0
    trace_start, trace_stop = trace_window(args, first) if args.trace else (None, None)
    for step in range(first, args.steps):
        if step == trace_start:
            optimizer.start_trace()
        x, y = work.batch(step, rank, world, args.batch, args.seed)
        x, y = x.to(device), y.to(device)
        sent0, tx0 = comm_sent() if comm_sent else None, interface_tx_bytes()
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with autocast(args):
            loss = work.loss(model, x, y)
        (loss if scaler is None else scaler.scale(loss)).backward()
        if device.type == "cuda":
            torch.cuda.synchronize()
        t1 = time.perf_counter()
        if scaler is not None:
            scaler.unscale_(optimizer)  # the true gradients, for clipping and the optimizer
            agree_on_overflow(scaler, optimizer)
        if args.clip_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad_norm)
        if scaler is None:
            optimizer.step()
        else:
            scaler.step(optimizer)  # skipped on every rank when a gradient of any rank overflowed
            scaler.update()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        t2 = time.perf_counter()
        train_time += t2 - t0
        sent = comm_sent() - sent0 if comm_sent else None
        tx1 = interface_tx_bytes()
        tx = tx1 - tx0 if tx0 is not None and tx1 is not None else None
        record["fwd_bwd_s"].append(t1 - t0)
        record["opt_s"].append(t2 - t1)
        record["step_s"].append(t2 - t0)
        record["loss"].append(loss.item())
        record["sent_bytes"].append(sent)
        record["tx_bytes"].append(tx)
        done = step + 1
        if done == trace_stop:
            optimizer.stop_trace()
            optimizer.export_chrome_trace(trace_path(args.trace, rank))
            if rank == 0:
                print("trace of steps %d..%d written to %s" % (trace_start + 1, done, trace_path(args.trace, rank)),
                      flush=True)
        if rank == 0:
            rate = args.batch * world / (t2 - t0)
            progress.update(done, "loss %.4f %.0f samples/s" % (loss.item(), rate))
            if args.log_every and (done % args.log_every == 0 or done == args.steps):
                print("step %d loss %.4f samples/s %.1f step %.3fs (fwd+bwd %.3fs, optimizer %.3fs) "
                      "sent/step %s B (signlion) %s B (interface)"
                      % (done, loss.item(), rate, t2 - t0, t1 - t0, t2 - t1,
                         "-" if sent is None else sent, "-" if tx is None else tx), flush=True)
        if args.eval_every and done % args.eval_every == 0 and done < args.steps:
            m = evaluate()
            record["evals"].append([done, m, train_time])
            if rank == 0:
                print("eval step %d %s %.4f (train time %.1fs)" % (done, work.metric, m, train_time), flush=True)
        if args.ckpt_every and done % args.ckpt_every == 0:
            save_checkpoint(args, done, module, optimizer, scaler, rank)

    final = evaluate()
    record["evals"].append([args.steps, final, train_time])
    digests = [None] * world
    dist.all_gather_object(digests, parameter_digest(module))
    identical = len(set(digests)) == 1
    record.update(final=final, digest=digests[0], identical=identical)
    if args.save_params:
        torch.save([p.detach().cpu() for p in module.parameters()], "%s.rank%d" % (args.save_params, rank))
    if rank == 0:
        print("final step %d %s %.4f; parameters %s on all %d ranks (sha256 %s)"
              % (args.steps, work.metric, final, "identical" if identical else "DIFFER", world, digests[0][:16]),
              flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(record, f)
    close = getattr(optimizer, "close", None)
    if close is not None:
        close()
    # Every rank's collectives and DDP's hook callbacks done, and the DDP wrapper gone, before the
    # process group goes: torch 1.13's ~ProcessGroupGloo joins its threads holding the GIL, and once
    # hung there (ddp-adamw, 2 ranks) while a callback waited for the GIL.
    dist.barrier()
    model = optimizer = None
    dist.destroy_process_group()
    if not identical and args.optimizer in train_baselines.SYNCHRONOUS:
        print("train.py: the ranks' parameters differ at the end (rank %d: %s)" % (rank, digests[rank]),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
