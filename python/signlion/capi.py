"""The C ABI of libnccl-sign.so (include/nccl_sign.h) through ctypes.

Every wrapper raises SignError (carrying the ncclResult_t) when a call fails;
the library's WARN line on stderr names the cause.
"""
import ctypes
import os
import pathlib

# ncclDataType_t values (nccl.h).
INT8, FLOAT16, FLOAT32, BFLOAT16 = 0, 6, 7, 9
# ncclSignOp_t
MAJORITY, AVERAGE = 0, 1
# ncclSignZeroRule_t, ncclSignTieRule_t
ZERO_POSITIVE, ZERO_NEGATIVE, ZERO_ABSTAIN = 0, 1, 2
TIE_ZERO, TIE_POSITIVE, TIE_NEGATIVE = 0, 1, 2
ZERO_RULES = {"positive": ZERO_POSITIVE, "negative": ZERO_NEGATIVE, "abstain": ZERO_ABSTAIN}
TIE_RULES = {"zero": TIE_ZERO, "positive": TIE_POSITIVE, "negative": TIE_NEGATIVE}
# ncclSignLionAggregation_t
AGGREGATIONS = {"mavo": 0, "average": 1, "global": 2, "local": 3}

UNIQUE_ID_BYTES = 128
_CONFIG_MAGIC = 0x5349474E
_LION_CONFIG_MAGIC = 0x4C494F4E
_CALL_CONFIG_MAGIC = 0x43414C4C
# NCCL_SIGN_RULE_OF_COMM: a rule field left to the communicator.
_RULE_OF_COMM = -1


class SignError(RuntimeError):
    """A call of libnccl-sign.so failed. `result` is its ncclResult_t (e.g. 4,
    ncclInvalidArgument); the message names the C function and the error, and the
    library's WARN line on stderr names the argument or the cause."""

    def __init__(self, call, result):
        self.result = result
        super().__init__("%s failed: %s (ncclResult_t %d)" % (call, _lib().ncclSignGetErrorString(result).decode(),
                                                                result))


class UniqueId(ctypes.Structure):
    """ncclSignUniqueId: the 128 bytes the ranks of a host communicator meet by (get_unique_id)."""

    _fields_ = [("internal", ctypes.c_char * UNIQUE_ID_BYTES)]


class Config(ctypes.Structure):
    """ncclSignConfig_t as ctypes sees it; Comm and nccl_comm_set_config fill it from keyword arguments."""

    _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
                ("algorithm", ctypes.c_int), ("zeroRule", ctypes.c_int), ("tieRule", ctypes.c_int),
                ("timeoutMs", ctypes.c_int), ("netPlugin", ctypes.c_char_p), ("hostId", ctypes.c_char_p)]


class LionConfig(ctypes.Structure):
    """ncclSignLionConfig_t as ctypes sees it; Lion fills it from keyword arguments."""

    _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
                ("lr", ctypes.c_float), ("beta1", ctypes.c_float), ("beta2", ctypes.c_float),
                ("weightDecay", ctypes.c_float), ("aggregation", ctypes.c_int), ("masterWeights", ctypes.c_int),
                ("momentumAverageEvery", ctypes.c_int), ("skipNonFinite", ctypes.c_int),
                ("zeroRule", ctypes.c_int), ("tieRule", ctypes.c_int)]


class CallConfig(ctypes.Structure):
    """ncclSignCallConfig_t: the vote rules one sign all-reduce carries (call_rules makes it)."""

    _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
                ("zeroRule", ctypes.c_int), ("tieRule", ctypes.c_int)]


class PhaseTime(ctypes.Structure):
    """ncclSignLionPhaseTime_t: when one phase of a step ran (Lion.phases)."""

    _fields_ = [("phase", ctypes.c_int), ("chunk", ctypes.c_int), ("beginUs", ctypes.c_int64),
                ("endUs", ctypes.c_int64)]


_HERE = pathlib.Path(__file__).resolve().parent


def _candidates():
    """Where libnccl-sign.so is looked for, in order: $SIGNLION_LIBRARY (an
    override, alone when set); next to this file (the wheel bundles it there);
    the system loader's path (cmake --install); the build/ folder of the source
    tree this package sits in."""
    env = os.environ.get("SIGNLION_LIBRARY")
    if env:
        yield env
        return
    for p in sorted(_HERE.glob("libnccl-sign.so*")):
        yield str(p)
    yield "libnccl-sign.so.0"
    for build in ("build", "build-release"):
        p = _HERE.parent.parent / build / "src" / "host" / "libnccl-sign.so"
        if p.exists():
            yield str(p)


def net_plugin_path():
    """The NCCL net plugin bundled with the package (libnccl-net-signlion.so), or
    None when this install has none; NCCL_NET_PLUGIN accepts this path."""
    p = _HERE / "libnccl-net-signlion.so"
    return str(p) if p.exists() else None


def _source_tree_version():
    """project(signlion VERSION x.y.z) of the CMakeLists.txt above a source checkout."""
    import re

    try:
        text = (_HERE.parent.parent / "CMakeLists.txt").read_text()
    except OSError:
        return "unknown"
    m = re.search(r"project\(signlion VERSION ([0-9]+\.[0-9]+\.[0-9]+)", text)
    return m.group(1) if m else "unknown"


_LIB = None


def _lib():
    global _LIB
    if _LIB is not None:
        return _LIB
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as e:
            errors.append("%s: %s" % (path, e))
    else:
        raise OSError("libnccl-sign.so not found; set SIGNLION_LIBRARY to its path. Tried:\n  " + "\n  ".join(errors))
    vp, sz, i, u64p = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)
    protos = {
        "ncclSignGetVersion": [ctypes.POINTER(i)],
        "ncclSignConfigCheck": [ctypes.POINTER(Config)],
        "ncclSignGetUniqueId": [ctypes.POINTER(UniqueId)],
        "ncclSignCommInitRank": [ctypes.POINTER(vp), i, UniqueId, i, ctypes.POINTER(Config)],
        "ncclSignCommDestroy": [vp],
        "ncclSignCommAbort": [vp],
        "ncclSignCommCount": [vp, ctypes.POINTER(i)],
        "ncclSignCommUserRank": [vp, ctypes.POINTER(i)],
        "ncclSignBarrier": [vp],
        "ncclSignCommGetWireBytes": [vp, u64p, u64p],
        "ncclSignCommGetInterNodeWireBytes": [vp, ctypes.POINTER(i), u64p, u64p],
        "ncclSignCommGetLinkRate": [vp, ctypes.POINTER(ctypes.c_int64)],
        "ncclSignHostAllReduce": [vp, vp, sz, i, i, vp],
        "ncclSignHostSumAllReduce": [vp, vp, sz, i, vp],
        "ncclSignHostAllReduceWithConfig": [vp, vp, sz, i, i, ctypes.POINTER(CallConfig), vp],
        "ncclSignLionCreate": [ctypes.POINTER(vp), sz, i, ctypes.POINTER(LionConfig), vp],
        "ncclSignLionDestroy": [vp],
        "ncclSignLionSetHyperparameters": [vp, ctypes.c_float, ctypes.c_float, ctypes.c_float, ctypes.c_float],
        "ncclSignLionStep": [vp, vp, vp, ctypes.POINTER(i)],
        "ncclSignLionGetStepCount": [vp, u64p, u64p],
        "ncclSignLionGetStateSize": [vp, ctypes.POINTER(sz)],
        "ncclSignLionSaveState": [vp, vp, sz],
        "ncclSignLionLoadState": [vp, vp, sz],
        "ncclSignLionRecordPhases": [vp, i],
        "ncclSignLionGetPhases": [vp, ctypes.POINTER(PhaseTime), i, ctypes.POINTER(i)],
    }
    # Only in a library built with NCCL (CUDA tensors, the user's ncclComm_t).
    device_protos = {
        "ncclSignCommSetConfig": [vp, ctypes.POINTER(Config)],
        "ncclSignCommRelease": [vp],
        "ncclSignLionCreateNccl": [ctypes.POINTER(vp), sz, i, ctypes.POINTER(LionConfig), vp],
        "ncclSignLionStepAsync": [vp, vp, vp, vp],
        "ncclSignAllReduce": [vp, vp, sz, i, i, vp, vp],
        "ncclSignAllReduceWithConfig": [vp, vp, sz, i, i, ctypes.POINTER(CallConfig), vp, vp],
    }
    for name, args in protos.items():
        f = getattr(lib, name)
        f.argtypes = args
        f.restype = ctypes.c_int
    for name, args in device_protos.items():
        f = getattr(lib, name, None)
        if f is not None:
            f.argtypes = args
            f.restype = ctypes.c_int
    lib.ncclSignGetErrorString.argtypes = [ctypes.c_int]
    lib.ncclSignGetErrorString.restype = ctypes.c_char_p
    _LIB = lib
    return lib


def library_path():
    """The path of the loaded libnccl-sign.so."""
    return _lib()._name


def _check(call, *args):
    res = getattr(_lib(), call)(*args)
    if res != 0:
        raise SignError(call, res)


def has_device_support():
    """True when the loaded library was built with NCCL (device optimizers on an ncclComm_t)."""
    return hasattr(_lib(), "ncclSignLionCreateNccl")


def _require_device_support():
    if not has_device_support():
        raise RuntimeError("signlion: %s was built without NCCL: no optimizer on device buffers "
                           "(rebuild with CUDA and NCCL found by CMake)" % library_path())


def version_code():
    """NCCL_SIGN_VERSION_CODE of the loaded library (major*10000 + minor*100 + patch)."""
    v = ctypes.c_int()
    _check("ncclSignGetVersion", ctypes.byref(v))
    return v.value


def version():
    """The loaded library's version as "major.minor.patch", the form of signlion.__version__."""
    code = version_code()
    return "%d.%d.%d" % (code // 10000, code // 100 % 100, code % 100)


def get_unique_id():
    """128 bytes made by the root rank; share them with all ranks out of band."""
    uid = UniqueId()
    _check("ncclSignGetUniqueId", ctypes.byref(uid))
    return ctypes.string_at(ctypes.addressof(uid), UNIQUE_ID_BYTES)  # .internal would stop at a NUL


class Comm:
    """A host communicator (ncclSignComm_t) over CPU buffers: one rank of `nranks`.

    Every rank calls Comm(nranks, unique_id, rank) with the same 128-byte unique_id
    (get_unique_id() on one rank, shared out of band); the call returns once all
    ranks have joined. zero_rule ("positive", "negative", "abstain") says how a zero
    votes, tie_rule ("zero", "positive", "negative") what a tie gives
    (docs/SEMANTICS.md); algorithm 0 lets the cost model choose; timeout_ms 0 waits
    forever. Buffers are passed by address (ctypes.addressof, tensor.data_ptr()).
    Free it with destroy() (or abort() after an error).
    """

    def __init__(self, nranks, unique_id, rank, zero_rule="positive", tie_rule="zero", algorithm=0, timeout_ms=0,
                 host_id=None):
        """host_id (str or bytes): this rank's node for the hierarchical algorithm and the cost model
        (config.hostId: ranks with equal ids share a node); None: SIGNLION_HOSTID, else NCCL_HOSTID, else
        hostname and boot id. Set it per rank where ranks of one process should act as several nodes.
        timeout_ms: the bound on every wait for a peer (config.timeoutMs); 0 takes SIGNLION_TIMEOUT_MS, else
        60 s. A call that hits it, or whose peer's link breaks, raises SignError (ncclRemoteError); the
        communicator then refuses every further call: abort() it."""
        unique_id = bytes(unique_id)
        if len(unique_id) != UNIQUE_ID_BYTES:
            raise ValueError("unique_id must be %d bytes (from get_unique_id), not %d" % (UNIQUE_ID_BYTES, len(unique_id)))
        cfg = _config(zero_rule, tie_rule, algorithm, timeout_ms, host_id)
        uid = UniqueId()
        ctypes.memmove(ctypes.byref(uid), unique_id, UNIQUE_ID_BYTES)
        self.handle = ctypes.c_void_p()
        _check("ncclSignCommInitRank", ctypes.byref(self.handle), nranks, uid, rank, ctypes.byref(cfg))
        self.nranks, self.rank = nranks, rank
        self.timeout_ms = effective_timeout_ms(timeout_ms)

    def destroy(self):
        """Frees the communicator once its operations are done (ncclSignCommDestroy); not collective."""
        if self.handle:
            _check("ncclSignCommDestroy", self.handle)
            self.handle = ctypes.c_void_p()

    def abort(self):
        """Frees the communicator at once (ncclSignCommAbort): peers blocked on it see an error."""
        if self.handle:
            _lib().ncclSignCommAbort(self.handle)
            self.handle = ctypes.c_void_p()

    def __del__(self):
        try:
            self.destroy()
        except Exception:  # interpreter shutdown
            pass

    def barrier(self):
        """Returns once every rank has entered the barrier (or the timeout passed: SignError)."""
        _check("ncclSignBarrier", self.handle)

    def wire_bytes(self):
        """(sent, received) bytes through this rank's links since creation."""
        s, r = ctypes.c_uint64(), ctypes.c_uint64()
        _check("ncclSignCommGetWireBytes", self.handle, ctypes.byref(s), ctypes.byref(r))
        return s.value, r.value

    def inter_node_wire_bytes(self):
        """(node, sent, received): this rank's node (0, 1, ... in the order of each node's lowest rank) and
        the part of wire_bytes() that went to and came from ranks of other nodes."""
        node, s, r = ctypes.c_int(), ctypes.c_uint64(), ctypes.c_uint64()
        _check("ncclSignCommGetInterNodeWireBytes", self.handle, ctypes.byref(node), ctypes.byref(s), ctypes.byref(r))
        return node.value, s.value, r.value

    def link_rate(self):
        """Mbit/s of a link between nodes as this communicator learned it at init (or from
        SIGNLION_COST_BETA_MBPS x 8), the same on every rank; 0 when it learned none."""
        mbits = ctypes.c_int64()
        _check("ncclSignCommGetLinkRate", self.handle, ctypes.byref(mbits))
        return mbits.value

    def sign_all_reduce(self, send_ptr, recv_ptr, count, datatype, op=MAJORITY, zero_rule=None, tie_rule=None):
        """The sign all-reduce on host buffers given by address (ncclSignHostAllReduce).

        count elements of datatype (FLOAT32, FLOAT16, BFLOAT16, INT8) at send_ptr vote;
        op MAJORITY writes sign(sum of votes), AVERAGE (sum of votes) / nranks, in the
        same datatype at recv_ptr (== send_ptr for in place), identical on every rank.
        zero_rule / tie_rule (names as for the constructor): this call's own rules
        (ncclSignHostAllReduceWithConfig); None: the communicator's.
        Collective: every rank calls it with the same count, datatype, op and rules."""
        if zero_rule is None and tie_rule is None:
            _check("ncclSignHostAllReduce", send_ptr, recv_ptr, count, datatype, op, self.handle)
            return
        cfg = call_rules(zero_rule, tie_rule)
        _check("ncclSignHostAllReduceWithConfig", send_ptr, recv_ptr, count, datatype, op, ctypes.byref(cfg),
               self.handle)

    def sum_all_reduce(self, send_ptr, recv_ptr, count, datatype=FLOAT32):
        """A plain ring sum all-reduce of FLOAT32 or BFLOAT16 on the same links
        (ncclSignHostSumAllReduce): the baseline the sign all-reduce is measured against."""
        _check("ncclSignHostSumAllReduce", send_ptr, recv_ptr, count, datatype, self.handle)


# The library's bound on a wait for a peer when neither the config nor SIGNLION_TIMEOUT_MS sets one.
DEFAULT_TIMEOUT_MS = 60000


def effective_timeout_ms(timeout_ms):
    """The bound a communicator made with config.timeoutMs = timeout_ms applies (docs/PARAMETERS.md)."""
    if timeout_ms > 0:
        return timeout_ms
    try:
        env = int(os.environ.get("SIGNLION_TIMEOUT_MS", ""))
    except ValueError:
        env = 0
    return env if env > 0 else DEFAULT_TIMEOUT_MS


def _config(zero_rule="positive", tie_rule="zero", algorithm=0, timeout_ms=0, host_id=None):
    if zero_rule not in ZERO_RULES:
        raise ValueError("zero_rule must be one of %s, not %r" % (sorted(ZERO_RULES), zero_rule))
    if tie_rule not in TIE_RULES:
        raise ValueError("tie_rule must be one of %s, not %r" % (sorted(TIE_RULES), tie_rule))
    if host_id is not None:
        if isinstance(host_id, str):
            host_id = host_id.encode()
        if not isinstance(host_id, bytes):
            raise TypeError("host_id must be a str or bytes, not %s" % type(host_id).__name__)
        if not host_id or b"\0" in host_id:
            raise ValueError("host_id must be non-empty and without NUL, not %r" % (host_id,))
    # The library copies hostId during the call that takes the config.
    return Config(ctypes.sizeof(Config), _CONFIG_MAGIC, version_code(), algorithm, ZERO_RULES[zero_rule],
                  TIE_RULES[tie_rule], timeout_ms, None, host_id)


def _rule_code(rules, value, what):
    if value is None:
        return _RULE_OF_COMM
    if value not in rules:
        raise ValueError("%s must be one of %s (or None for the communicator's), not %r" % (what, sorted(rules), value))
    return rules[value]


def call_rules(zero_rule=None, tie_rule=None):
    """The ncclSignCallConfig_t of a call that votes by these rules (names as for Comm); a rule
    left None is the communicator's."""
    return CallConfig(ctypes.sizeof(CallConfig), _CALL_CONFIG_MAGIC, version_code(),
                      _rule_code(ZERO_RULES, zero_rule, "zero_rule"), _rule_code(TIE_RULES, tie_rule, "tie_rule"))


def nccl_comm_set_config(nccl_comm, zero_rule="positive", tie_rule="zero", algorithm=0, host_id=None):
    """ncclSignCommSetConfig: the vote rules and algorithm of the sign all-reduce on an
    ncclComm_t (given as an integer address), for every rank and every user of that comm that
    does not pass rules of its own (nccl_sign_all_reduce's zero_rule / tie_rule, Lion's);
    host_id as for Comm (read by the comm's first ncclSignAllReduce)."""
    _require_device_support()
    cfg = _config(zero_rule, tie_rule, algorithm, host_id=host_id)
    _check("ncclSignCommSetConfig", ctypes.c_void_p(nccl_comm), ctypes.byref(cfg))


def nccl_sign_all_reduce(send_ptr, recv_ptr, count, datatype, op, nccl_comm, stream, zero_rule=None, tie_rule=None):
    """ncclSignAllReduce: the sign all-reduce on device buffers (addresses) over an ncclComm_t
    (an integer address), enqueued on `stream` (a cudaStream_t as an integer); returns at once.
    zero_rule / tie_rule: this call's own rules (ncclSignAllReduceWithConfig), whatever the comm's
    are; None: the comm's."""
    _require_device_support()
    if zero_rule is None and tie_rule is None:
        _check("ncclSignAllReduce", ctypes.c_void_p(send_ptr), ctypes.c_void_p(recv_ptr), count, datatype, op,
               ctypes.c_void_p(nccl_comm), ctypes.c_void_p(stream or None))
        return
    cfg = call_rules(zero_rule, tie_rule)
    _check("ncclSignAllReduceWithConfig", ctypes.c_void_p(send_ptr), ctypes.c_void_p(recv_ptr), count, datatype, op,
           ctypes.byref(cfg), ctypes.c_void_p(nccl_comm), ctypes.c_void_p(stream or None))


def nccl_comm_release(nccl_comm):
    """ncclSignCommRelease: frees what signlion cached for an ncclComm_t; call it before the
    communicator is destroyed (e.g. before torch.distributed.destroy_process_group)."""
    _require_device_support()
    _check("ncclSignCommRelease", ctypes.c_void_p(nccl_comm))


class Lion:
    """One rank's Distributed Lion optimizer over a flat buffer (ncclSignLion_t): host buffers
    and a host communicator (Comm), or, with nccl_comm (an ncclComm_t as an integer address;
    0 for aggregation "local") device buffers on that communicator's GPU.

    lr, betas and weight_decay are Lion's; aggregation is "mavo" (majority vote of the
    signs), "average" (their mean), "global" (an fp32 all-reduce of the updates, the
    baseline) or "local" (no communication). master_weights keeps an fp32 copy of
    low-precision parameters; momentum_average_every > 0 averages the momentum every
    that many steps; skip_nonfinite skips, on every rank, a step in which any rank's
    gradient holds an inf or a NaN. zero_rule / tie_rule (names as for Comm) are the rules
    of this optimizer's votes, its own whatever else uses the communicator
    (ncclSignLionConfig_t's zeroRule, tieRule); None: the communicator's at each step.
    docs/LION.md has the algorithm.
    """

    def __init__(self, count, datatype, comm=None, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0,
                 aggregation="mavo", master_weights=False, momentum_average_every=0, skip_nonfinite=False,
                 nccl_comm=None, zero_rule=None, tie_rule=None):
        if aggregation not in AGGREGATIONS:
            raise ValueError("aggregation must be one of %s, not %r" % (sorted(AGGREGATIONS), aggregation))
        cfg = LionConfig(ctypes.sizeof(LionConfig), _LION_CONFIG_MAGIC, version_code(), lr, betas[0], betas[1],
                         weight_decay, AGGREGATIONS[aggregation], int(master_weights), int(momentum_average_every),
                         int(skip_nonfinite), _rule_code(ZERO_RULES, zero_rule, "zero_rule"),
                         _rule_code(TIE_RULES, tie_rule, "tie_rule"))
        self.handle = ctypes.c_void_p()
        self.on_device = nccl_comm is not None
        if self.on_device:
            _require_device_support()
            _check("ncclSignLionCreateNccl", ctypes.byref(self.handle), count, datatype, ctypes.byref(cfg),
                   ctypes.c_void_p(nccl_comm or None))
        else:
            _check("ncclSignLionCreate", ctypes.byref(self.handle), count, datatype, ctypes.byref(cfg),
                   comm.handle if comm is not None else None)
        self.count = count
        self._comm = comm  # the optimizer uses the communicator until it is destroyed: keep it alive
        self._phase_buffer = None  # phases(): made at the first read

    def __del__(self):
        if getattr(self, "handle", None):
            _lib().ncclSignLionDestroy(self.handle)
            self.handle = None

    def set_hyperparameters(self, lr, betas, weight_decay):
        """Changes lr, betas (beta1, beta2) and weight_decay for the next steps (schedules; lr 0 is valid)."""
        _check("ncclSignLionSetHyperparameters", self.handle, lr, betas[0], betas[1], weight_decay)

    def step(self, params_ptr, grads_ptr):
        """Updates the parameters at params_ptr in place; collective. False when skipped (non-finite)."""
        applied = ctypes.c_int()
        _check("ncclSignLionStep", self.handle, params_ptr, grads_ptr, ctypes.byref(applied))
        return bool(applied.value)

    def step_async(self, params_ptr, grads_ptr, stream):
        """A device optimizer's step, enqueued on `stream` (a cudaStream_t as an integer, e.g.
        torch.cuda.current_stream().cuda_stream); returns at once. Collective."""
        _check("ncclSignLionStepAsync", self.handle, params_ptr, grads_ptr, ctypes.c_void_p(stream or None))

    def destroy(self):
        """Frees the optimizer now (a device one once its steps in flight are done)."""
        if getattr(self, "handle", None):
            _check("ncclSignLionDestroy", self.handle)
            self.handle = None

    def step_counts(self):
        """(applied, skipped): steps applied and skipped for a non-finite gradient since creation or load."""
        a, s = ctypes.c_uint64(), ctypes.c_uint64()
        _check("ncclSignLionGetStepCount", self.handle, ctypes.byref(a), ctypes.byref(s))
        return a.value, s.value

    def state_size(self):
        """The size in bytes of this rank's state (momentum, master copy, counters) as save_state writes it."""
        n = ctypes.c_size_t()
        _check("ncclSignLionGetStateSize", self.handle, ctypes.byref(n))
        return n.value

    def save_state_into(self, ptr, nbytes):
        """Writes this rank's state into the buffer at address ptr of nbytes (at least state_size())."""
        _check("ncclSignLionSaveState", self.handle, ptr, nbytes)

    def load_state_from(self, ptr, nbytes):
        """Restores a state saved by an optimizer of the same count, datatype and options from address ptr."""
        _check("ncclSignLionLoadState", self.handle, ptr, nbytes)

    def record_phases(self, enable):
        """Whether the next steps record when each phase ran (phases()); off by default, and then
        a step reads no clock. Host optimizers only (ncclSignLionRecordPhases)."""
        _check("ncclSignLionRecordPhases", self.handle, int(bool(enable)))
        self._phase_buffer = (PhaseTime * 3)() if enable else None

    def phases(self):
        """The phases of the last recorded step: [(phase, chunk, begin_us, end_us)], phase 0 the
        vote (pass 1), 1 the all-reduce, 2 the apply (pass 2); microseconds of CLOCK_MONOTONIC
        (time.monotonic_ns() // 1000 reads the same clock)."""
        n = ctypes.c_int()
        buf = self._phase_buffer
        if buf is None:
            buf = self._phase_buffer = (PhaseTime * 3)()
        _check("ncclSignLionGetPhases", self.handle, buf, len(buf), ctypes.byref(n))
        if n.value > len(buf):  # a pipelined step: more chunks than the buffer holds, read again
            buf = self._phase_buffer = (PhaseTime * n.value)()
            _check("ncclSignLionGetPhases", self.handle, buf, len(buf), ctypes.byref(n))
        return [(p.phase, p.chunk, p.beginUs, p.endUs) for p in buf[:n.value]]

    def save_state(self):
        """This rank's state as bytes; load_state(data) continues training bit for bit. Not collective."""
        buf = ctypes.create_string_buffer(self.state_size())
        self.save_state_into(ctypes.addressof(buf), len(buf))
        return buf.raw

    def load_state(self, data):
        """Restores a state returned by save_state() of an optimizer of the same shape and options."""
        buf = ctypes.create_string_buffer(bytes(data), len(data))
        self.load_state_from(ctypes.addressof(buf), len(data))
