"""JAX's serving paths as attnfuzz targets (docs/design.md section 2, "Serving forms"): the
variants of attnfuzz.targets.jax whose kind is here.

  xla_seqlens     jax.nn.dot_product_attention(implementation="xla", query_seq_lengths=...,
                  key_value_seq_lengths=...) on a padded batch: a packed case's THD segments
                  gathered to [B, Sq, H, D] and [B, Sk, H, D] (zeros past a segment) inside the
                  jit, the valid rows gathered back to THD
  cudnn_seqlens   the same with implementation="cudnn" (CUDA; f16/bf16)
  pallas_mha      jax.experimental.pallas.ops.gpu.attention.mha over one packed sequence, the
                  segments told apart by segment_ids (CUDA; self-attention segments only)
  pallas_decode   jax.experimental.pallas.ops.gpu.decode_attention.gqa, the split-KV decode
                  kernel: one call row per query (at most 16 a row) with its key range
                  [start_idx, kv_seq_len); a sink through the returned (l, m) (CUDA)
  pallas_paged    jax.experimental.pallas.ops.gpu.paged_attention.paged_attention over the
                  page cache and block table, one call row per query with its length (CUDA)

A dense case is served the way a serving stack would batch it: each batch row a segment of
Sq queries and its valid keys. Outputs: THD [Tq, Hq, Dv] for a packed case, else the
case's output layout.

What each variant cannot express is refused (unsupported, with the reason), never
approximated: the pallas kernels take no additive or boolean mask and no window but what a
key range or length says; mha needs every segment's queries and keys to coincide (its
segment ids serve both) and an offset-0 causal diagonal; decode and paged take head dims of
a power of two from 16 to 256 (Triton blocks), paged also pages of a power of two and key
ranges that start at 0 (lengths only), and neither takes more than one head dim (D == Dv).

Conventions (jax 0.10.2 on a CPU for xla_seqlens; the GPU variants are written from the
installed source of the APIs and run by scripts/gpu_campaign.sh): "xla" replaces masked
logits by -0.7 * finfo.max (masked_rows "mean"); the padded batch is exactly the case's
padded view, Sq x Sk, zero past each segment, so a fully masked row is the mean of V over
the view's Sk keys with 0 for the keys a segment does not have (the oracle's "mean" for a
serving case, docs/worker-protocol.md) and a row of a segment without keys is 0. Padded
query rows (past query_seq_lengths) come out multiplied by 0 (NaN stays NaN there): the
target returns only the valid rows. "cudnn" adds the boolean mask as a finite bias
(masked_rows "unmasked", as jax/cudnn). The pallas kernels mask with -0.7 * f32's largest
too, but only keys of a row that has live ones: decode's and paged's split-KV partitions
with no key in range are skipped and an empty row comes out 0 (masked_rows "zero"); every
P @ V multiplies masked keys' values by 0 (masked_values "ieee"); decode *adds* its mask, so
a masked key's NaN or +Inf score makes its row NaN (masked_keys "ieee"). paged_attention has
no scale argument: q is scaled in its dtype before the call, as its callers do.
In pallas's interpret mode (ATTNFUZZ_PALLAS_INTERPRET=1: the kernels run as jax programs on
the CPU) the pallas variants run without a GPU: the conversion code and the kernels' logic
are tested there, not the Triton lowering. What that mode showed (docs/findings.md): mha lets
a NaN in one segment's V into the other segments' rows; decode and paged overflow f16 in
their unnormalized partition outputs; a row whose live keys all score -inf takes the mean of
masked keys (the finite mask value); decode's added mask turns an Inf query times its zero
padding keys into NaN.

Shapes: THD tensors, call rows and page caches are padded (zeros) to the shape's capacities
(B * Sq rows, B * Sk keys, B * ceil(Sk / page) pages), so one jitted function (one Triton
compile) serves every draw of lengths with the same static choices; the structure key is
the config itself.
"""

from __future__ import annotations

import numpy as np

from attnfuzz import masks, serving
from attnfuzz.targets import _base, _common
from attnfuzz.targets.jax import (CUDNN_MASKED_ROWS, STACK, _has_gpu, from_btnh, full_qk, interpret_mode, to_btnh,
                                  unpack_btnh)
from attnfuzz.targets.jax import SERVING_KINDS as KINDS
DENSE_PAGE = 16      # the pages pallas_paged cuts a dense (or THD) case's keys into
DECODE_MAX_Q = 16    # queries a row at most for decode and paged (one call row each)


# ---------------------------------------------------------------------------------------
# Index construction: numpy only, pure functions of the case (python/tests/test_jax_serving.py
# checks them against attnfuzz.serving's tensors). The model code below copies them into
# repro scripts.
# ---------------------------------------------------------------------------------------

def segment_lengths(case):
    """[(nq, nk)] per batch row: a packed case's segments; a dense (or paged) row's Sq
    queries and its valid keys (key padding, kv_lens)."""
    return [(case.seg_q(b), int(case.valid_keys[b])) for b in range(case.batch)]


def pad_index(lens, S):
    """int32 [B, S]: the gather index that makes the padded batch [B, S, ...] of THD rows
    [T, ...] with one zero row appended: position s of row b is THD row cu[b] + s while
    s < lens[b], else T (the zero row)."""
    lens = np.asarray(lens, dtype=np.int64).reshape(-1)
    cu = serving.cu_seqlens(lens).astype(np.int64)
    s = np.arange(S, dtype=np.int64).reshape(1, -1)
    return np.where(s < lens.reshape(-1, 1), cu[:-1].reshape(-1, 1) + s, cu[-1]).astype(np.int32)


def thd_rows(lens):
    """(b, s), int32 [T] each: THD row t's batch row and its position in the segment."""
    lens = np.asarray(lens, dtype=np.int64).reshape(-1)
    cu = serving.cu_seqlens(lens).astype(np.int64)
    b = np.repeat(np.arange(len(lens), dtype=np.int64), lens)
    s = np.arange(int(cu[-1]), dtype=np.int64) - cu[:-1][b]
    return b.astype(np.int32), s.astype(np.int32)


def query_rows(case):
    """(b, i), int32 [N] each: the query rows of a call that runs one row per query, in the
    output's order: THD order for a packed case, else every (b, i) batch-major."""
    if case.thd:
        return thd_rows([case.seg_q(b) for b in range(case.batch)])
    b = np.repeat(np.arange(case.batch, dtype=np.int32), case.q_len)
    i = np.tile(np.arange(case.q_len, dtype=np.int32), case.batch)
    return b, i


def key_bounds(case, b, i):
    """(start, end), int32 [N] each: the keys [start, end) the structural masks leave query i
    of row b (docs/design.md section 2: its valid keys, causal at d = i + offset(b), the
    window [d - left, d + right]), clipped to [0, Sk]; a row with no key is (0, 0), so a
    kernel that takes only the end (paged_attention's lengths) sees none either."""
    b = np.asarray(b, dtype=np.int64)
    i = np.asarray(i, dtype=np.int64)
    d = i + np.asarray(case.diag_offset, dtype=np.int64)[b]
    lo = np.zeros_like(d)
    hi = np.asarray(case.valid_keys, dtype=np.int64)[b] - 1
    left, right = case.window
    if case.causal:
        hi = np.minimum(hi, d)
    if left >= 0:
        lo = np.maximum(lo, d - left)
    if right >= 0:
        hi = np.minimum(hi, d + right)
    start, end = np.clip(lo, 0, case.kv_len), np.clip(hi + 1, 0, case.kv_len)
    empty = end <= start
    return np.where(empty, 0, start).astype(np.int32), np.where(empty, 0, end).astype(np.int32)


def next_pow2(n, at_least=1):
    """The smallest power of two >= max(n, at_least)."""
    p = 1
    while p < max(int(n), int(at_least)):
        p *= 2
    return p


def is_pow2(n):
    return n >= 1 and (n & (n - 1)) == 0


def segment_ids(lens, total):
    """int32 [total]: THD token t of segment b -> b, the padding tokens past the segments
    -> -1 (they see only one another and come back unused)."""
    b, _ = thd_rows(lens)
    out = np.full(int(total), -1, dtype=np.int32)
    out[:len(b)] = b
    return out


def segments_length(T):
    """The packed sequence's length for mha: a power of two of at least 16 tokens (its
    blocks: min(128, length), a divisor; Triton's dot takes 16 at least)."""
    return next_pow2(T, 16)


def decode_geometry(S):
    """(S_pad, k_splits, block_k) for decode_attention: S_pad >= S keys in k_splits <= 16
    partitions of a power of two of at least 16 keys, block_k (<= 128) dividing them (the
    kernel's asserts: S_pad % k_splits == 0, S_pad / k_splits >= 16, block_k >= 16)."""
    split = next_pow2(-(-int(S) // 16), 16)
    k_splits = max(1, -(-int(S) // split))
    return split * k_splits, k_splits, min(128, split)


def paged_geometry(width, page_size, max_splits=16):
    """(width_pad, k_splits, pages_per_compute_block) for paged_attention with a block table
    `width` pages wide and pages of page_size (a power of two) tokens: compute blocks of at
    least 16 tokens (Triton's dot), width_pad a multiple of k_splits compute blocks (the
    kernel's asserts: width_pad % k_splits == 0, the partition a multiple of the block)."""
    per_block = max(1, 16 // int(page_size))
    blocks = max(1, -(-int(width) // per_block))
    k_splits = min(max_splits, blocks)
    blocks = -(-blocks // k_splits) * k_splits
    return blocks * per_block, k_splits, per_block


def padded_table_with(table, width, null):
    """int32 [B, width]: a block table widened to the kernel's width with entries naming
    page `null` (the zero page the model code appends past the cache's last one)."""
    table = np.asarray(table, dtype=np.int32)
    out = np.full((table.shape[0], int(width)), int(null), dtype=np.int32)
    out[:, :table.shape[1]] = table
    return out


# ---------------------------------------------------------------------------------------
# The model code: jax, numpy and math only from here to the end of the section
# (repro_snippet copies it with the index functions above).
# ---------------------------------------------------------------------------------------

def thd_to_padded(x, idx):
    """THD [T, H, D] (jax) -> the padded batch [B, S, H, D] by idx (pad_index): positions
    past a segment are 0."""
    import jax.numpy as jnp
    x = jnp.concatenate([x, jnp.zeros((1,) + tuple(x.shape[1:]), x.dtype)])
    return x[idx]


def dense_btnh(cfg, args):
    """q, k, v of a dense case as [B, S, H, D] (jax) from the call's first arguments, and
    the arguments left."""
    lay, hq, hkv, d, dv = cfg["layouts"], cfg["hq"], cfg["hkv"], cfg["d"], cfg["dv"]
    if cfg["packed"]:
        q, k, v = unpack_btnh(args[0], lay["q"], hq, d)
        return q, k, v, args[1:]
    return (to_btnh(args[0], lay["q"], hq, d), to_btnh(args[1], lay["k"], hkv, d),
            to_btnh(args[2], lay["v"], hkv, dv), args[3:])


def make_fn(cfg):
    """The attention function of one structure, jitted. Arguments: q, k, v (THD or page
    caches for a serving case; the dense tensors, or the packed QKV buffer alone, in their
    layouts) then the inputs cfg["inputs"] names (serving_arguments)."""
    import jax

    kind, names = cfg["kind"], cfg["inputs"]

    def fn(*args):
        if cfg["thd"] or cfg["paged"]:
            q, k, v, rest = args[0], args[1], args[2], args[3:]
            if not cfg["thd"]:   # a paged case's q travels dense, in its layout
                q = to_btnh(q, cfg["layouts"]["q"], cfg["hq"], cfg["d"])
        else:
            q, k, v, rest = dense_btnh(cfg, args)
        a = dict(zip(names, rest))
        if kind == "seqlens":
            return seqlens_attention(cfg, q, k, v, a)
        if kind == "segments":
            return segments_attention(cfg, q, k, v, a)
        if kind == "decode":
            return decode_attention_rows(cfg, q, k, v, a)
        return paged_attention_rows(cfg, q, k, v, a)

    return jax.jit(fn)


def seqlens_attention(cfg, q, k, v, a):
    """jax.nn.dot_product_attention on the padded batch with query_seq_lengths and
    key_value_seq_lengths; THD [Tq, Hq, Dv] (the valid rows) for a packed case, else the
    output in its layout."""
    import jax
    import jax.numpy as jnp
    if cfg["thd"]:
        q = thd_to_padded(q, a["q_index"])
        k = thd_to_padded(k, a["k_index"])
        v = thd_to_padded(v, a["k_index"])
    bias, mask, struct = a.get("mask"), a.get("bool_mask"), a.get("struct")
    if struct is not None:
        mask = struct if mask is None else jnp.logical_and(mask, struct)
    if cfg["implementation"] == "cudnn":
        # "Bias must have same seq length as QKV": bias and mask at full Sq x Sk
        bias, mask = full_qk(bias, q.shape[1], k.shape[1]), full_qk(mask, q.shape[1], k.shape[1])
    o = jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask, scale=cfg["scale_arg"], is_causal=cfg["is_causal"],
                                     query_seq_lengths=a["q_lens"], key_value_seq_lengths=a["kv_lens"],
                                     local_window_size=cfg["window_arg"], implementation=cfg["implementation"])
    if cfg["thd"]:
        return o[a["out_b"], a["out_s"]]
    return from_btnh(o, cfg["out_layout"])


def query_inputs(cfg, q, a):
    """The queries one per call row: THD [N, Hq, D] as they come for a packed case, else
    the dense [B, Sq, Hq, D] flattened batch-major."""
    if cfg["thd"]:
        return q
    return q.reshape((-1,) + tuple(q.shape[2:]))


def padded_keys(cfg, k, v, a):
    """K and V as a padded batch [B, Sk, Hkv, D] (THD gathered; dense as they are)."""
    if cfg["thd"]:
        return thd_to_padded(k, a["k_index"]), thd_to_padded(v, a["k_index"])
    return k, v


def rows_output(cfg, o):
    """The output of a call with one row per query [N, Hq, Dv]: THD as it is for a packed
    case, else [B, Sq, Hq, Dv] in the case's output layout."""
    if cfg["thd"]:
        return o
    return from_btnh(o.reshape((cfg["batch"], cfg["q_len"]) + tuple(o.shape[1:])), cfg["out_layout"])


def packed_sequence(x, T_pad):
    """THD rows x [T, H, D] as one sequence [1, T_pad, H, D] for mha: cut or zero-padded to
    T_pad. Q comes padded to the query capacity and K, V to the key capacity, which differ;
    their real tokens (as many: mha's segments serve both) come first, so each is cut or
    padded from its own length."""
    import jax.numpy as jnp
    x = x[:T_pad]
    return jnp.pad(x, ((0, T_pad - x.shape[0]), (0, 0), (0, 0)))[None]


def segments_attention(cfg, q, k, v, a):
    """pallas mha over one packed sequence [1, T_pad, H, D]: the segments (a dense case's
    batch rows) one after another, told apart by segment_ids, padding tokens of id -1;
    GQA's K and V heads repeated as callers of an MHA kernel do."""
    import jax.numpy as jnp
    from jax.experimental.pallas.ops.gpu import attention
    if not cfg["thd"]:   # dense rows of Sq == Sk tokens: each a segment
        q, k, v = (x.reshape((-1,) + tuple(x.shape[2:])) for x in (q, k, v))
    T, T_pad = q.shape[0], cfg["t_pad"]
    group = cfg["hq"] // cfg["hkv"]
    if group > 1:
        k, v = jnp.repeat(k, group, axis=1), jnp.repeat(v, group, axis=1)
    o = attention.mha(*(packed_sequence(x, T_pad) for x in (q, k, v)), a["segment_ids"][None], sm_scale=cfg["scale"],
                      causal=cfg["causal"], interpret=cfg["interpret"])
    o = o[0, :T]
    if cfg["thd"]:
        return o
    return from_btnh(o.reshape((cfg["batch"], cfg["q_len"]) + tuple(o.shape[1:])), cfg["out_layout"])


def decode_attention_rows(cfg, q, k, v, a):
    """pallas decode_attention.gqa with one call row per query: its row's padded K and V
    (Sk padded to the kernel's partitions), the key range [start, end); a sink z joins the
    softmax through the returned (l, m): out * l / (l + exp(z - m))."""
    import jax.numpy as jnp
    from jax.experimental.pallas.ops.gpu import decode_attention
    qf = query_inputs(cfg, q, a)
    kb, vb = padded_keys(cfg, k, v, a)
    extra = cfg["s_pad"] - kb.shape[1]
    kb = jnp.pad(kb, ((0, 0), (0, extra), (0, 0), (0, 0)))[a["row_b"]]
    vb = jnp.pad(vb, ((0, 0), (0, extra), (0, 0), (0, 0)))[a["row_b"]]
    sinks = "sinks" in a
    res = decode_attention.gqa(qf, kb, vb, start_idx=a["start"], kv_seq_len=a["end"], sm_scale=cfg["scale"],
                               block_k=cfg["block_k"], k_splits=cfg["k_splits"], interpret=cfg["interpret"],
                               return_residuals=sinks)
    if sinks:
        o, (l, m) = res
        w = l / (l + jnp.exp(a["sinks"].reshape(1, -1) - m))   # an empty row: l = 0, weight 0
        o = (o.astype(jnp.float32) * w[..., None]).astype(o.dtype)
    else:
        o = res
    return rows_output(cfg, o)


def paged_attention_rows(cfg, q, k, v, a):
    """pallas paged_attention with one call row per query: q scaled in its dtype (the API
    has no scale), the page caches head-major [Hkv, P + 1, page, D] (the case's, or the
    keys cut into DENSE_PAGE-token pages in order) with a zero page appended that the
    widened table's spare entries name, the query's row of the table and its length."""
    import jax.numpy as jnp
    from jax.experimental.pallas.ops.gpu import paged_attention
    qf = query_inputs(cfg, q, a)
    qf = (qf.astype(jnp.float32) * jnp.float32(cfg["scale"])).astype(qf.dtype)
    if cfg["paged"]:
        kc, vc = k, v                                               # [P, page, Hkv, D]
    else:
        kb, vb = padded_keys(cfg, k, v, a)
        ps, W = cfg["page_size"], cfg["width"]
        extra = W * ps - kb.shape[1]
        kc, vc = (jnp.pad(x, ((0, 0), (0, extra), (0, 0), (0, 0))).reshape((-1, ps) + tuple(x.shape[2:]))
                  for x in (kb, vb))
    kc = jnp.concatenate([kc, jnp.zeros((1,) + tuple(kc.shape[1:]), kc.dtype)])
    vc = jnp.concatenate([vc, jnp.zeros((1,) + tuple(vc.shape[1:]), vc.dtype)])
    kp, vp = jnp.transpose(kc, (2, 0, 1, 3)), jnp.transpose(vc, (2, 0, 1, 3))
    cap = cfg["softcap"] if cfg["softcap"] > 0 else None
    o = paged_attention.paged_attention(qf, kp, vp, a["table"][a["row_b"]], a["end"], k_splits=cfg["k_splits"],
                                        pages_per_compute_block=cfg["pages_per_block"], attn_logits_soft_cap=cap,
                                        interpret=cfg["interpret"])
    return rows_output(cfg, o)


def native_diagonal(case):
    """True when the diagonal offset is 0 for every row with queries in every value draw
    of the case's compile key: a packed case's lengths are part of the key, so its own
    offsets decide; a dense one's as _common.offset_zero_always."""
    if not case.thd:
        return _common.offset_zero_always(case)
    return all(int(case.diag_offset[b]) == 0 for b in range(case.batch) if case.seg_q(b) > 0)


def config(case, mask, bool_mask, variant, interpret=False):
    """The static structure of one case (what a recompile depends on) as plain values."""
    kind = KINDS[variant]
    lay = dict(case.layouts)
    left, right = case.window
    native = native_diagonal(case)
    cfg = {"kind": kind, "variant": variant, "implementation": "cudnn" if variant == "cudnn_seqlens" else "xla",
           "layouts": lay, "packed": case.packed, "thd": case.thd, "paged": case.paged,
           "out_layout": _common.OUT_LAYOUT[lay["q"]], "batch": case.batch, "q_len": case.q_len,
           "hq": case.q_heads, "hkv": case.kv_heads, "d": case.head_dim, "dv": case.v_head_dim,
           "scale": float(case.scale), "scale_arg": float(case.scale) if case.scale_given else None,
           "softcap": float(case.softcap), "is_causal": False, "window_arg": None, "causal": bool(case.causal),
           "precision": "default" if (case.allow_tf32 and case.dtype == "f32") else "highest",
           "device": None if (variant == "xla_seqlens" or interpret) else "gpu", "interpret": bool(interpret),
           # capacities, so that a structure's shapes do not depend on the lengths: THD rows
           # (and call rows) padded to B * Sq, THD keys to B * Sk
           "rows": case.batch * case.q_len, "keys": case.batch * case.kv_len}
    inputs = []
    if kind == "seqlens":
        if mask is not None:
            inputs.append("mask")
        if bool_mask is not None:
            inputs.append("bool_mask")
        if native and (left >= 0 or right >= 0):
            big = case.q_len + case.kv_len
            # causal caps the right side at 0: the same keys, and what cudnn takes with seq lengths
            r = 0 if case.causal else (right if right >= 0 else big)
            cfg["window_arg"] = (left if left >= 0 else big, r)
            # cudnn with seq lengths (its PADDING mask types) takes only a right window of 0,
            # and a window only for Sq <= Sk: otherwise the structural masks go in the mask
            if variant == "cudnn_seqlens" and (cfg["window_arg"][1] != 0 or case.q_len > case.kv_len):
                cfg["window_arg"], native = None, False
        cfg["is_causal"] = bool(case.causal) and native
        if masks.has_structural(case) and not native:
            inputs.append("struct")
        inputs += ["q_lens", "kv_lens"]
        if case.thd:
            inputs += ["q_index", "k_index", "out_b", "out_s"]
    elif kind == "segments":
        cfg["t_pad"] = segments_length(cfg["rows"])
        inputs.append("segment_ids")
    else:
        if case.thd:
            inputs.append("k_index")
        inputs += ["row_b", "start", "end"]
        if kind == "decode":
            cfg["s_pad"], cfg["k_splits"], cfg["block_k"] = decode_geometry(case.kv_len)
            if "sinks" in case.forms:
                inputs.append("sinks")
        else:
            ps = case.page_size if case.paged else DENSE_PAGE
            width = max(1, -(-case.kv_len // ps))
            # the case's cache has at most B * width pages and its null page; a dense case's
            # keys make B * width pages
            cfg["page_size"], cfg["width"], cfg["pages"] = ps, width, case.batch * width + int(case.paged)
            cfg["table_width"], cfg["k_splits"], cfg["pages_per_block"] = paged_geometry(width, ps)
            inputs.append("table")
    cfg["inputs"] = inputs
    return cfg


def pad_rows(x, n):
    """x with zero rows appended along its first axis up to n rows."""
    x = np.asarray(x)
    if x.shape[0] >= n:
        return x
    return np.concatenate([x, np.zeros((n - x.shape[0],) + x.shape[1:], dtype=x.dtype)])


def serving_arguments(req, cfg):
    """The inputs of the jitted function from a request, in order, as contiguous numpy
    arrays: THD tensors, call rows and page caches padded to the structure's capacities
    (zeros; rows past the lengths come back unused)."""
    case, q, k, v = req.case, req.q, req.k, req.v
    lens = segment_lengths(case)
    if cfg["paged"]:
        q = pad_rows(q, cfg["rows"]) if cfg["thd"] else q
        args = [q, pad_rows(k, cfg["pages"]), pad_rows(v, cfg["pages"])]
    elif cfg["thd"]:
        args = [pad_rows(q, cfg["rows"]), pad_rows(k, cfg["keys"]), pad_rows(v, cfg["keys"])]
    else:
        args = [req.qkv] if case.packed else [q, k, v]
    rows = None
    for n in cfg["inputs"]:
        if n == "mask":
            args.append(req.mask)
        elif n == "bool_mask":
            args.append(req.bool_mask)
        elif n == "struct":
            args.append(_common.structural_allowed(case))
        elif n == "q_lens":
            args.append(np.asarray([a for a, _ in lens], dtype=np.int32))
        elif n == "kv_lens":
            args.append(np.asarray([b for _, b in lens], dtype=np.int32))
        elif n == "q_index":
            args.append(pad_index([a for a, _ in lens], case.q_len))
        elif n == "k_index":
            args.append(pad_index([b for _, b in lens], case.kv_len))
        elif n in ("out_b", "out_s"):
            args.append(pad_rows(thd_rows([a for a, _ in lens])[0 if n == "out_b" else 1], cfg["rows"]))
        elif n == "segment_ids":
            args.append(segment_ids([a for a, _ in lens] if case.thd else [case.q_len] * case.batch, cfg["t_pad"]))
        elif n in ("row_b", "start", "end"):
            if rows is None:   # padding rows: batch row 0, no key
                rows = query_rows(case)
                rows = tuple(pad_rows(x, cfg["rows"]) for x in (rows[0],) + key_bounds(case, *rows))
            args.append(rows[("row_b", "start", "end").index(n)])
        elif n == "sinks":
            args.append(np.asarray(req.sinks, dtype=np.float32))
        elif n == "table":
            if case.paged:
                tab = np.asarray(req.tables["block_table"], dtype=np.int32)
            else:
                tab = np.arange(cfg["pages"], dtype=np.int32).reshape(case.batch, cfg["width"])
            # spare entries: the zero page the model code appends past the (padded) cache
            args.append(padded_table_with(tab, cfg["table_width"], cfg["pages"]))
        else:
            raise ValueError("serving_arguments: unknown input %r" % (n,))
    return [np.ascontiguousarray(x) for x in args]


def call(fn, args, cfg):
    """Runs the jitted function under the case's matmul precision on its device; the
    output as numpy."""
    import jax
    import numpy as np
    dev = jax.devices(cfg["device"])[0] if cfg["device"] else jax.devices()[0]
    with jax.default_matmul_precision(cfg["precision"]), jax.default_device(dev):
        res = fn(*args)
        jax.block_until_ready(res)
    return np.asarray(res)


def no_query_rows(case):
    """True for a packed case without a single query: nothing to call (a kernel of batch 0
    is not a serving call); its THD output is empty."""
    return case.thd and sum(case.seg_q(b) for b in range(case.batch)) == 0


# ---------------------------------------------------------------------------------------
# The worker side.
# ---------------------------------------------------------------------------------------

_BASE = ["f32", "f16", "bf16", "gqa", "scale", "causal", "strided", "tf32"]


class ServingTarget(_base.Target):
    """A serving variant of the jax stack (its declaration in attnfuzz.targets.jax names this
    class)."""
    STACK = STACK
    LAZY_COMPILE = True
    SCORE_BUDGET = True      # xla_seqlens forms the [B, Hq, Sq, Sk] scores

    def __init__(self, variant, interpret=None):
        self.kind = KINDS[variant]
        self.pallas = variant.startswith("pallas_")
        self.interpret = bool(self.pallas and (interpret_mode() if interpret is None else interpret))
        super().__init__(variant)

    def libs(self):
        return dict(super().libs(), **_common.jax_libs(_has_gpu()))

    def declare(self):
        conv = {"masked_values": "ieee", "denormals": "flush"}
        limits = {"max_bytes": 64 << 20}
        if self.kind == "seqlens":
            caps = _BASE + ["cross", "amask", "bmask", "padding", "window", "mask_dtype"]
            if self.variant == "cudnn_seqlens":
                # cuDNN flash attention: f16/bf16, head dims multiples of 8 up to 256 (Hopper);
                # the boolean mask becomes a finite bias (as jax/cudnn): fully masked rows
                # per dtype as there; an Inf score of a masked key stays Inf, its row NaN
                caps = [c for c in caps if c != "f32"]
                conv["masked_rows"] = dict(CUDNN_MASKED_ROWS)
                conv["masked_keys"] = "ieee"
                limits.update(max_head_dim=256, head_dim_multiple=8)
            else:
                # masked logits are -0.7 * finfo.max: a fully masked row is a mean of V; jit of
                # dot_product_attention on f16 fails to compile on a CPU (jax/xla's finding)
                conv["masked_rows"] = "mean"
                if not _has_gpu():
                    caps = [c for c in caps if c != "f16"]
        elif self.kind == "segments":
            # segment ids serve queries and keys alike: self-attention segments only (no
            # cross), no key padding; an MHA kernel (D == Dv)
            caps = list(_BASE)
            limits.update(max_head_dim=256)
        else:
            caps = _BASE + ["cross", "padding", "window"] + (["softcap"] if self.kind == "paged" else [])
            limits.update(max_head_dim=256, head_dim_multiple=16, max_q_len=DECODE_MAX_Q)
            if self.kind == "decode":
                conv["masked_keys"] = "ieee"   # its mask is added to the scores
        return {"caps": caps, "limits": limits, "conventions": conv}

    def refuse(self, req):
        from attnfuzz.worker import Unsupported
        case = req.case
        name = "jax/" + self.variant
        if self.kind == "segments":
            if case.head_dim < 16:
                raise Unsupported("%s: head_dim %d under 16 (Triton's dot)" % (name, case.head_dim))
            if case.causal and not all(int(case.diag_offset[b]) == 0 for b in range(case.batch) if case.seg_q(b)):
                raise Unsupported("%s: mha's causal mask is the offset-0 diagonal of each segment" % name)
        if self.kind in ("decode", "paged") and not (is_pow2(case.head_dim) and case.head_dim >= 16):
            raise Unsupported("%s: head_dim %d is not a power of two from 16 (Triton blocks)" % (name, case.head_dim))
        if self.kind == "paged":
            if case.paged and not is_pow2(case.page_size):
                raise Unsupported("%s: page_size %d is not a power of two (Triton blocks)" % (name, case.page_size))
            start, end = key_bounds(case, *query_rows(case))
            if np.any((start > 0) & (end > start)):
                raise Unsupported("%s: paged_attention takes a length per row, not a key range starting past 0 "
                                  "(a window's left side, a causal diagonal with a negative offset)" % name)

    def structure(self, req):
        # the inputs' shapes are the dense ones and the capacities (not the lengths): one
        # jitted function serves every draw of lengths whose static choices (a packed case's
        # native diagonal, the inputs it needs) are the same, all of them in its config
        case, mask, bool_mask = req.case, req.mask, req.bool_mask
        cfg = config(case, mask, bool_mask, self.variant, self.interpret)
        return (_base.dense_structure(case, mask, bool_mask), tuple(sorted(case.forms)), repr(sorted(cfg.items())))

    def build(self, req):
        cfg = config(req.case, req.mask, req.bool_mask, self.variant, self.interpret)
        return make_fn(cfg), cfg

    def execute(self, art, req):
        from attnfuzz.worker import Result
        case = req.case
        fn, cfg = art
        if no_query_rows(case):
            return Result(np.zeros((0, case.q_heads, case.v_head_dim), dtype=np.float32), layout="thd")
        # the structure fixes everything but the values; lengths, key ranges and tables are inputs
        out = call(fn, serving_arguments(req, cfg), cfg)
        if case.thd:   # the valid THD rows: the first Tq of the padded ones
            return Result(out[:sum(case.seg_q(b) for b in range(case.batch))], layout="thd")
        return Result(out, layout=cfg["out_layout"])

    def refusal(self, exc):
        """cuDNN's refusals of a shape (NotImplementedError, "cuDNN doesn't support ...",
        "... is only supported with ..."), and a pallas kernel whose blocks need more shared
        memory than the GPU has (RESOURCE_EXHAUSTED at compile: a page of 1024 f32 rows is
        1 MiB; the H100 has 228 KiB a block), a limit the kernel states cleanly; nothing
        else: XLA's and the pallas kernels' other errors on a case the variant declared are
        findings."""
        msg = str(exc).strip()
        if self.variant.startswith("pallas_") and "RESOURCE_EXHAUSTED: Shared memory size limit exceeded" in msg:
            return "jax/%s: %s" % (self.variant, msg.splitlines()[0][:300])
        if self.variant != "cudnn_seqlens":
            return None
        if isinstance(exc, NotImplementedError) or "doesn't support" in msg or "only supported" in msg:
            return "jax/%s: %s" % (self.variant, msg.splitlines()[0][:300] if msg else type(exc).__name__)
        return None


def repro_snippet(variant):
    """Standalone source of `attention(req)` for a serving variant (the request's tables on
    req.tables, as the worker kit puts them)."""
    KINDS[variant]
    return _common.snippet(
        ["import jax", "import jax.numpy as jnp"],
        (to_btnh, unpack_btnh, from_btnh, full_qk, segment_lengths, pad_index, thd_rows, query_rows, key_bounds,
         next_pow2, segment_ids, segments_length, packed_sequence, decode_geometry, paged_geometry, padded_table_with, thd_to_padded,
         dense_btnh, make_fn, seqlens_attention, query_inputs, padded_keys, rows_output, segments_attention,
         decode_attention_rows, paged_attention_rows, native_diagonal, config, pad_rows, serving_arguments, call),
        consts={"VARIANT": variant, "KINDS": KINDS, "DENSE_PAGE": DENSE_PAGE, "INTERPRET": interpret_mode()},
        namespaces={"serving": [serving.cu_seqlens]},
        tail='''

def attention(req):
    """req.q, req.k, req.v as the worker kit hands them (THD or page caches for a serving
    case, its tables on req.tables). Returns the output as [B, Hq, Sq, Dv] (rows past a
    packed segment 0)."""
    case = req.case
    cfg = config(case, req.mask, req.bool_mask, VARIANT, INTERPRET)
    B, Hq, Sq, Dv = case.batch, case.q_heads, case.q_len, case.v_head_dim
    full = np.zeros((B, Hq, Sq, Dv))
    if case.thd and sum(case.seg_q(b) for b in range(B)) == 0:
        return full
    out = call(make_fn(cfg), serving_arguments(req, cfg), cfg)
    if not case.thd:
        return layouts.to_bhsd(out, cfg["out_layout"], Hq, Dv)
    cu = serving.cu_seqlens([case.seg_q(b) for b in range(B)])
    for b in range(B):
        full[b, :, :cu[b + 1] - cu[b]] = out[cu[b]:cu[b + 1]].transpose(1, 0, 2)
    return full
''')
