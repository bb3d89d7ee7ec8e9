"""DistributedLion (CPU tensors) when a rank is lost mid-training, 3 spawned ranks of a gloo
process group on loopback, overlap on and off:
 1. the host communicator's timeout follows init_process_group(timeout=...), an explicit
    timeout argument wins over it, and a timeout that is not a positive time is a ValueError;
 2. a rank that stops taking part (frozen: it sleeps instead of stepping) makes step() raise
    CommError on every other rank after the timeout and not much later, naming the rank, the
    timeout and where it came from; the next step() and state_dict() refuse the same way;
 3. a rank that exits mid-training makes the others raise CommError well before the timeout
    (the broken connection is seen at once);
and in both cases every surviving process exits (no thread left blocked on the communicator)."""
import datetime
import os
import sys
import time
import unittest

try:
    import torch
    import torch.distributed as dist
    from spawn_ranks import run_ranks
    HAVE_TORCH = True
except ImportError as e:  # pragma: no cover
    HAVE_TORCH, WHY = False, str(e)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

TIMEOUT_S = 3
MARGIN_S = 5  # scheduling on a loaded machine; the library's own bound is TIMEOUT_S
VICTIM = 2


def _params():
    torch.manual_seed(0)
    return [torch.nn.Parameter(torch.randn(n)) for n in (300, 40, 7)]


def _step(opt, params, seed):
    g = torch.Generator().manual_seed(seed)
    for p in params:
        p.grad = None
    loss = sum((p * torch.randn(p.shape, generator=g)).sum() for p in params)
    loss.backward()
    opt.step()


def _expect_comm_error(fn, rank, started, bound_s):
    from signlion.torch import CommError
    try:
        fn()
    except CommError as e:
        elapsed = time.monotonic() - started
        msg = str(e)
        assert "rank %d of 3" % rank in msg, msg
        assert "timeout of %g s (the process group's timeout)" % TIMEOUT_S in msg, msg
        assert "refuses further steps" in msg, msg
        assert e.rank == rank and e.nranks == 3 and e.timeout_s == TIMEOUT_S, (e.rank, e.nranks, e.timeout_s)
        assert elapsed <= bound_s, "the error came after %.1f s, more than %.1f s" % (elapsed, bound_s)
        return elapsed
    raise AssertionError("rank %d: no CommError" % rank)


def _lost_rank(how, overlap, rank, world, init_file):
    """how: "frozen" (the victim sleeps through the step) or "exited" (it leaves the process)."""
    os.environ["SIGNLION_SOCKET_IFNAME"] = "lo"
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S))
    from signlion.torch import DistributedLion, host_comm_from_process_group
    # 1. the timeout rule
    explicit = host_comm_from_process_group(timeout=datetime.timedelta(milliseconds=1500))
    assert explicit.timeout_ms == 1500 and explicit.timeout_source == "the timeout argument", explicit.timeout_ms
    explicit.destroy()
    params = _params()
    for bad in (0, -2.0, "soon", float("nan")):  # refused before any collective, on every rank alike
        try:
            DistributedLion(params, timeout=bad)
        except ValueError as e:
            assert "timeout must be a datetime.timedelta or a number of seconds > 0" in str(e), e
        else:
            raise AssertionError("timeout=%r was accepted" % (bad,))
    opt = DistributedLion(params, lr=1e-3, overlap=overlap, bucket_cap_mb=1e-3)
    assert opt.comm.timeout_ms == TIMEOUT_S * 1000, opt.comm.timeout_ms
    assert opt.comm.timeout_source == "the process group's timeout", opt.comm.timeout_source
    for s in range(2):
        _step(opt, params, 10 * rank + s)
    dist.barrier()
    if rank == VICTIM:
        if how == "exited":
            os._exit(0)  # no goodbye: the others' links break mid-collective
        time.sleep(TIMEOUT_S + MARGIN_S + 4)  # frozen past the others' detection, then gone
        os._exit(0)
    started = time.monotonic()
    bound = TIMEOUT_S + MARGIN_S if how == "frozen" else TIMEOUT_S - 0.5
    elapsed = _expect_comm_error(lambda: _step(opt, params, 99), rank, started, bound)
    if how == "frozen":
        assert elapsed >= TIMEOUT_S * 0.5, "the error came after %.1f s, before the timeout could pass" % elapsed
    now = time.monotonic()
    _expect_comm_error(lambda: _step(opt, params, 100), rank, now, 1.0)  # refused at once
    _expect_comm_error(opt.state_dict, rank, now, 1.0)
    opt.close()
    # returning ends the process: its background thread must not hold it


@unittest.skipUnless(HAVE_TORCH, "torch is not installed" if HAVE_TORCH else "")
class LostRank(unittest.TestCase):
    def test_frozen_rank_overlap_on(self):
        run_ranks(3, _lost_rank, "frozen", True, timeout=60)

    def test_frozen_rank_overlap_off(self):
        run_ranks(3, _lost_rank, "frozen", False, timeout=60)

    def test_exited_rank_overlap_on(self):
        run_ranks(3, _lost_rank, "exited", True, timeout=60)

    def test_exited_rank_overlap_off(self):
        run_ranks(3, _lost_rank, "exited", False, timeout=60)


if __name__ == "__main__":
    import unittest_main
    unittest_main.main(HAVE_TORCH, None if HAVE_TORCH else WHY)
