"""DistributedLion's buckets: which parameters share a flat buffer (_group_buckets, in the order
backward completes them) and the bucket itself (_Bucket: the parameters and their gradients as
views of two flat buffers, its library optimizer, and what overlap and delay=1 keep per bucket)."""
import torch

from . import capi

_DTYPES = {torch.float32: capi.FLOAT32, torch.float16: capi.FLOAT16, torch.bfloat16: capi.BFLOAT16}

# Bucket order within a param group: parameters in reverse registration order (the order in
# which backward usually finishes their gradients), cut into buckets of at most the cap.
_BUCKET_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _group_buckets(params, positions, cap_bytes):
    """The buckets of one param group as lists of parameters: per dtype and per whether the
    parameter is trainable (requires_grad) when the buckets are made, the parameters in reverse
    registration order cut into runs of at most cap_bytes (a parameter larger than the cap is a
    bucket of its own); the buckets then sorted by when backward is expected to complete them
    (the lowest registration position in a bucket comes last). A parameter listed twice (tied
    weights) is one parameter, placed once. Frozen parameters get buckets of their own, so that
    they never make a trainable bucket keep part of itself as it is at every step."""
    unique = list({id(p): p for p in params}.values())  # in the order of their first listing
    buckets = []
    for dtype in _BUCKET_DTYPES:
        for trainable in (True, False):
            current, size = [], 0
            for p in reversed([p for p in unique if p.dtype == dtype and bool(p.requires_grad) == trainable]):
                nbytes = p.numel() * p.element_size()
                if current and size + nbytes > cap_bytes:
                    buckets.append(current)
                    current, size = [], 0
                current.append(p)
                size += nbytes
            if current:
                buckets.append(current)
    return sorted(buckets, key=lambda b: -min(positions[id(p)] for p in b))


def _dense_strides(t):
    """The strides of a tensor laid out like t in exactly t.numel() elements: t's own when t is
    dense (contiguous, channels_last or any permutation), else the contiguous ones. A
    parameter's slice of its bucket takes them, so its memory format is kept."""
    return torch.empty_like(t, memory_format=torch.preserve_format).stride()


def _shaped(flat, offset, shape, strides):
    """The view of flat[offset:] with this shape and these strides (a parameter's layout)."""
    seg = flat[offset:]
    return seg.as_strided(shape, strides, seg.storage_offset())


class _Bucket:
    """Parameters of one (param group, dtype) in one flat buffer, its gradients in another
    (each parameter's .grad becomes a view into it, as DDP's gradient_as_bucket_view), and its
    optimizer; with overlap, which of its gradients are ready in the current backward."""

    def __init__(self, index, group_index, dtype, params, indices, device):
        self.index = index
        self.group_index, self.dtype, self.params, self.indices = group_index, dtype, params, indices
        self.numel = sum(p.numel() for p in params)
        self.flat = torch.empty(self.numel, dtype=dtype, device=device)
        self.grad = torch.zeros(self.numel, dtype=dtype, device=device)
        self.negated = None  # maximize: the negated gradients, made at the first such step
        self.slices = []
        self.layouts = []  # per parameter: (shape, strides) of its slices of flat and grad
        self.grad_views = []
        offset = 0
        with torch.no_grad():
            for p in params:
                n = p.numel()
                strides = _dense_strides(p)
                view = _shaped(self.flat, offset, p.shape, strides)
                view.copy_(p.data)
                p.data = view
                self.slices.append((offset, n, p.data.data_ptr()))
                self.layouts.append((p.shape, strides))
                self.grad_views.append(_shaped(self.grad, offset, p.shape, strides))
                offset += n
        self.lion = None
        self.has_master = False
        # master_weights: each parameter's version counter as the last step left it (None before
        # the first step, which takes the master copy from the parameters).
        self.params_versions = None
        # Overlap: positions (in self.params) of the parameters with a gradient hook, those whose
        # gradient is final in this backward, whether the step was launched since step(), and
        # the gradients' version counter when the bucket was complete (what its step reads).
        self.hooked = set()
        self.hook_handles = []
        self.grad_accumulators = []  # PyTorch < 2.1: the AccumulateGrad nodes the hooks sit on
        self.ready = set()
        self.launched = False
        self.seen_version = None
        # The first step only: each gradient's bits when its hook fired, to see changes that
        # bypass the version counter (writes through .data, as torch 1.13's clip_grad_value_).
        self.probe_copy = None
        # While a trace is on (DistributedLion.start_trace): [first, last] hook times of this
        # backward's gradients, and (step, ready, launched) of the step in flight (now_us).
        self.trace_ready = None
        self.trace_launch = None
        # delay=1 (DistributedLion._step_delayed): the gradients the vote in flight reads, where
        # the library's step writes minus the agreed update (vote_out), the same two for the
        # next step's vote (started before this one is applied), the Work of the vote in flight
        # (None for one loaded from a state), fp32 work space for the apply, and whether
        # vote_out holds a vote not applied yet. Made at the first such step.
        self.vote_grad = None
        self.vote_out = None
        self.next_vote_grad = None
        self.next_vote_out = None
        self.vote_work = None
        self.apply_work = None
        self.apply_param32 = None
        self.vote_pending = False

    def describe(self):
        return "bucket %d (param group %d, %s, parameters %s)" % (self.index, self.group_index,
                                                                  str(self.dtype).replace("torch.", ""),
                                                                  self.indices)

    def complete_in_backward(self):
        """Every trainable parameter has its gradient in this backward. A frozen parameter
        (requires_grad=False) is not waited for; one unfrozen after the hooks were made has no
        hook yet and holds its bucket back until step() makes one."""
        return all(j in self.ready or not p.requires_grad for j, p in enumerate(self.params))

    def adopt(self, j):
        """Makes parameter j's .grad the view into this bucket (copying a gradient that autograd
        made elsewhere: the first backward, or after zero_grad(set_to_none=True)); later
        backward passes accumulate into the view in place. Runs on the thread that owns the
        gradient (backward's hook, or step())."""
        p, view = self.params[j], self.grad_views[j]
        g = p.grad
        if g is None:
            return
        if g.is_sparse:
            raise RuntimeError("signlion: parameter %d has a sparse gradient; DistributedLion takes dense gradients "
                               "only" % self.indices[j])
        if g.data_ptr() == view.data_ptr() and g.stride() == view.stride():
            return
        view.copy_(g)
        p.grad = view

    def prepare_gradients(self):
        """Before the step: every .grad adopted into the buffer, the slice of a parameter without
        one zeroed (its vote comes from its momentum); returns which parameters have one here."""
        has_grad = []
        for j, p in enumerate(self.params):
            self.adopt(j)
            has_grad.append(p.grad is not None)
            if p.grad is None:
                self.grad_views[j].zero_()
        return has_grad

    def record_probe(self, j):
        """Keeps parameter j's gradient bits as its hook sees them (the first step only)."""
        if self.probe_copy is None:
            self.probe_copy = torch.empty_like(self.grad)
        offset, n, _ = self.slices[j]
        self.probe_copy[offset:offset + n].copy_(self.grad[offset:offset + n])

    def grads_changed(self):
        """Whether a gradient of this bucket changed since its hook fired: a write into the
        gradient buffer (clip_grad_norm_, unscaling, any in-place op bumps its version counter),
        a .grad replaced by another tensor or set to None; on the first step also a write that
        bypasses the version counter (through .data), seen by comparing the bits."""
        if self.seen_version is None:
            return False
        if self.grad._version != self.seen_version:
            return True
        for j, (p, v) in enumerate(zip(self.params, self.grad_views)):
            if j in self.ready and (p.grad is None or p.grad.data_ptr() != v.data_ptr()):
                return True
        if self.probe_copy is not None:
            bits = torch.int32 if self.grad.element_size() == 4 else torch.int16  # NaN == NaN here
            for j in self.ready:
                offset, n, _ = self.slices[j]
                if not torch.equal(self.probe_copy[offset:offset + n].view(bits), self.grad[offset:offset + n].view(bits)):
                    return True
        return False

    def save(self):
        """The state as bytes (a CPU uint8 tensor) and its momentum and master copy as fp32 views.
        Layout (docs/LION.md): a header, the momentum, then the master copy when there is one."""
        blob = torch.empty(self.lion.state_size(), dtype=torch.uint8)
        self.lion.save_state_into(blob.data_ptr(), blob.numel())
        header = blob.numel() - 4 * self.numel * (2 if self.has_master else 1)
        momentum = blob[header:header + 4 * self.numel].view(torch.float32)
        master = blob[header + 4 * self.numel:].view(torch.float32) if self.has_master else None
        return blob, header, momentum, master

    def load(self, blob):
        blob = blob.detach().to("cpu").contiguous()  # the library copies device state through host memory
        self.lion.load_state_from(blob.data_ptr(), blob.numel())
