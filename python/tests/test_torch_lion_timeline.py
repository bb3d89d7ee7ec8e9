"""DistributedLion's step timeline (start_trace, stop_trace, export_chrome_trace), CPU tensors, gloo
process groups of 2 spawned ranks, with overlap on and off, each bucket's step in one piece and
pipelined in chunks (SIGNLION_LION_CHUNK):
 1. the exported trace is JSON in the Trace Event format (torch.profiler's chrome trace): every
    event complete ("X") with ts, dur >= 0, pid = the rank, tid, args; the tracks named;
 2. for every traced step and every bucket: its summary, the library call, and per chunk pass 1,
    the sign all-reduce and pass 2, in order (gradients ready <= pass 1 <= all-reduce start <=
    all-reduce end <= pass 2 <= applied), every chunk of the bucket present; with overlap on, the
    buckets of a loop that changes nothing between backward() and step() start during backward;
 3. parameters equal bit for bit with tracing on and off (and overlap on and off);
 4. tracing off records nothing: the library holds no phase of any step, the optimizer no
    timeline; trace_events() without a trace raises."""
import json
import os
import sys
import tempfile
import unittest

try:
    import torch
    import spawn_ranks
    HAVE_TORCH = True
except ImportError as e:  # pragma: no cover
    HAVE_TORCH, WHY = False, str(e)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

STEPS = 6
TRACED = range(2, 5)  # after the first step (which probes the loop) and one more of warm-up


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                               torch.nn.ReLU(), torch.nn.Linear(256, 10))


def _train(rank, overlap, trace_path):
    """STEPS steps of the MLP (buckets of at most 0.1 MiB: several per step); steps TRACED traced
    into trace_path when given. Returns (the parameters, the bucket layout, the optimizer's library
    phases after the last step)."""
    from signlion.torch import DistributedLion
    model = _model()
    opt = DistributedLion(model.parameters(), lr=1e-3, weight_decay=0.1, overlap=overlap, bucket_cap_mb=0.1)
    if trace_path is None:
        try:
            opt.trace_events()
            raise AssertionError("trace_events() without a trace did not raise")
        except RuntimeError as e:
            assert "start_trace" in str(e), e
    for step in range(STEPS):
        if trace_path is not None and step == TRACED[0]:
            opt.start_trace()
        g = torch.Generator().manual_seed(100 * rank + step)
        x, y = torch.randn(32, 64, generator=g), torch.randint(0, 10, (32,), generator=g)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        if trace_path is not None and step == TRACED[-1]:
            opt.stop_trace()
            opt.export_chrome_trace(trace_path)
    assert opt._timeline is None
    phases = [b.lion.phases() for b in opt._buckets]
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    layout = opt.bucket_layout()
    opt.close()
    return flat, layout, phases


def _check_trace(path, rank, layout, chunk, overlap):
    with open(path) as f:
        trace = json.load(f)
    assert set(trace) >= {"traceEvents"}, sorted(trace)
    events = trace["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    named = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert spans and all(e["ph"] in ("X", "M") for e in events), {e["ph"] for e in events}
    for e in spans:
        assert set(e) == {"name", "ph", "ts", "dur", "pid", "tid", "args"}, e
        assert isinstance(e["ts"], int) and isinstance(e["dur"], int) and e["dur"] >= 0, e
        assert e["pid"] == rank and e["tid"] in named, (e, named)
    steps = sorted({e["args"]["step"] for e in spans})
    assert steps == list(range(len(TRACED))), steps
    for step in steps:
        of_step = [e for e in spans if e["args"]["step"] == step]
        assert sum(e["name"] == "step()" for e in of_step) == 1
        started_in_backward = 0
        for k, bucket in enumerate(layout):
            mine = [e for e in of_step if e["args"].get("bucket") == k]

            def one(name):
                found = [e for e in mine if e["name"] == name]
                assert len(found) == 1, (name, step, k, found)
                return found[0]
            summary, call = one("bucket %d" % k), one("lion step b%d" % k)
            ready, applied = summary["ts"], summary["ts"] + summary["dur"]
            if overlap:
                start = one("start b%d" % k)
                assert ready <= start["ts"] <= call["ts"], (summary, start, call)
                started_in_backward += start["args"]["in_backward"]
            chunks = -(-bucket["numel"] // chunk) if chunk and bucket["numel"] > chunk else 1
            per_phase = {}
            for phase in ("vote (pass 1)", "sign all-reduce", "apply (pass 2)"):
                got = sorted((e for e in mine if e["args"].get("phase") == phase), key=lambda e: e["args"]["chunk"])
                assert [e["args"]["chunk"] for e in got] == list(range(chunks)), (phase, step, k, len(got), chunks)
                per_phase[phase] = got
            assert "all-reduce" in named[per_phase["sign all-reduce"][0]["tid"]]
            assert ready <= call["ts"] <= per_phase["vote (pass 1)"][0]["ts"], (summary, call)
            for vote, wire, apply in zip(*per_phase.values()):
                assert vote["ts"] + vote["dur"] <= wire["ts"], (vote, wire)
                assert wire["ts"] + wire["dur"] <= apply["ts"], (wire, apply)
                assert apply["ts"] + apply["dur"] <= call["ts"] + call["dur"] <= applied, (apply, call, summary)
        if overlap:  # nothing changes between backward() and step(): the buckets start during backward
            assert started_in_backward == len(layout), (step, started_in_backward)


def _scenario(chunk, rank, world):
    if chunk:
        os.environ["SIGNLION_LION_CHUNK"] = str(chunk)
    with tempfile.TemporaryDirectory() as tmp:
        results = {}
        for overlap in (True, False):
            for traced in (True, False):
                path = os.path.join(tmp, "trace.json") if traced else None
                flat, layout, phases = _train(rank, overlap, path)
                assert len(layout) >= 3, layout
                # Off (never started, or stopped): the library recorded nothing.
                assert all(p == [] for p in phases), phases
                if traced:
                    _check_trace(path, rank, layout, chunk, overlap)
                results[overlap, traced] = flat
    reference = results[False, False]
    for key, flat in results.items():
        assert torch.equal(flat, reference), key


@unittest.skipUnless(HAVE_TORCH, "torch not available")
class Timeline(unittest.TestCase):
    def test_local_and_merge(self):
        """aggregation="local", no process group: pass 1 and 2 per bucket and step, no
        all-reduce, pid 0; merge_chrome_traces (python3 -m signlion.timeline) concatenates
        traces."""
        from signlion.timeline import main as timeline_main, merge_chrome_traces
        from signlion.torch import DistributedLion
        model = _model()
        opt = DistributedLion(model.parameters(), lr=1e-3, aggregation="local", bucket_cap_mb=0.1)
        opt.start_trace()
        for step in range(2):
            torch.nn.functional.cross_entropy(model(torch.randn(8, 64)), torch.randint(0, 10, (8,))).backward()
            opt.step()
        opt.stop_trace()
        with tempfile.TemporaryDirectory() as tmp:
            one, both = os.path.join(tmp, "one.json"), os.path.join(tmp, "both.json")
            opt.export_chrome_trace(one)
            spans = [e for e in opt.trace_events()["traceEvents"] if e["ph"] == "X"]
            self.assertEqual({e["pid"] for e in spans}, {0})
            n = len(opt.bucket_layout())
            for phase in ("vote (pass 1)", "apply (pass 2)"):
                self.assertEqual(sorted((e["args"]["step"], e["args"]["bucket"]) for e in spans
                                        if e["args"].get("phase") == phase),
                                 [(s, b) for s in range(2) for b in range(n)], phase)
            self.assertFalse([e for e in spans if e["args"].get("phase") == "sign all-reduce"])
            merge_chrome_traces([one, one], both)
            with open(both) as f:
                self.assertEqual(len(json.load(f)["traceEvents"]), 2 * len(opt.trace_events()["traceEvents"]))
            self.assertEqual(timeline_main([both]), 2)
        opt.close()

    def test_trace_world2(self):
        spawn_ranks.run_gloo_ranks(2, "test_torch_lion_timeline", "scenario_one_piece")

    def test_trace_pipelined_world2(self):
        spawn_ranks.run_gloo_ranks(2, "test_torch_lion_timeline", "scenario_pipelined")


def scenario_one_piece(rank, world):
    _scenario(0, rank, world)


def scenario_pipelined(rank, world):
    _scenario(4096, rank, world)


if __name__ == "__main__":
    import unittest_main
    unittest_main.main(HAVE_TORCH, "" if HAVE_TORCH else WHY)
