"""The serving forms of docs/design.md section 2 ("Serving forms") in numpy: per-row lengths,
the physical tensors a worker receives (THD with cu_seqlens, page caches with a block
table), sink logits and ALiBi slopes, and the way back to the padded canonical view.

Everything here is a pure function of the case and the canonical values, bit for bit what
src/core/inputs_serving.c builds (docs/worker-protocol.md lists the tensors):

    t = physical(case, q, k, v)                  # canonical [B, H, S, D] -> the run's tensors
    q, k, v = gather(case, t)                    # and back: the padded canonical view
    sinks(case), slopes(case), block_table(case) # from the case's seeds

A worker gets these tensors in its run request (attnfuzz.request.Request's tables);
physical() is for tests, repro scripts and bundles, which start from canonical arrays.
This module imports numpy and math only."""

import math

import numpy as np

from . import layouts, rng

FORMS = ("packed", "paged", "sinks", "alibi")
TABLES = ("cu_seqlens_q", "cu_seqlens_k", "seqlens_k", "block_table", "sinks", "alibi_slopes")

_STREAM_PAGES, _STREAM_SINKS, _STREAM_ALIBI, _STREAM_POISON = 0x50414745, 0x53494E4B, 0x414C4942, 0x504F4953


def _philox_at(seed, stream, index):
    """af_philox_at: the four words of block index of stream under seed (ints)."""
    w = rng.philox4x32((index & 0xFFFFFFFF, index >> 32, stream, 0x41465A5A), (seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF))
    return [int(x) for x in w]


def _u53(hi, lo):
    return float((((hi << 21) ^ (lo >> 11)) & ((1 << 53) - 1))) * 2.0 ** -53


# --- per-row lengths ------------------------------------------------------------------------


def seg_q(case, b):
    """Queries of row b: q_lens[b] in a packed case, else q_len."""
    return min(case.q_lens[b], case.q_len) if case.thd else case.q_len


def seg_k(case, b):
    """Keys of row b: kv_lens[b] with a packed or paged form, else kv_len."""
    return min(case.kv_lens[b], case.kv_len) if case.kv_lens is not None else case.kv_len


def pages(case, b):
    """Pages row b's keys take (paged)."""
    return -(-seg_k(case, b) // case.page_size) if case.paged else 0


def shared(case, b):
    """Leading full pages row b > 0 shares with row 0."""
    if b == 0 or not case.paged:
        return 0
    return min(case.shared_pages, seg_k(case, 0) // case.page_size, seg_k(case, b) // case.page_size)


def page_count(case):
    """(P, W): the cache's pages (every row's own, shared ones once, the null page) and the
    block table's width (at least 1)."""
    total = sum(pages(case, b) - shared(case, b) for b in range(case.batch))
    width = max([pages(case, b) for b in range(case.batch)] + [1])
    return total + 1, width


def poison_reach(case, b):
    """Can a kernel that reads row b's whole pages, or its block table's whole width, reach
    poison(case): its last page's unused slots, or table entries past its pages (the null
    page)? A kernel that multiplies masked keys' values (masked_values "ieee") may give NaN
    there (af_ref_poison_reach)."""
    return case.paged and (pages(case, b) < page_count(case)[1] or pages(case, b) * case.page_size > seg_k(case, b))


def cu_seqlens(lens):
    """int32 prefix sums [0, l0, l0 + l1, ...]."""
    return np.concatenate([[0], np.cumsum(np.asarray(lens, dtype=np.int64))]).astype(np.int32)


def split_kv(case):
    """Does the case take the split-KV (decode) path: at most 16 queries per row against
    more than 256 keys in some row (af_case_split_kv)?"""
    return case.q_len <= 16 and any(seg_k(case, b) > 256 for b in range(case.batch))


def poison(case):
    """The value a paged case's null page and the unused tail of each row's last page hold
    (af_serving_poison): NaN, +Inf or -Inf as word 0 of philox(page_seed, POISON, 0) % 8 is
    0..5, 6 or 7. An honest kernel never reads those slots."""
    w = _philox_at(case.page_seed, _STREAM_POISON, 0)[0] % 8
    return math.inf if w == 6 else -math.inf if w == 7 else math.nan


# --- the tables -------------------------------------------------------------------------------


def block_table(case):
    """(int32 [B, W] table, int32 [P] page ids, null page): the fresh pages of (row, page) in
    order take the ids of a Fisher-Yates shuffle of 0..P-1 drawn from page_seed, a shared page
    row 0's id, unused entries the null page (the shuffle's last id)."""
    P, W = page_count(case)
    ids = list(range(P))
    for k in range(P - 1, 0, -1):
        j = _philox_at(case.page_seed, _STREAM_PAGES, k)[0] % (k + 1)
        ids[k], ids[j] = ids[j], ids[k]
    null = ids[P - 1]
    tab = np.full((case.batch, W), null, dtype=np.int32)
    fresh = 0
    for b in range(case.batch):
        for p in range(pages(case, b)):
            if p < shared(case, b):
                tab[b, p] = tab[0, p]
            else:
                tab[b, p] = ids[fresh]
                fresh += 1
    return tab, np.asarray(ids, dtype=np.int32), null


def sinks(case, dtype_of=None):
    """float32 [Hq]: z_h = sqrt(-2 ln(1 - u1)) cos(2 pi u2) 10^(mag / 4), rounded to the case
    dtype."""
    dtype_of = dtype_of or _dtype_of
    mag = 10.0 ** (case.sink_mag_q4 / 4.0)
    z = np.empty(case.q_heads, dtype=np.float64)
    for h in range(case.q_heads):
        w = _philox_at(case.sink_seed, _STREAM_SINKS, h)
        u1, u2 = _u53(w[0], w[1]), _u53(w[2], w[3])
        z[h] = math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2.0 * math.pi * u2) * mag
    return z.astype(dtype_of(case.dtype)).astype(np.float32)


def slopes(case):
    """float32 [Hq]: the geometric ALiBi slopes (2^(-8 (h + 1) / m) for h < m, then
    2^(-4 (2 (h - m) + 1) / m), m the largest power of two <= Hq), or random ones
    u * 10^(mag / 4)."""
    H = case.q_heads
    m = 1
    while m * 2 <= H:
        m *= 2
    out = np.empty(H, dtype=np.float64)
    mag = 10.0 ** (case.alibi_mag_q4 / 4.0)
    for h in range(H):
        if case.alibi_random:
            w = _philox_at(case.alibi_seed, _STREAM_ALIBI, h)
            out[h] = _u53(w[0], w[1]) * mag
        elif h < m:
            out[h] = 2.0 ** (-8.0 * (h + 1) / m)
        else:
            out[h] = 2.0 ** (-4.0 * (2 * (h - m) + 1) / m)
    return out.astype(np.float32)


def alibi_bias(case, b, h, i0, i1, slope=None):
    """float64 [i1 - i0, Sk]: ALiBi's bias of rows i0 .. i1 - 1 of (b, h): -slope (d - j), or
    -slope |d - j| for the symmetric form, d = i + diag_offset[b]."""
    if slope is None:
        slope = float(slopes(case)[h])
    d = np.arange(i0, i1, dtype=np.float64).reshape(-1, 1) + case.diag_offset[b]
    dist = d - np.arange(case.kv_len, dtype=np.float64).reshape(1, -1)
    return -float(slope) * (np.abs(dist) if case.alibi_symmetric else dist)


# --- physical tensors ---------------------------------------------------------------------------


def _strided(shape, dtype, perm, pad):
    if 0 in shape:
        return np.empty(shape, dtype)
    return layouts.strided_empty(shape, dtype, perm, pad)


def share(case, k, v):
    """(k, v) with the last page's unused slots of each row (within kv_len) holding
    poison(case), and row 0's keys and values of the shared pages copied into each row
    sharing them (af_serving_share: a shared page holds one copy, so the padded views must
    agree with the cache)."""
    k, v = np.array(k, copy=True), np.array(v, copy=True)
    if case.paged:
        fill = poison(case)
        for b in range(case.batch):
            end = min(pages(case, b) * case.page_size, case.kv_len)
            k[b, :, seg_k(case, b):end] = fill
            v[b, :, seg_k(case, b):end] = fill
    for b in range(1, case.batch):
        n = shared(case, b) * case.page_size
        k[b, :, :n] = k[0, :, :n]
        v[b, :, :n] = v[0, :, :n]
    return k, v


def physical(case, q, k, v, dtype_of=None):
    """{name: array} of a serving case's tensors as attnfuzz sends them, from canonical
    q [B, Hq, Sq, D], k, v (padded views; what lies past a row's lengths is never read: a
    cache's null page and page tails hold poison(case);
    rows sharing pages must hold row 0's values there: share()):
    q (THD [Tq, Hq, D] when packed), k and v (the caches [P, page_size, Hkv, D] when paged,
    THD when packed), and the tables TABLES the case has. A tensor in its dense form (q of a
    paged case) is not included: attnfuzz.layouts.physical_inputs makes it."""
    dtype_of = dtype_of or _dtype_of
    dt = dtype_of(case.dtype)
    spec = case.specs
    out = {}
    canon = {"q": np.asarray(q), "k": np.asarray(k), "v": np.asarray(v)}
    heads = {"q": case.q_heads, "k": case.kv_heads, "v": case.kv_heads}
    dims = {"q": case.head_dim, "k": case.head_dim, "v": case.v_head_dim}
    B = case.batch
    if case.thd:
        qs = [seg_q(case, b) for b in range(B)]
        out["cu_seqlens_q"] = cu_seqlens(qs)
        out["cu_seqlens_k"] = cu_seqlens([seg_k(case, b) for b in range(B)])
        x = _strided((sum(qs), heads["q"], dims["q"]), dt, spec["q"]["perm"] % 6, spec["q"]["pad"])
        for b in range(B):
            c0 = int(out["cu_seqlens_q"][b])
            x[c0:c0 + qs[b]] = canon["q"][b, :, :qs[b]].transpose(1, 0, 2).astype(dt)
        out["q"] = x
    if case.kv_lens is not None:
        out["seqlens_k"] = np.asarray([seg_k(case, b) for b in range(B)], dtype=np.int32)
    if case.paged:
        tab, _, null = block_table(case)
        P, W = page_count(case)
        ps = case.page_size
        fill = poison(case)
        for n in ("k", "v"):
            x = _strided((P, ps, heads[n], dims[n]), dt, spec[n]["perm"] % 24, spec[n]["pad"])
            x[null] = fill
            for b in range(B):
                slots, m = pages(case, b) * ps, seg_k(case, b)
                full = np.full((slots, heads[n], dims[n]), fill)
                full[:m] = canon[n][b, :, :m].transpose(1, 0, 2)
                for p in range(pages(case, b)):
                    x[tab[b, p]] = full[p * ps:(p + 1) * ps].astype(dt)
            out[n] = x
        out["block_table"] = tab
    elif case.thd:
        for n in ("k", "v"):
            ks = [seg_k(case, b) for b in range(B)]
            x = _strided((sum(ks), heads[n], dims[n]), dt, spec[n]["perm"] % 6, spec[n]["pad"])
            for b in range(B):
                c0 = int(out["cu_seqlens_k"][b])
                x[c0:c0 + ks[b]] = canon[n][b, :, :ks[b]].transpose(1, 0, 2).astype(dt)
            out[n] = x
    if "sinks" in case.forms:
        out["sinks"] = sinks(case, dtype_of)
    if "alibi" in case.forms:
        out["alibi_slopes"] = slopes(case)
    return out


def gather(case, t):
    """The padded canonical q [B, Hq, Sq, D], k [B, Hkv, Sk, D], v [B, Hkv, Sk, Dv] (float64)
    read from a serving case's physical tensors t ({name: array}: q, k, v and the tables, as
    a run request carries them; a dense one in the case's layout): rows past a segment's
    lengths are 0. THD rows are found through cu_seqlens, cache slots through the block
    table, as a kernel finds them. A tensor missing from t comes back None."""
    lay = case.layouts
    B = case.batch
    shapes = {"q": (case.q_heads, case.q_len, case.head_dim), "k": (case.kv_heads, case.kv_len, case.head_dim),
              "v": (case.kv_heads, case.kv_len, case.v_head_dim)}
    out = {}
    for n in ("q", "k", "v"):
        if n not in t:
            out[n] = None
            continue
        H, S, D = shapes[n]
        x = np.asarray(t[n])
        if n == "q" and case.thd:
            y = np.zeros((B, H, S, D))
            cu = np.asarray(t["cu_seqlens_q"])
            for b in range(B):
                m = int(cu[b + 1] - cu[b])
                y[b, :, :m] = np.asarray(x[cu[b]:cu[b + 1]], dtype=np.float64).transpose(1, 0, 2)
        elif n != "q" and case.paged:
            y = np.zeros((B, H, S, D))
            tab, ps = np.asarray(t["block_table"]), case.page_size
            for b in range(B):
                m = int(np.asarray(t["seqlens_k"])[b])
                j = np.arange(m)
                y[b, :, :m] = np.asarray(x[tab[b, j // ps], j % ps], dtype=np.float64).transpose(1, 0, 2)
        elif n != "q" and case.thd:
            y = np.zeros((B, H, S, D))
            cu = np.asarray(t["cu_seqlens_k"])
            for b in range(B):
                m = int(cu[b + 1] - cu[b])
                y[b, :, :m] = np.asarray(x[cu[b]:cu[b + 1]], dtype=np.float64).transpose(1, 0, 2)
        else:
            y = np.asarray(layouts.to_bhsd(x, lay[n], H, D), dtype=np.float64)
        out[n] = y
    return out["q"], out["k"], out["v"]


def _dtype_of(name):
    if name == "bf16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype({"f32": np.float32, "f16": np.float16, "f64": np.float64}[name])


def padded_out(case, out, layout):
    """A result's out as [B, Hq, Sq, Dv] the way attnfuzz reads it: THD rows (layout "thd")
    scattered to their segments, a padded view as it is; a packed case's rows past a segment
    0 either way (they do not exist)."""
    out = np.asarray(out)
    if layout == "thd":
        full = np.zeros((case.batch, case.q_heads, case.q_len, case.v_head_dim), dtype=out.dtype)
        cu = cu_seqlens([seg_q(case, b) for b in range(case.batch)])
        for b in range(case.batch):
            full[b, :, :cu[b + 1] - cu[b]] = out[cu[b]:cu[b + 1]].transpose(1, 0, 2)
        return full
    full = np.array(layouts.to_bhsd(out, layout, case.q_heads, case.v_head_dim))
    if case.thd:
        for b in range(case.batch):
            full[b, :, seg_q(case, b):] = 0
    return full

