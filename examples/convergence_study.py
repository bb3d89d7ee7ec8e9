#!/usr/bin/env python3
"""Convergence study of Distributed Lion (docs/CONVERGENCE.md).

The same small MLP (64-64-10, ReLU) on scikit-learn's digits (shipped inside
the package: 1797 8x8 images; 1077 train / 360 validation / 360 test), with N
workers and the same total batch and step budget:
  mavo     Distributed Lion, majority vote of the workers' sign(c)
  average  Distributed Lion, average of the workers' sign(c)
  global   plain Lion on the mean gradient (fp32 sum all-reduce)
  adamw    torch.optim.AdamW on the mean gradient (the same fp32 sum all-reduce)
The three Lion variants run signlion's optimizer (libnccl-sign.so,
ncclSignLionStep) on N ranks of a host communicator over loopback: one thread
per rank, each with its own momentum. Each method gets a small lr/weight-decay
grid; the setting with the best mean validation accuracy over the seeds is
reported on the test set. Bytes are what a worker's links sent per step
(ncclSignCommGetWireBytes, payload plus transport headers); AdamW sends what
"global" sends.

  convergence_study.py [--workers 4 8 16] [--seeds 3] [--steps 300] [--batch 128] [--grid full|small]
"""
import argparse
import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

try:
    import torch
    from sklearn.datasets import load_digits
except ImportError as e:
    print("convergence_study: needs torch and scikit-learn (python3-torch, python3-sklearn): %s" % e)
    sys.exit(77)

import signlion.capi as capi

SIZES = [(64, 64), (64,), (64, 10), (10,)]  # W1, b1, W2, b2
NPARAM = sum(int(np.prod(s)) for s in SIZES)
GRIDS = {
    "full": {
        "lion": [(lr, wd) for lr in (1e-3, 3e-3, 1e-2) for wd in (0.0, 0.1)],
        "adamw": [(lr, wd) for lr in (3e-3, 1e-2, 3e-2) for wd in (0.0, 0.01)],
    },
    "small": {"lion": [(3e-3, 0.1)], "adamw": [(1e-2, 0.01)]},
}


def data():
    d = load_digits()
    x = torch.tensor(d.data, dtype=torch.float32) / 16.0
    y = torch.tensor(d.target, dtype=torch.int64)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(1234))
    x, y = x[perm], y[perm]
    return (x[:1077], y[:1077]), (x[1077:1437], y[1077:1437]), (x[1437:], y[1437:])


def unflatten(flat):
    out, o = [], 0
    for s in SIZES:
        n = int(np.prod(s))
        out.append(flat[..., o:o + n].reshape(*flat.shape[:-1], *s))
        o += n
    return out


def init_params(seed):
    g = torch.Generator().manual_seed(seed)
    parts = []
    for s in SIZES:
        fan_in = s[0] if len(s) == 2 else 64
        parts.append(((torch.rand(s, generator=g) * 2 - 1) / np.sqrt(fan_in)).reshape(-1))
    return torch.cat(parts)


def forward(flat, x):
    """flat: (P,) or (N, P); x: (b, 64) or (N, b, 64)."""
    w1, b1, w2, b2 = unflatten(flat)
    if flat.dim() == 1:
        return torch.relu(x @ w1 + b1) @ w2 + b2
    h = torch.relu(torch.bmm(x, w1) + b1.unsqueeze(1))
    return torch.bmm(h, w2) + b2.unsqueeze(1)


def worker_grads(flat, xb, yb, n):
    """Each worker's gradient of its own mean loss on its shard: (n, P)."""
    rep = flat.detach().expand(n, -1).clone().requires_grad_(True)
    b = xb.shape[0] // n
    logits = forward(rep, xb[:n * b].reshape(n, b, -1))
    loss = torch.nn.functional.cross_entropy(logits.reshape(n * b, -1), yb[:n * b], reduction="sum") / b
    loss.backward()
    return rep.grad


def evaluate(flat, split):
    x, y = split
    with torch.no_grad():
        logits = forward(flat, x)
        return (logits.argmax(1) == y).float().mean().item(), torch.nn.functional.cross_entropy(logits, y).item()


class Ranks:
    """N host-communicator ranks as threads, reused across runs with the same N."""

    def __init__(self, n):
        self.n = n
        uid = capi.get_unique_id()
        self.comms = [None] * n
        ts = [threading.Thread(target=self._init, args=(r, uid)) for r in range(n)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        if any(c is None for c in self.comms):
            raise RuntimeError("host communicator init failed")

    def _init(self, r, uid):
        self.comms[r] = capi.Comm(self.n, uid, r)

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


def train(method, n, lr, wd, seed, steps, batch, splits, ranks):
    train_set = splits[0]
    gen = torch.Generator().manual_seed(10_000 + seed)
    flat0 = init_params(seed)
    sent = 0
    if method == "adamw":
        p = torch.nn.Parameter(flat0.clone())
        opt = torch.optim.AdamW([p], lr=lr, weight_decay=wd)
    else:
        params = [flat0.clone() for _ in range(n)]
        lions = [capi.Lion(NPARAM, capi.FLOAT32, ranks.comms[r], lr=lr, weight_decay=wd, aggregation=method)
                 for r in range(n)]
        sent0 = [c.wire_bytes()[0] for c in ranks.comms]
    for step in range(steps):
        idx = torch.randint(0, len(train_set[1]), (batch,), generator=gen)
        xb, yb = train_set[0][idx], train_set[1][idx]
        if method == "adamw":
            opt.zero_grad()
            p.grad = worker_grads(p, xb, yb, n).mean(0)  # what an fp32 all-reduce / N gives
            opt.step()
        else:
            g = worker_grads(params[0], xb, yb, n).contiguous()
            ranks.run(lambda r: lions[r].step(params[r].data_ptr(), g[r].data_ptr()))
    if method == "adamw":
        final = p.detach()
    else:
        final = params[0]
        for r in range(1, n):
            assert torch.equal(params[r], final), "ranks disagree"
        sent = max(c.wire_bytes()[0] - s for c, s in zip(ranks.comms, sent0)) / steps
        del lions
    val_acc, _ = evaluate(final, splits[1])
    test_acc, _ = evaluate(final, splits[2])
    _, train_loss = evaluate(final, splits[0])
    return dict(val=val_acc, test=test_acc, loss=train_loss, sent=sent)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, nargs="+", default=[4, 8, 16])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--grid", choices=sorted(GRIDS), default="full")
    ap.add_argument("--methods", nargs="+", default=["mavo", "average", "global", "adamw"])
    a = ap.parse_args()
    os.environ.setdefault("SIGNLION_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    splits = data()
    print("# digits: %d train / %d val / %d test; MLP 64-64-10 (%d parameters); total batch %d, %d steps, "
          "%d seed(s), grid %s" % (len(splits[0][1]), len(splits[1][1]), len(splits[2][1]), NPARAM, a.batch, a.steps,
                                   a.seeds, a.grid))
    print("# %-3s %-8s %-16s %-14s %-11s %-11s %s" % ("N", "method", "best lr, wd", "test acc %", "val acc %",
                                                    "train loss", "bytes sent/worker/step"))
    t0 = time.time()
    rows = []
    for n in a.workers:
        ranks = Ranks(n)
        for method in a.methods:
            grid = GRIDS[a.grid]["adamw" if method == "adamw" else "lion"]
            best = None
            for lr, wd in grid:
                runs = [train(method, n, lr, wd, s, a.steps, a.batch, splits, ranks) for s in range(a.seeds)]
                val = np.mean([r["val"] for r in runs])
                if best is None or val > best[0]:
                    best = (val, lr, wd, runs)
            val, lr, wd, runs = best
            test = np.array([r["test"] for r in runs]) * 100
            loss = np.mean([r["loss"] for r in runs])
            sent = runs[0]["sent"] if method != "adamw" else next((r[6] for r in rows if r[0] == n and
                                                                    r[1] == "global"), float("nan"))
            rows.append((n, method, lr, wd, test, loss, sent))
            print("  %-3d %-8s %-16s %5.1f +- %-5.1f %-11.1f %-11.4f %.0f%s" % (
                n, method, "%g, %g" % (lr, wd), test.mean(), test.std(), val * 100, loss, sent,
                " (as global)" if method == "adamw" else ""), flush=True)
        for c in ranks.comms:
            c.destroy()
    print("# %.0f s; fp32 parameters: %d bytes; bytes = the busiest worker's links, per step" % (time.time() - t0,
                                                                                              NPARAM * 4))


if __name__ == "__main__":
    main()
