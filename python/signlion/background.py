"""Calls run in order on one background thread, and the work handle of each call.

The host communicator's collectives are blocking C calls (ctypes releases the GIL while
they run), so running them on a thread of their own is how they overlap with Python work
such as a backward pass. One thread per communicator keeps every rank's calls in the
order they were submitted, which the collectives need, and never lets two threads use
one communicator at once.

The worker threads are daemons, so that a forgotten executor never keeps a process alive; but
an interpreter that finalizes while one of them is inside a torch or library call ends it by
unwinding through C++ frames, which aborts the process ("terminate called without an active
exception"). So at exit every worker still running finishes what is queued and is joined first
(a collective blocked on a peer ends within its communicator's timeout). The join is bounded:
each executor's exit_timeout (its owner's communicator timeout and a margin, by default
DEFAULT_EXIT_TIMEOUT_S); a worker still inside a call past it is named on stderr and left
behind, so that a call that never returns cannot hold the process at exit.
"""
import atexit
import math
import numbers
import queue
import sys
import threading
import time
import weakref

# How long the exit hook waits for a worker whose owner gave no bound: PyTorch's default
# process-group timeout, the longest a collective of a default job blocks.
DEFAULT_EXIT_TIMEOUT_S = 1800.0

_workers_lock = threading.Lock()
_workers = {}  # worker thread -> (its queue, seconds the exit hook waits for it), while it runs
_exiting = False  # set by the exit hook: later calls run on the calling thread


@atexit.register
def _join_workers_at_exit():
    global _exiting
    with _workers_lock:
        _exiting = True
        workers = list(_workers.items())
    for thread, (calls, _) in workers:
        calls.put(None)
    start = time.monotonic()  # the workers finish side by side: each bound counts from here
    for thread, (_, bound) in workers:
        thread.join(max(0.0, bound - (time.monotonic() - start)))
        if thread.is_alive():
            # Not aborted from here: an abort frees the communicator the call may be inside.
            sys.stderr.write("signlion: at exit, background thread %r was still inside a call after %g s (its "
                             "exit_timeout): the interpreter exits without waiting for it (should the call "
                             "return while the interpreter finalizes, the process may abort)\n"
                             % (thread.name, bound))
            sys.stderr.flush()


def exit_timeout(comm):
    """The exit bound for an executor whose calls are collectives of comm (an object with
    timeout_ms, or None: the default): two of its timeouts (a call blocked on a dead peer fails
    within one, and the communicator then fails the calls queued behind at once) and 10 s."""
    timeout_ms = getattr(comm, "timeout_ms", None)
    return None if not timeout_ms else 2.0 * timeout_ms / 1000.0 + 10.0


class Work:
    """The handle of one submitted call, shaped like torch.distributed's Work: wait() blocks
    until the call has run and raises what it raised; is_completed() tells without blocking;
    get_future() gives a torch.futures.Future completed with the call's result."""

    def __init__(self):
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._value = None
        self._error = None
        self._future = None

    def _finish(self, value, error):
        with self._lock:
            self._value, self._error = value, error
            self._done.set()
            future = self._future
        if future is not None:
            _complete(future, value, error)

    def is_completed(self):
        """True once the call has run (successfully or not)."""
        return self._done.is_set()

    def is_success(self):
        """True once the call has run without an error."""
        return self._done.is_set() and self._error is None

    def exception(self):
        """What the call raised, or None (also None while it runs)."""
        return self._error

    def wait(self, timeout=None):
        """Blocks until the call has run; raises what it raised. With a timeout (seconds) that
        passes first, raises TimeoutError. Returns True."""
        if not self._done.wait(timeout):
            raise TimeoutError("signlion: the work did not complete within %s s" % timeout)
        if self._error is not None:
            raise self._error
        return True

    def result(self):
        """The call's return value (after wait())."""
        self.wait()
        return self._value

    def get_future(self):
        """A torch.futures.Future that completes with the call's result (or its error)."""
        import torch

        with self._lock:
            if self._future is None:
                self._future = torch.futures.Future()
                if self._done.is_set():
                    _complete(self._future, self._value, self._error)
            return self._future


def _complete(future, value, error):
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


def _serve(calls):
    try:
        _serve_until_stopped(calls)
    finally:
        with _workers_lock:
            _workers.pop(threading.current_thread(), None)


def _serve_until_stopped(calls):
    while True:
        item = calls.get()
        if item is None:
            return
        fn, args, work = item
        try:
            value = fn(*args)
        except BaseException as e:  # handed to whoever waits for the work
            work._finish(None, e)
        else:
            work._finish(value, None)
        del item, fn, args, work


class SerialExecutor:
    """One daemon thread that runs submitted calls one after another, in submission order.
    Started at the first submit; stopped by close() or when the executor is garbage.
    exit_timeout: seconds the interpreter's exit waits for the thread to finish what is queued
    (None: DEFAULT_EXIT_TIMEOUT_S); an owner whose calls are collectives passes its
    communicator's timeout and a margin."""

    def __init__(self, name, exit_timeout=None):
        if exit_timeout is not None and (isinstance(exit_timeout, bool) or not isinstance(exit_timeout, numbers.Real)
                                         or not math.isfinite(exit_timeout) or exit_timeout < 0):
            raise ValueError("signlion: exit_timeout must be a finite number of seconds >= 0 or None, not %r"
                             % (exit_timeout,))
        self._name = name
        bound = DEFAULT_EXIT_TIMEOUT_S if exit_timeout is None else float(exit_timeout)
        self._exit_timeout = min(bound, threading.TIMEOUT_MAX)  # what Thread.join takes
        self._calls = queue.SimpleQueue()
        self._thread = None
        self._last = None
        self._submit_lock = threading.Lock()

    def submit(self, fn, *args):
        """Queues fn(*args) and returns its Work. Once the interpreter's exit hooks
        have stopped the workers, fn runs at once on the calling thread."""
        work = Work()
        with self._submit_lock:
            # Decided under the workers' lock: a call queued here is ahead of the exit hook's
            # stop (the hook sets _exiting under it, then stops the workers it saw), and a
            # worker started here is one the hook sees.
            with _workers_lock:
                queued = not _exiting
                if queued:
                    if self._thread is None:
                        # The thread holds only the queue, so that an executor nobody references is
                        # collected and its finalizer stops the thread.
                        self._thread = threading.Thread(target=_serve, args=(self._calls,), name=self._name,
                                                        daemon=True)
                        _workers[self._thread] = (self._calls, self._exit_timeout)
                        self._thread.start()
                        weakref.finalize(self, self._calls.put, None)
                    self._calls.put((fn, args, work))
                    self._last = work
        if not queued:
            try:
                work._finish(fn(*args), None)
            except BaseException as e:  # handed to whoever waits for the work
                work._finish(None, e)
        return work

    def drain(self):
        """Blocks until every call submitted so far has run (errors stay with their Work)."""
        last = self._last
        if last is not None:
            last._done.wait()

    def on_worker_thread(self):
        """Whether the calling thread is this executor's worker (a task must not wait for its own queue)."""
        return self._thread is not None and threading.current_thread() is self._thread

    def close(self):
        """Runs what is queued, then stops the thread."""
        with self._submit_lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._calls.put(None)
            thread.join()
