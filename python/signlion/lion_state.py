"""DistributedLion's state as torch.optim's: state_dict() in torch's per-parameter format (the
library's state of each bucket cut per parameter, with the buckets' step counters and delay=1's
vote in flight) and load_state_dict() of it, of the earlier opaque format, or of another Lion's
(lion_pytorch.Lion), across bucket layouts. A mixin of DistributedLion: it reads the optimizer's
buckets and param groups."""
import torch

from . import capi
from .lion_buckets import _BUCKET_DTYPES, _shaped
from .lion_hyperparameters import _HYPERPARAMETERS, _check_group

# The saved state's header (struct StateHeader of src/lion/distributed_lion.cc): magic, version,
# datatype, aggregation (4 x u32), count, applied, skipped (3 x u64), hasMaster, masterReady
# (2 x u32). The counters of a bucket are bytes 24..40 (applied, skipped) and 44..48 (masterReady).
_STATE_HEADER_BYTES = 48
_COUNTER_BYTES = (slice(24, 40), slice(44, 48))


def _take_counters(blob, saved_headers):
    """Writes into blob's header the counters of the saved headers of its parameters, when they
    all have the same (a bucket whose parameters were saved in buckets that stepped alike);
    otherwise the counters stay as they are."""
    if not saved_headers or any(h is None for h in saved_headers):
        return
    saved_headers = [h.detach().to("cpu", torch.uint8).reshape(-1) for h in saved_headers]
    if any(h.numel() != _STATE_HEADER_BYTES for h in saved_headers) or blob.numel() < _STATE_HEADER_BYTES:
        return
    first = saved_headers[0]
    if any(not torch.equal(h[c], first[c]) for h in saved_headers[1:] for c in _COUNTER_BYTES):
        return  # parameters whose saved buckets counted differently: no single count for this bucket
    for c in _COUNTER_BYTES:
        blob[c] = first[c]


def _hooks(optimizer, table):
    """The hooks torch.optim.Optimizer keeps in `table` (PyTorch 2.x; 1.13 has none), in order."""
    return list(getattr(optimizer, table, {}).values())


class LionStateDict:
    """state_dict() and load_state_dict() of DistributedLion, and the per-parameter state its
    `state` property shows (_collect_state). The public pair runs torch.optim's state-dict hooks
    around the optimizer's own (_buckets_state_dict, _load_buckets_state_dict), which the
    optimizer also uses inside a step (moving the state into new buckets) without them."""

    def _load_delayed_update(self, b, states):
        """delay=1: the vote a saved state had in flight becomes this bucket's, applied by the next
        step; a parameter saved without one (another delay, or before the first step) gets
        u = 0 when others of its bucket have one, and a bucket where none has one applies
        nothing at the next step."""
        self._delay_buffers(b)
        b.vote_out.zero_()
        b.vote_pending = False
        for p, st, (o, n, _), (shape, strides) in zip(b.params, states, b.slices, b.layouts):
            u = st.get("delayed_update")
            if u is None:
                continue
            if u.numel() != n:
                raise ValueError("signlion: a delayed_update of shape %s for a parameter of shape %s"
                                 % (tuple(u.shape), tuple(p.shape)))
            _shaped(b.vote_out, o, shape, strides).copy_(u.detach().reshape(shape).to("cpu", torch.float32).neg())
            b.vote_pending = True

    def _collect_state(self):
        out = {}
        for b in self._buckets:
            _, _, momentum, master = b.save()
            applied, _ = b.lion.step_counts()
            for p, (o, n, _), (shape, strides) in zip(b.params, b.slices, b.layouts):
                st = {"step": torch.tensor(float(applied)),
                      "exp_avg": _shaped(momentum, o, shape, strides).clone().to(p.device)}
                if master is not None:
                    st["master"] = _shaped(master, o, shape, strides).clone().to(p.device)
                if b.vote_pending:  # the vote in flight, agreed: the update the next step applies
                    st["delayed_update"] = _shaped(b.vote_out, o, shape, strides).float().neg().to(p.device)
                out[p] = st
        return out

    def state_dict(self):
        """torch's format: {"state": {index: {"exp_avg", "step"[, "master"][, "delayed_update"]}},
        "param_groups": [...]}, plus "signlion": the aggregation, delay and, per bucket, its
        parameters and the header of its saved state (step counters), so that a load continues
        bit for bit. As torch.optim's (PyTorch 2.x): the hooks of register_state_dict_pre_hook
        run first (hook(optimizer)), those of register_state_dict_post_hook last
        (hook(optimizer, state_dict), whose result, unless None, replaces the state dict)."""
        for hook in _hooks(self, "_optimizer_state_dict_pre_hooks"):
            hook(self)
        state_dict = self._buckets_state_dict()
        for hook in _hooks(self, "_optimizer_state_dict_post_hooks"):
            result = hook(self, state_dict)
            if result is not None:
                state_dict = result
        return state_dict

    def _buckets_state_dict(self):
        self._wait_in_flight()
        index = self._param_indices()
        groups = []
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            packed["params"] = [index[id(p)] for p in g["params"]]
            groups.append(packed)
        state = {index[id(p)]: st for p, st in self.state.items()}
        buckets = []
        for b in self._buckets:
            blob, header, _, _ = b.save()
            buckets.append({"group": b.group_index, "dtype": str(b.dtype), "params": list(b.indices),
                            "header": blob[:header].clone()})
        return {"state": state, "param_groups": groups,
                "signlion": {"format": 2, "aggregation": self.aggregation, "delay": self.delay, "buckets": buckets}}

    def load_state_dict(self, state_dict):
        """Takes what state_dict() returned (this version's or the earlier opaque format), or the
        state_dict of another Lion over the same parameters, e.g. lion_pytorch.Lion (per parameter
        "exp_avg"; missing entries are zero momentum, as for a parameter that never stepped). Not
        collective: each rank loads its own state. As torch.optim's (PyTorch 2.x): the hooks of
        register_load_state_dict_pre_hook get a shallow copy first (hook(optimizer, state_dict),
        whose result, unless None, is loaded instead), those of
        register_load_state_dict_post_hook run after the load (hook(optimizer))."""
        state_dict = state_dict.copy()  # shallow, as torch's: a pre hook may change its copy in place
        for hook in _hooks(self, "_optimizer_load_state_dict_pre_hooks"):
            result = hook(self, state_dict)
            if result is not None:
                state_dict = result
        self._load_buckets_state_dict(state_dict)
        for hook in _hooks(self, "_optimizer_load_state_dict_post_hooks"):
            hook(self)

    def _load_buckets_state_dict(self, state_dict):
        self._wait_in_flight()
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError("signlion: the state has %d param groups, this optimizer %d" % (len(groups),
                                                                                         len(self.param_groups)))
        for gi, (g, sg) in enumerate(zip(self.param_groups, groups)):
            if len(sg["params"]) != len(g["params"]):
                raise ValueError("signlion: param group %d of the state has %d parameters, this optimizer's %d" %
                                 (gi, len(sg["params"]), len(g["params"])))
        saved = state_dict.get("signlion")
        if saved is not None and "format" not in saved:
            self._load_opaque(state_dict, saved)
        else:
            self._load_per_parameter(state_dict, saved)
        for gi, (g, sg) in enumerate(zip(self.param_groups, groups)):
            merged = dict(g)
            merged.update({k: (tuple(v) if k == "betas" and isinstance(v, (tuple, list)) else v)
                           for k, v in sg.items() if k != "params"})
            for k in _HYPERPARAMETERS:
                merged.setdefault(k, self.defaults[k])
            _check_group(merged, gi)
            g.update({k: v for k, v in merged.items() if k != "params"})
        self._state_cache = None

    def _load_opaque(self, state_dict, saved):
        """The format of signlion before per-parameter state: one state blob per (param group,
        dtype), the parameters in registration order. Converted to per-parameter state (with each
        blob's header for the counters), which fits any bucket layout."""
        if saved["aggregation"] != self.aggregation:
            raise ValueError("signlion: state saved with aggregation %r, this optimizer uses %r" %
                             (saved["aggregation"], self.aggregation))
        members = [(gi, dtype, [p for p in g["params"] if p.dtype == dtype]) for gi, g in enumerate(self.param_groups)
                   for dtype in _BUCKET_DTYPES]
        members = [m for m in members if m[2]]
        layout = [(gi, str(dtype), sum(p.numel() for p in ps)) for gi, dtype, ps in members]
        got = [(s["group"], s["dtype"], s["numel"]) for s in saved["buckets"]]
        if layout != got:
            raise ValueError("signlion: a state of buckets %s (group, dtype, count), this optimizer has %s" %
                             (got, layout))
        index, state, headers = self._param_indices(), {}, {}
        saved_order = [i for g in state_dict["param_groups"] for i in g["params"]]
        for (_, _, ps), s in zip(members, saved["buckets"]):
            blob = s["state"].detach().to("cpu", torch.uint8).reshape(-1)
            n = s["numel"]
            if blob.numel() not in (_STATE_HEADER_BYTES + 4 * n, _STATE_HEADER_BYTES + 8 * n):
                raise ValueError("signlion: a saved state of %d bytes for %d parameters: not a Lion state of this "
                                 "library" % (blob.numel(), n))
            end = _STATE_HEADER_BYTES + 4 * n
            momentum = blob[_STATE_HEADER_BYTES:end].view(torch.float32)
            master = blob[end:].view(torch.float32) if blob.numel() > end else None
            offset = 0
            for p in ps:
                st = {"exp_avg": momentum[offset:offset + p.numel()].view(p.shape)}
                if master is not None:
                    st["master"] = master[offset:offset + p.numel()].view(p.shape)
                state[saved_order[index[id(p)]]] = st
                headers[saved_order[index[id(p)]]] = blob[:_STATE_HEADER_BYTES]
                offset += p.numel()
        self._load_per_parameter({"state": state, "param_groups": state_dict["param_groups"]}, None, headers)

    def _load_per_parameter(self, state_dict, saved, param_headers=None):
        """param_headers: {saved index: the saved header of its bucket}, for the counters when the
        saved buckets are not this optimizer's."""
        state = state_dict["state"]
        # Saved indices are positions in the saved param_groups, which map one to one onto ours.
        saved_order = [i for g in state_dict["param_groups"] for i in g["params"]]
        ours = self._param_indices()
        position = {}
        for g in self.param_groups:
            for p in g["params"]:
                position[id(p)] = saved_order[ours[id(p)]]
        headers = {}
        if saved is not None:
            if saved.get("aggregation") != self.aggregation:
                raise ValueError("signlion: state saved with aggregation %r, this optimizer uses %r" %
                                 (saved.get("aggregation"), self.aggregation))
            layout = [(b.group_index, str(b.dtype), [position[id(p)] for p in b.params]) for b in self._buckets]
            got = [(s["group"], s["dtype"], list(s["params"])) for s in saved["buckets"]]
            if layout == got:  # the same buckets: their counters come back too
                headers = {i: s["header"] for i, s in enumerate(saved["buckets"])}
            else:  # other buckets (another bucket_cap_mb): each parameter's counters, from its bucket
                param_headers = {i: s["header"] for s in saved["buckets"] for i in s["params"]}
        blobs = []
        for bi, b in enumerate(self._buckets):
            blob, header, momentum, master = b.save()
            if bi in headers:
                h = headers[bi].detach().to("cpu", torch.uint8).reshape(-1)
                if h.numel() != header:
                    raise ValueError("signlion: bucket %d's saved header is %d bytes, this library's %d" %
                                     (bi, h.numel(), header))
                blob[:header] = h
            elif param_headers:
                _take_counters(blob, [param_headers.get(position[id(p)]) for p in b.params])
            for p, (o, n, _), (shape, strides) in zip(b.params, b.slices, b.layouts):
                key = position[id(p)]
                st = state.get(key, {})
                if st and "exp_avg" not in st:
                    raise ValueError("signlion: the state of parameter %d has no 'exp_avg' (it has %s): not a "
                                     "Lion state" % (key, sorted(st)))
                m = st.get("exp_avg")
                if m is None:
                    momentum[o:o + n] = 0.0
                else:
                    if m.numel() != n:
                        raise ValueError("signlion: parameter %d's exp_avg has shape %s, the parameter %s" %
                                         (key, tuple(m.shape), tuple(p.shape)))
                    _shaped(momentum, o, shape, strides).copy_(m.detach().reshape(shape).to("cpu", torch.float32))
                if master is not None:
                    src = st.get("master")
                    src = src if src is not None else p.detach()  # the master copy is the parameters' value
                    _shaped(master, o, shape, strides).copy_(src.reshape(shape).to("cpu", torch.float32))
            blobs.append(blob)
            if self.delay:
                self._load_delayed_update(b, [state.get(position[id(p)], {}) for p in b.params])
        for b, blob in zip(self._buckets, blobs):
            try:
                b.load(blob)
            except capi.SignError as e:
                raise ValueError("signlion: the saved state does not fit this optimizer (%s)" % e)
