#!/usr/bin/env python3
"""Convergence study of Distributed Lion (docs/CONVERGENCE.md).

A small CNN (conv 5x5 1->8, pool, conv 5x5 8->16, pool, linear 256->10) on
Fashion-MNIST (Debian's dataset-fashion-mnist, /usr/share/datasets/fashion-mnist:
60k train images, of which 5k are held out for validation, and 10k test), with N
simulated workers and the same total batch and step budget:
  mavo     Distributed Lion, majority vote of the workers' sign(c)
  average  Distributed Lion, average of the workers' sign(c)
  global   plain Lion on the mean gradient (fp32 sum all-reduce)
  adamw    torch.optim.AdamW on the mean gradient (the same fp32 sum all-reduce)
  local    plain Lion on each worker's own shard, no communication (worker 0 is evaluated)
(--dataset digits: the earlier 64-64-10 MLP on scikit-learn's digits.)

How the workers are simulated: one process. Each step, the N workers' gradients (each on
its own B/N examples) come from one vmap'ed backward pass; the Lion variants then run
signlion's real optimizer and sign all-reduce (libnccl-sign.so, ncclSignLionStep) on N
ranks of a host communicator over loopback, one thread per rank, each with its own
momentum; every run checks that all ranks end with identical parameters. Each method
gets a small lr grid (weight decay fixed per method); the lr with the best mean
validation accuracy over the seeds is reported on the test set. Bytes are what a
worker's links sent per step (ncclSignCommGetWireBytes, payload plus transport
headers); AdamW sends what "global" sends.

--byzantine: afterwards, for mavo and average at each N, k = 0..N/2-1 workers (the
first k ranks) are Byzantine: they run Lion on the negated gradient, so their momentum
and c are negated and every vote they send is flipped (--byzantine-mode random: on
Gaussian noise of the gradients' scale, so their votes are random). Each method uses its
best lr from the grid (or --byzantine-lr when it is not in --methods). The plot (--plot
PATH) shows test accuracy (the mean over --byzantine-seeds) against k.

  convergence_study.py [--dataset fashion|digits] [--workers 4 8 16] [--seeds 3] [--steps 500]
                       [--batch 128] [--grid full|medium|small] [--methods ...] [--byzantine] [--plot PNG]
                       [--algorithm auto|ring|hd|allgather|fieldsum|direct]
"""
import argparse
import math
import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

try:
    import torch
    import torch.nn.functional as F
    from functorch import grad, vmap
except ImportError as e:
    print("convergence_study: needs torch with functorch (python3-torch): %s" % e)
    sys.exit(77)

import signlion.capi as capi
from fashion_mnist import FASHION_DIR, read_idx  # noqa: E402


# Learning-rate grids (weight decay fixed per method: 0.1 for the Lion variants, 0.01 for AdamW).
GRIDS = {
    "full": {"lion": [1e-3, 3e-3, 1e-2], "adamw": [1e-3, 3e-3, 1e-2]},
    "medium": {"lion": [1e-3, 3e-3], "adamw": [1e-3, 3e-3]},
    "small": {"lion": [3e-3], "adamw": [1e-2]},  # the best of the full grid on Fashion-MNIST
}
WEIGHT_DECAY = {"lion": 0.1, "adamw": 0.01}


class Model:
    """Parameters in one flat fp32 vector: (shape, fan_in) per tensor; loss(flat, x, y) of one worker."""

    def __init__(self, name, tensors, logits):
        self.name, self.tensors, self.logits = name, tensors, logits
        self.numel = sum(math.prod(s) for s, _ in tensors)

    def unflatten(self, flat):
        out, o = [], 0
        for s, _ in self.tensors:
            n = math.prod(s)
            out.append(flat[o:o + n].view(s))
            o += n
        return out

    def init(self, seed):
        g = torch.Generator().manual_seed(seed)
        return torch.cat([((torch.rand(s, generator=g) * 2 - 1) / math.sqrt(fan_in)).reshape(-1)
                          for s, fan_in in self.tensors])

    def loss(self, flat, x, y):
        return F.cross_entropy(self.logits(self.unflatten(flat), x), y)


def cnn_logits(w, x):
    w1, b1, w2, b2, w3, b3 = w
    h = F.max_pool2d(F.relu(F.conv2d(x, w1, b1)), 2)
    h = F.max_pool2d(F.relu(F.conv2d(h, w2, b2)), 2)
    return h.flatten(-3) @ w3.t() + b3


def mlp_logits(w, x):
    w1, b1, w2, b2 = w
    return torch.relu(x @ w1 + b1) @ w2 + b2


CNN = Model("CNN conv5x5(1->8)-pool-conv5x5(8->16)-pool-linear(256->10)",
            [((8, 1, 5, 5), 25), ((8,), 25), ((16, 8, 5, 5), 200), ((16,), 200), ((10, 256), 256), ((10,), 256)],
            cnn_logits)
MLP = Model("MLP 64-64-10", [((64, 64), 64), ((64,), 64), ((64, 10), 64), ((10,), 64)], mlp_logits)


def fashion():
    if not os.path.isdir(FASHION_DIR):
        print("convergence_study: %s is missing (Debian package dataset-fashion-mnist; scripts/setup.sh "
              "installs it)" % FASHION_DIR)
        sys.exit(77)
    x = torch.from_numpy(read_idx("train-images-idx3-ubyte.gz").copy()).float().div_(255).unsqueeze(1)
    y = torch.from_numpy(read_idx("train-labels-idx1-ubyte.gz").astype(np.int64))
    xt = torch.from_numpy(read_idx("t10k-images-idx3-ubyte.gz").copy()).float().div_(255).unsqueeze(1)
    yt = torch.from_numpy(read_idx("t10k-labels-idx1-ubyte.gz").astype(np.int64))
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(1234))
    x, y = x[perm], y[perm]
    return (x[:55000], y[:55000]), (x[55000:], y[55000:]), (xt, yt)


def digits():
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:
        print("convergence_study: --dataset digits needs scikit-learn (python3-sklearn): %s" % e)
        sys.exit(77)
    d = load_digits()
    x = torch.tensor(d.data, dtype=torch.float32) / 16.0
    y = torch.tensor(d.target, dtype=torch.int64)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(1234))
    x, y = x[perm], y[perm]
    return (x[:1077], y[:1077]), (x[1077:1437], y[1077:1437]), (x[1437:], y[1437:])


# ncclSignAlgo_t (include/nccl_sign.h)
ALGORITHMS = {"auto": 0, "ring": 1, "hd": 2, "allgather": 3, "fieldsum": 4, "direct": 6}


def worker_grads(model, flat, xb, yb, n):
    """Each worker's gradient of its own mean loss on its B/n examples: (n, P). flat is (P,)
    (shared parameters) or (n, P) (each worker its own, "local")."""
    b = xb.shape[0] // n
    xs, ys = xb[:n * b].reshape(n, b, *xb.shape[1:]), yb[:n * b].reshape(n, b)
    return vmap(grad(model.loss), in_dims=(0 if flat.dim() == 2 else None, 0, 0))(flat, xs, ys)


def evaluate(model, flat, split, limit=None):
    x, y = split
    if limit:
        x, y = x[:limit], y[:limit]
    with torch.no_grad():
        w = model.unflatten(flat)
        logits = torch.cat([model.logits(w, x[i:i + 2000]) for i in range(0, len(y), 2000)])
        return (logits.argmax(1) == y).float().mean().item(), F.cross_entropy(logits, y).item()


class Ranks:
    """N host-communicator ranks as threads, reused across runs with the same N."""

    def __init__(self, n, algorithm=0):
        self.n = n
        self.algorithm = algorithm
        uid = capi.get_unique_id()
        self.comms = [None] * n
        ts = [threading.Thread(target=self._init, args=(r, uid)) for r in range(n)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        if any(c is None for c in self.comms):
            raise RuntimeError("host communicator init failed")

    def _init(self, r, uid):
        self.comms[r] = capi.Comm(self.n, uid, r, algorithm=self.algorithm)

    def run(self, fn):
        """fn(rank) on every rank at once (ctypes calls release the GIL)."""
        errs = []

        def body(r):
            try:
                fn(r)
            except Exception as e:  # surfaced below
                errs.append(e)

        ts = [threading.Thread(target=body, args=(r,)) for r in range(self.n)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        if errs:
            raise errs[0]


def train(model, method, n, lr, seed, steps, batch, splits, ranks, byzantine=0, byzantine_mode="flip"):
    """One run; returns test/val accuracy, final training loss, bytes per worker per step, seconds."""
    t0 = time.time()
    train_set = splits[0]
    gen = torch.Generator().manual_seed(10_000 + seed)
    flat0 = model.init(seed)
    wd = WEIGHT_DECAY["adamw" if method == "adamw" else "lion"]
    sent = 0.0
    if method == "adamw":
        p = torch.nn.Parameter(flat0.clone())
        opt = torch.optim.AdamW([p], lr=lr, weight_decay=wd)
    elif method == "local":
        params = flat0.expand(n, -1).clone()
        lions = [capi.Lion(model.numel, capi.FLOAT32, None, lr=lr, weight_decay=wd, aggregation="local")
                 for _ in range(n)]
    else:
        params = [flat0.clone() for _ in range(n)]
        lions = [capi.Lion(model.numel, capi.FLOAT32, ranks.comms[r], lr=lr, weight_decay=wd, aggregation=method)
                 for r in range(n)]
        sent0 = [c.wire_bytes()[0] for c in ranks.comms]
    for step in range(steps):
        idx = torch.randint(0, len(train_set[1]), (batch,), generator=gen)
        xb, yb = train_set[0][idx], train_set[1][idx]
        if method == "adamw":
            opt.zero_grad()
            p.grad = worker_grads(model, p.detach(), xb, yb, n).mean(0)  # what an fp32 all-reduce / N gives
            opt.step()
        elif method == "local":
            g = worker_grads(model, params, xb, yb, n).contiguous()
            for r in range(n):
                lions[r].step(params[r].data_ptr(), g[r].data_ptr())
        else:
            g = worker_grads(model, params[0], xb, yb, n).contiguous()
            if byzantine and byzantine_mode == "flip":
                g[:byzantine].neg_()  # Lion on -g: a negated momentum and c, every vote flipped
            elif byzantine:  # "random": noise of the gradients' scale, so the votes are coin flips
                g[:byzantine] = torch.randn(byzantine, g.shape[1], generator=gen) * g.std()
            ranks.run(lambda r: lions[r].step(params[r].data_ptr(), g[r].data_ptr()))
    if method == "adamw":
        final = p.detach()
    elif method == "local":
        final = params[0]
    else:
        final = params[0]
        for r in range(1, n):
            assert torch.equal(params[r], final), "ranks disagree"
        sent = max(c.wire_bytes()[0] - s for c, s in zip(ranks.comms, sent0)) / steps
    val_acc, _ = evaluate(model, final, splits[1])
    test_acc, _ = evaluate(model, final, splits[2])
    _, train_loss = evaluate(model, final, splits[0], limit=10000)
    return dict(val=val_acc, test=test_acc, loss=train_loss, sent=sent, seconds=time.time() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", choices=["fashion", "digits"], default="fashion")
    ap.add_argument("--workers", type=int, nargs="+", default=[4, 8, 16])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--grid", choices=sorted(GRIDS), default="full")
    ap.add_argument("--methods", nargs="*", default=["mavo", "average", "global", "adamw", "local"])
    ap.add_argument("--byzantine", action="store_true", help="then k = 0..N/2-1 flipping workers, mavo and average")
    ap.add_argument("--byzantine-seeds", type=int, default=1)
    ap.add_argument("--byzantine-mode", choices=["flip", "random"], default="flip",
                    help="flip: Lion on -g (every vote flipped); random: Lion on noise (random votes)")
    ap.add_argument("--byzantine-lr", type=float, nargs=2, default=None, metavar=("MAVO", "AVERAGE"),
                    help="the lr of mavo and average in the Byzantine runs when they are not in --methods")
    ap.add_argument("--plot", default=None, help="PNG of test accuracy against k (with --byzantine)")
    ap.add_argument("--algorithm", choices=sorted(ALGORITHMS), default="auto",
                    help="the sign all-reduce's algorithm (config->algorithm; auto: the cost model's choice, "
                         "the fastest; hd: the fewest bytes). Results are bit-identical for every choice, "
                         "only the bytes differ")
    a = ap.parse_args()
    os.environ.setdefault("SIGNLION_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    model = CNN if a.dataset == "fashion" else MLP
    splits = fashion() if a.dataset == "fashion" else digits()
    print("# %s: %d train / %d val / %d test; %s (%d parameters); total batch %d, %d steps, %d seed(s), grid %s "
          "(lion lr %s, wd %g; adamw lr %s, wd %g); sign all-reduce algorithm %s%s" % (
              a.dataset, len(splits[0][1]), len(splits[1][1]), len(splits[2][1]), model.name, model.numel, a.batch,
              a.steps, a.seeds, a.grid, GRIDS[a.grid]["lion"], WEIGHT_DECAY["lion"], GRIDS[a.grid]["adamw"],
              WEIGHT_DECAY["adamw"], a.algorithm, "; Byzantine: %s votes, %d seed(s)" % (a.byzantine_mode, a.byzantine_seeds)
              if a.byzantine else ""))
    print("# %-3s %-8s %-8s %-14s %-9s %-10s %-10s %s" % ("N", "method", "best lr", "test acc %", "val acc %",
                                                          "train loss", "s per run", "bytes sent/worker/step"))
    t0 = time.time()
    rows, best_lr = [], {}
    for n in a.workers:
        ranks = Ranks(n, ALGORITHMS[a.algorithm])
        for method in a.methods:
            grid = GRIDS[a.grid]["adamw" if method == "adamw" else "lion"]
            best, tried = None, []
            for lr in grid:
                runs = [train(model, method, n, lr, s, a.steps, a.batch, splits, ranks) for s in range(a.seeds)]
                val = np.mean([r["val"] for r in runs])
                tried.append("%g: %.1f" % (lr, val * 100))
                if best is None or val > best[0]:
                    best = (val, lr, runs)
            val, lr, runs = best
            best_lr[(n, method)] = lr
            test = np.array([r["test"] for r in runs]) * 100
            loss = np.mean([r["loss"] for r in runs])
            secs = np.mean([r["seconds"] for r in runs])
            sent = runs[0]["sent"]
            if method == "adamw":
                sent = next((r[5] for r in rows if r[0] == n and r[1] == "global"), float("nan"))
            rows.append((n, method, lr, test, loss, sent))
            print("  %-3d %-8s %-8g %5.2f +- %-5.2f %-9.2f %-10.4f %-10.1f %.0f%s   (val %% by lr: %s)" % (
                n, method, lr, test.mean(), test.std(), val * 100, loss, secs, sent,
                " (as global)" if method == "adamw" else "", ", ".join(tried)), flush=True)
        if a.byzantine:
            for method in ("mavo", "average"):
                fallback = a.byzantine_lr[method == "average"] if a.byzantine_lr else GRIDS[a.grid]["lion"][0]
                lr = best_lr.get((n, method), fallback)
                for k in range(n // 2):
                    runs = [train(model, method, n, lr, s, a.steps, a.batch, splits, ranks, byzantine=k,
                                  byzantine_mode=a.byzantine_mode)
                            for s in range(a.byzantine_seeds)]
                    test = np.array([r["test"] for r in runs]) * 100
                    rows.append((n, method + "/byz", k, test, np.mean([r["loss"] for r in runs]), runs[0]["sent"]))
                    print("  %-3d %-8s k=%-6d %5.2f +- %-5.2f %-9s %-10.4f %-10.1f %.0f   (%s votes, lr %g)" % (
                        n, method, k, test.mean(), test.std(), "", rows[-1][4],
                        np.mean([r["seconds"] for r in runs]), runs[0]["sent"],
                        "flipped" if a.byzantine_mode == "flip" else "random", lr), flush=True)
        for c in ranks.comms:
            c.destroy()
    print("# %.0f s in all; fp32 parameters: %d bytes; bytes = the busiest worker's links, per step" % (
        time.time() - t0, model.numel * 4))
    for n in a.workers:
        sent = {r[1]: r[5] for r in rows if r[0] == n}
        if sent.get("global") and sent.get("mavo"):
            print("# N = %d: global / mavo bytes = %.0f / %.0f = %.2fx" % (
                n, sent["global"], sent["mavo"], sent["global"] / sent["mavo"]))
    if a.plot and a.byzantine:
        plot(rows, a.workers, a.plot, model, a)


def plot(rows, workers, path, model, a):
    import matplotlib
    import matplotlib.ticker
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(workers), figsize=(4.2 * len(workers), 3.6), squeeze=False)
    for ax, n in zip(axes[0], workers):
        for method, style in (("mavo", "o-"), ("average", "s--")):
            pts = [(r[2], r[3].mean()) for r in rows if r[0] == n and r[1] == method + "/byz"]
            if pts:
                ax.plot([k for k, _ in pts], [v for _, v in pts], style, label=method)
        ax.set_title("N = %d" % n)
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.set_xlabel("Byzantine workers k (%s votes)" % ("flipped" if a.byzantine_mode == "flip" else "random"))
        ax.set_ylabel("test accuracy %")
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle("%s, %s, %d steps, batch %d, mean of %d seed(s)" % (a.dataset, model.name.split(" ")[0], a.steps,
                                                                     a.batch, a.byzantine_seeds))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print("# wrote %s" % path)


if __name__ == "__main__":
    main()
