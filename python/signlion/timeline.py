"""The step timeline of a DistributedLion (start_trace, stop_trace, export_chrome_trace): what each
bucket did when, written in the Trace Event JSON format that torch.profiler's
export_chrome_trace writes, for chrome://tracing or ui.perfetto.dev (docs/TRAINING.md, "Where a
step's time goes").

Every event is a complete event ("ph": "X") with "ts" and "dur" in microseconds; "pid" is the
rank, "tid" the thread that did the work (the backward / main thread, the optimizer's background
thread) or, for the sign all-reduces and the per-bucket summaries, a track of its own; "args"
carries the step (counted from start_trace), the bucket and, for the library's phases, the
chunk. "ts" counts from the Unix epoch (the monotonic clock the events are read with, shifted
by its distance to the wall clock when the trace started), so the traces of ranks on one host
line up with each other (merge_chrome_traces puts them in one file).

Nothing here runs while no trace is on: the optimizer holds no Timeline then and reads no clock.
"""
import json
import threading
import time

# Tracks that are not threads of this process (the library's collective thread, one per bucket
# for its summaries): tids above any Linux thread id (at most 2^22).
_ALL_REDUCE_TID = 1 << 30
_FIRST_BUCKET_TID = (1 << 30) + 1

# ncclSignLionPhase_t (include/nccl_sign.h) -> the event's name.
PHASE_NAMES = ("vote (pass 1)", "sign all-reduce", "apply (pass 2)")
VOTE, ALL_REDUCE, APPLY = 0, 1, 2


def now_us():
    """The clock of every event, the library's included: CLOCK_MONOTONIC in microseconds
    (std::chrono::steady_clock in libnccl-sign.so reads the same clock)."""
    return time.monotonic_ns() // 1000


class Timeline:
    """The events of one trace, appended from any thread (list.append is atomic)."""

    def __init__(self, rank):
        self.rank = rank
        self.step = 0  # steps completed since the trace started
        self.step_called_us = 0  # when the step in progress called step()
        self.events = []
        self.thread_names = {}
        # The wall clock minus the monotonic one, taken once: the events' "ts" are wall-clock times.
        self.offset_us = time.time_ns() // 1000 - now_us()

    def add(self, name, begin_us, end_us, tid=None, **args):
        """A span of work from begin_us to end_us (now_us), on the calling thread's track by default."""
        if tid is None:
            tid = threading.get_native_id()
            if tid not in self.thread_names:
                self.thread_names[tid] = threading.current_thread().name
        self.events.append((name, begin_us, end_us, tid, args))

    def add_library_phases(self, bucket, step, phases):
        """The phases one ncclSignLionStep recorded ((phase, chunk, begin_us, end_us) each): pass 1
        and 2 on the calling thread's track, the all-reduces on their own (they run on the
        library's collective thread when the step is pipelined)."""
        tid = threading.get_native_id()
        if tid not in self.thread_names:
            self.thread_names[tid] = threading.current_thread().name
        for phase, chunk, begin, end in phases:
            self.events.append((PHASE_NAMES[phase] + " b%d" % bucket, begin, end,
                                _ALL_REDUCE_TID if phase == ALL_REDUCE else tid,
                                {"step": step, "bucket": bucket, "chunk": chunk, "phase": PHASE_NAMES[phase]}))

    def chrome_trace(self):
        """{"traceEvents": [...]}: the events in the Trace Event format, with the tracks named."""
        names = dict(self.thread_names)
        names[_ALL_REDUCE_TID] = "signlion sign all-reduces"
        for tid in {e[3] for e in self.events if e[3] >= _FIRST_BUCKET_TID}:
            names[tid] = "signlion bucket %d" % (tid - _FIRST_BUCKET_TID)
        out = [{"name": "process_name", "ph": "M", "pid": self.rank, "tid": 0,
                "args": {"name": "rank %d (signlion DistributedLion)" % self.rank}},
               {"name": "process_sort_index", "ph": "M", "pid": self.rank, "tid": 0,
                "args": {"sort_index": self.rank}}]
        for i, (tid, name) in enumerate(sorted(names.items())):
            out.append({"name": "thread_name", "ph": "M", "pid": self.rank, "tid": tid, "args": {"name": name}})
            out.append({"name": "thread_sort_index", "ph": "M", "pid": self.rank, "tid": tid,
                        "args": {"sort_index": i}})
        for name, begin, end, tid, args in self.events:
            out.append({"name": name, "ph": "X", "ts": begin + self.offset_us, "dur": end - begin,
                        "pid": self.rank, "tid": tid, "args": args})
        return {"traceEvents": out, "displayTimeUnit": "ms"}


def bucket_track(bucket):
    """The tid of a bucket's summaries (one span per step: gradients ready to update applied)."""
    return _FIRST_BUCKET_TID + bucket


def merge_chrome_traces(paths, out_path):
    """Writes one trace holding the events of the traces at `paths` (e.g. one per rank, each its
    own "pid"), so that chrome://tracing or ui.perfetto.dev shows the ranks one above the other."""
    events = []
    for path in paths:
        with open(path) as f:
            events += json.load(f)["traceEvents"]
    with open(out_path, "w") as f:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)


def main(argv=None):
    """python3 -m signlion.timeline OUT IN...: merge_chrome_traces(IN..., OUT)."""
    import sys
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print("usage: python3 -m signlion.timeline OUT.json IN.json... (writes the traces IN in one file OUT)",
              file=sys.stderr)
        return 2
    merge_chrome_traces(args[1:], args[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
