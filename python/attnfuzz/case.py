"""Case: the case object of a run request (docs/case-json.md) with its derived values.

    case = Case(header["case"], header.get("derived"), header.get("tensors"))
    case.batch, case.q_heads, case.scale, case.diag_offset[b], case.valid_keys[b]
    cache_key = case.key("shapes", "dtype", "layouts")

A serving case (docs/design.md section 2, "Serving forms") also has forms (a subset of
packed, paged, sinks, alibi), thd and paged, the per-row lengths q_lens/kv_lens, the page
geometry (the tensors of its run request, cu_seqlens, block table, sinks, slopes, are the
request's: attnfuzz.request; its q, k, v are then THD or page caches: attnfuzz.serving).

An FP8 case (docs/case-json.md, "fp8") has fp8, its format ("e4m3" or "e5m2"; None for any
other case), fp8_kv (only k and v are FP8, an FP8 KV cache: q is in case.dtype), and
descale {"q", "k", "v"}: the float32 factors its stored q, k, v values are multiplied by
(1.0 without FP8, and q's with fp8_kv); case.dtype is then the output's (f16 or bf16).

Attributes follow the JSON field names where they exist, with defaults applied; derived
values (scale, diag_offset, valid_keys) come from the request's "derived" object when it
gives them, else they are computed here by the rules of docs/design.md section 2."""

import math

PACKED_LAYOUTS = ("qkv_bs3hd", "qkv_bsh3d", "qkv_channels_first")
UNPACKED_LAYOUTS = ("bhsd", "bshd", "sbhd", "bsd", "channels_first")
LAYOUTS = UNPACKED_LAYOUTS + PACKED_LAYOUTS
DIAGONALS = ("top_left", "bottom_right", "bottom_right_valid", "explicit")
FP8_FORMATS = ("e4m3", "e5m2")
KEY_FIELDS = ("shapes", "dtype", "layouts", "masks", "causal", "scale", "softcap", "dropout")
SERVING_FORMS = ("packed", "paged", "sinks", "alibi")
GRADS = ("dq", "dk", "dv", "dmask")


_TENSOR_DEFAULTS = {"layout": "bhsd", "perm": 0, "pad": 0, "broadcast": "none"}


def _get(d, key, default):
    v = d.get(key)
    return default if v is None else v


def _seed(v):
    if v is None:
        return 0
    if isinstance(v, str):
        return int(v, 0)
    return int(v)


class Case:
    """The case of one run request. Attributes (see docs/case-json.md for the fields):

    batch, q_heads, kv_heads, q_len, kv_len, head_dim, v_head_dim, dtype, allow_tf32,
    scale (the effective scale), scale_given, placement, softcap, causal, diagonal,
    diagonal_offset, diag_offset (list per batch row), key_padding (list or None),
    valid_keys (list per batch row), window ((left, right), -1 unbounded), amask, bmask
    (mask spec dicts or None), dropout_p, dropout_seed, layout (q's), layouts
    ({"q", "k", "v"}), specs ({"q", "k", "v"}: the tensor objects with defaults),
    packed, tensors ({name: protocol entry} of the request, empty when built from
    case.json alone), raw; backward: grads (the gradients asked for, a tuple in GRADS
    order; empty for a forward-only case), out_layout (where `out` and `do` live);
    specs["do"] is dO's tensor object. The tensors themselves (the packed buffer, dO, the
    serving tables) are the request's (attnfuzz.request), not the case's.
    """

    __slots__ = ("raw", "derived", "tensors", "batch", "q_heads", "kv_heads", "q_len", "kv_len",
                 "head_dim", "v_head_dim", "dtype", "allow_tf32", "scale", "scale_given", "placement",
                 "softcap", "causal", "diagonal", "diagonal_offset", "key_padding", "window", "amask",
                 "bmask", "dropout_p", "dropout_seed", "layout", "packed", "grads", "_diag", "_valid",
                 "_specs", "forms", "thd", "paged", "q_lens", "kv_lens", "page_size", "shared_pages", "page_seed",
                 "sink_mag_q4", "sink_seed", "alibi_symmetric", "alibi_random", "alibi_mag_q4", "alibi_seed",
                 "fp8", "fp8_kv", "descale")

    def __init__(self, raw, derived=None, tensors=None):
        if not isinstance(raw, dict):
            raise ValueError("case: not a JSON object")
        self.raw = raw
        self.derived = derived or {}
        if tensors is None:
            tensors = {}
        elif isinstance(tensors, list):
            tensors = {e["name"]: e for e in tensors}
        self.tensors = tensors
        g = raw.get
        self.batch = int(_get(raw, "batch", 1))
        self.q_heads = int(_get(raw, "q_heads", 1))
        self.kv_heads = int(_get(raw, "kv_heads", self.q_heads))
        self.q_len = int(_get(raw, "q_len", 1))
        self.kv_len = int(_get(raw, "kv_len", self.q_len))
        self.head_dim = int(_get(raw, "head_dim", 1))
        self.v_head_dim = int(_get(raw, "v_head_dim", self.head_dim))
        self.dtype = _get(raw, "dtype", "f32")
        self.allow_tf32 = bool(g("allow_tf32"))
        self.scale_given = g("scale") is not None
        s = self.derived.get("scale")
        if s is None:
            s = float(raw["scale"]) if self.scale_given else 1.0 / math.sqrt(self.head_dim)
        self.scale = float(s)
        self.placement = _get(raw, "scale_placement", "scores")
        self.softcap = float(_get(raw, "softcap", 0.0))
        self.causal = bool(g("causal"))
        self.diagonal = _get(raw, "diagonal", "top_left")
        self.diagonal_offset = int(_get(raw, "diagonal_offset", 0))
        kp = g("key_padding")
        self.key_padding = [int(x) for x in kp] if kp is not None else None
        w = g("window")
        self.window = (int(w[0]), int(w[1])) if w is not None else (-1, -1)
        self.amask = g("additive_mask")
        self.bmask = g("bool_mask")
        self.dropout_p = float(_get(raw, "dropout_p", 0.0))
        self.dropout_seed = _seed(g("dropout_seed"))
        q = g("q") or {}
        self.layout = _get(q, "layout", "bhsd")
        self.packed = self.layout in PACKED_LAYOUTS
        bwd = g("backward") or {}
        asked = set(bwd.get("grads") or ())
        unknown = asked - set(GRADS)
        if unknown:
            raise ValueError("case: backward asks for unknown gradients %s (known: %s)"
                             % (", ".join(sorted(unknown)), ", ".join(GRADS)))
        self.grads = tuple(n for n in GRADS if n in asked)
        self._serving(g("serving") or {})
        f8 = g("fp8") or {}
        self.fp8 = f8.get("format")
        if self.fp8 is not None and self.fp8 not in FP8_FORMATS:
            raise ValueError("case: fp8 format %r unknown (known: %s)" % (self.fp8, ", ".join(FP8_FORMATS)))
        self.fp8_kv = bool(f8.get("kv_only"))
        ds = f8.get("descale") or (1.0, 1.0, 1.0)
        self.descale = {n: float(ds[i]) for i, n in enumerate(("q", "k", "v"))}
        self._diag = None
        self._valid = None
        self._specs = None

    def _serving(self, sv):
        forms = set(sv.get("forms") or ())
        unknown = forms - set(SERVING_FORMS)
        if unknown:
            raise ValueError("case: serving forms %s unknown (known: %s)" % (", ".join(sorted(unknown)),
                                                                          ", ".join(SERVING_FORMS)))
        self.forms = frozenset(forms)
        self.thd = "packed" in forms
        self.paged = "paged" in forms
        self.q_lens = [int(x) for x in sv["q_lens"]] if self.thd else None
        self.kv_lens = [int(x) for x in sv["kv_lens"]] if (self.thd or self.paged) else None
        self.page_size = int(_get(sv, "page_size", 16)) if self.paged else 0
        self.shared_pages = int(_get(sv, "shared_pages", 0)) if self.paged else 0
        self.page_seed = _seed(sv.get("page_seed")) if self.paged else 0
        self.sink_mag_q4 = int(round(4 * float(_get(sv, "sink_log10_magnitude", 0.0))))
        self.sink_seed = _seed(sv.get("sink_seed"))
        self.alibi_symmetric = bool(sv.get("alibi_symmetric"))
        self.alibi_random = _get(sv, "alibi_slopes", "geometric") == "random"
        self.alibi_mag_q4 = int(round(4 * float(_get(sv, "alibi_log10_magnitude", 0.0))))
        self.alibi_seed = _seed(sv.get("alibi_seed"))

    # --- serving --------------------------------------------------------------------

    def seg_q(self, b):
        """Queries of row b: q_lens[b] in a packed case, else q_len."""
        return min(self.q_lens[b], self.q_len) if self.thd else self.q_len

    def seg_k(self, b):
        """Keys of row b: kv_lens[b] with a packed or paged form, else kv_len."""
        return min(self.kv_lens[b], self.kv_len) if self.kv_lens is not None else self.kv_len

    # --- derived values -------------------------------------------------------------

    @property
    def valid_keys(self):
        """Valid keys per batch row: key_padding[b], or kv_len without key padding."""
        if self._valid is None:
            v = self.derived.get("valid_keys")
            if v is None and self.kv_lens is not None:
                v = [self.seg_k(b) for b in range(self.batch)]
            elif v is None:
                v = list(self.key_padding) if self.key_padding is not None else [self.kv_len] * self.batch
            self._valid = [int(x) for x in v]
        return self._valid

    @property
    def diag_offset(self):
        """offset(b) of the diagonal d(b, i) = i + offset(b) per batch row."""
        if self._diag is None:
            v = self.derived.get("diag_offset")
            if v is None:
                d = self.diagonal
                if d == "top_left":
                    v = [0] * self.batch
                elif d == "bottom_right":  # a serving segment counts from its own lengths
                    v = [self.seg_k(b) - self.seg_q(b) for b in range(self.batch)]
                elif d == "bottom_right_valid":
                    v = [n - self.seg_q(b) for b, n in enumerate(self.valid_keys)]
                elif d == "explicit":
                    v = [self.diagonal_offset] * self.batch
                else:
                    raise ValueError("case: unknown diagonal %r" % d)
            self._diag = [int(x) for x in v]
        return self._diag

    @property
    def specs(self):
        """{"q", "k", "v"}: each tensor object with layout/perm/pad/broadcast defaults; in
        a packed case all three have q's layout, perm and pad (one buffer)."""
        if self._specs is None:
            out = {}
            for n in ("q", "k", "v"):
                t = dict(_TENSOR_DEFAULTS)
                t.update({k: v for k, v in (self.raw.get(n) or {}).items() if v is not None})
                out[n] = t
            if self.packed:
                for n in ("k", "v"):
                    for f in ("layout", "perm", "pad", "broadcast"):
                        out[n][f] = out["q"][f]
            if self.grads:
                t = dict(_TENSOR_DEFAULTS)
                t.update({k: v for k, v in ((self.raw.get("backward") or {}).get("do") or {}).items()
                          if v is not None})
                t["layout"] = self.out_layout
                out["do"] = t
            self._specs = out
        return self._specs

    @property
    def out_layout(self):
        """Where `out` and a backward case's `do` live: Q's layout, a packed one's output
        unpacked in its family (layouts.OUT_LAYOUT)."""
        if self.layout == "qkv_channels_first":
            return "channels_first"
        return "bshd" if self.packed else self.layout

    @property
    def backward(self):
        """True when the case asks for gradients."""
        return bool(self.grads)

    @property
    def layouts(self):
        s = self.specs
        return {"q": s["q"]["layout"], "k": s["k"]["layout"], "v": s["v"]["layout"]}

    @property
    def group(self):
        """Query heads per key/value head (Hq / Hkv)."""
        return self.q_heads // self.kv_heads

    @property
    def has_window(self):
        return self.window[0] >= 0 or self.window[1] >= 0

    def required_caps(self):
        """The capability names (AF_CAP_*) a backend must declare to be sent this case: the
        rule of af_case_required_caps (src/backends/backend.c)."""
        caps = {self.dtype} | set(self.forms)
        if self.fp8:
            caps.add(self.fp8)
        if self.fp8_kv:
            caps.add("fp8_kv")
        if self.allow_tf32:
            caps.add("tf32")
        rows = range(self.batch) if self.kv_lens is not None else range(1)
        cross = any(self.seg_q(b) != self.seg_k(b) for b in rows)
        for cap, needed in (("gqa", self.q_heads != self.kv_heads), ("cross", cross),
                            ("dv", self.head_dim != self.v_head_dim), ("scale", self.scale_given),
                            ("softcap", self.softcap > 0), ("amask", self.amask is not None),
                            ("bmask", self.bmask is not None), ("causal", self.causal),
                            ("padding", self.key_padding is not None), ("window", self.has_window),
                            ("dropout", self.dropout_p > 0), ("backward", bool(self.grads))):
            if needed:
                caps.add(cap)
        if self.amask is not None and self.amask.get("dtype", "f32") != self.dtype:
            caps.add("mask_dtype")
        s = self.specs
        if (any(s[n]["perm"] or s[n]["pad"] or s[n]["broadcast"] != "none" for n in s)
                or any(m is not None and m.get("expanded") for m in (self.amask, self.bmask))):
            caps.add("strided")
        return caps

    # --- compile keys ---------------------------------------------------------------

    def _entry_key(self, name):
        e = self.tensors.get(name)
        if e is None:
            return None
        return (e.get("dtype"), tuple(e.get("shape") or ()), tuple(e.get("strides") or ()), e.get("offset", 0))

    def _mask_key(self, spec, name):
        if spec is None:
            return None
        return (spec.get("rank", 4), spec.get("full_dims", "qk"), spec.get("dtype", "f32"),
                bool(spec.get("expanded")), self._entry_key(name))

    def key(self, *fields):
        """A hashable tuple of the compile_key vocabulary fields named (all of them when
        none is named): the structure a compiled artifact depends on. "layouts" and
        "masks" include the strides and offsets of the tensors the request carries."""
        parts = []
        for f in fields or KEY_FIELDS:
            if f == "shapes":
                v = (self.batch, self.q_heads, self.kv_heads, self.q_len, self.kv_len, self.head_dim,
                     self.v_head_dim)
            elif f == "dtype":
                v = (self.dtype, self.allow_tf32, self.fp8, self.fp8_kv)
            elif f == "layouts":
                s = self.specs
                v = tuple((s[n]["layout"], s[n]["perm"], s[n]["pad"], s[n]["broadcast"], self._entry_key(n))
                          for n in ("q", "k", "v")) + (self._entry_key("qkv"),)
            elif f == "masks":
                v = (self._mask_key(self.amask, "mask"), self._mask_key(self.bmask, "bool_mask"))
            elif f == "causal":
                v = (self.causal, self.diagonal, self.diagonal_offset, self.key_padding is not None, self.window)
            elif f == "scale":
                v = (self.scale_given, self.scale, self.placement)
            elif f == "softcap":
                v = self.softcap
            elif f == "dropout":
                v = self.dropout_p
            elif f == "backward":
                v = (self.grads, self._entry_key("do"))
            elif f == "serving":
                v = (tuple(sorted(self.forms)), tuple(self.q_lens or ()), tuple(self.kv_lens or ()), self.page_size,
                     self.shared_pages, self.alibi_symmetric,
                     tuple(self._entry_key(n) for n in ("q", "k", "v", "block_table")))
            else:
                raise ValueError("case.key: unknown field %r (known: %s)" % (f, ", ".join(KEY_FIELDS)))
            parts.append((f, v))
        return tuple(parts)

    def __repr__(self):
        return "Case(B=%d Hq=%d Hkv=%d Sq=%d Sk=%d D=%d Dv=%d %s %s)" % (
            self.batch, self.q_heads, self.kv_heads, self.q_len, self.kv_len, self.head_dim, self.v_head_dim,
            self.dtype, self.layout)
