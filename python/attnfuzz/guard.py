"""Guard bands: NaN margins around the buffers a target hands a kernel to write, checked after
the run (docs/adding-a-target.md, "Guard bands"; docs/worker-protocol.md, the result's
guard_writes).

    g = guard.numpy_out(shape, np.float32)           # or guard.torch_out(shape, dtype, device)
    kernel(q, k, v, out=g.inner)                       # the kernel writes the inner view only
    return Result(g.inner, guard_writes=guard.writes(g))

The inner view starts as zeros (what torch.zeros or np.zeros would hand the kernel). A band is
MARGIN elements before and after the output, filled with a NaN whose payload no
arithmetic produces (a kernel that writes NaN there is seen too: the bits are compared, not the
values). writes() lists each band that changed as {"buffer", "margin", "offset", "count"}: the
element offset of the first changed element from the band's lowest address, and how many
changed; at most MAX_WRITES entries.

A paged cache the kernel is handed (guard.pages) is checked the same way: its null page and
the unused tail of each row's last page (attnfuzz.serving.poison fills them) must hold the
bits they held before the run; the tails count as one band, rows in order, each tail's slots,
heads and dims in memory order.

This module imports numpy only; torch when a torch buffer is asked for."""

import numpy as np

MARGIN = 256
MAX_WRITES = 8

# quiet NaNs with a payload (sign 0, quiet bit set): the bits of one element, by dtype name
_PATTERNS = {"float64": 0x7FFA5A5A5A5A5A5A, "float32": 0x7FE5A5A5, "float16": 0x7E5A, "bfloat16": 0x7FDA}


def _pattern(name, size):
    bits = _PATTERNS.get(name)
    if bits is None:
        raise TypeError("guard bands take float16, bfloat16, float32 or float64 buffers, not %s" % name)
    return np.frombuffer(int(bits).to_bytes(size, "little"), dtype=np.uint8)


def _changed(rows, want):
    """Indices of the rows ([n, size] uint8) that differ from want ([size] uint8)."""
    return np.flatnonzero(np.any(rows != want, axis=1))


def _entry(buffer, margin, idx):
    return {"buffer": buffer, "margin": margin, "offset": int(idx[0]), "count": int(idx.size)}


class Guarded:
    """An output buffer inside two bands. inner: the view a kernel writes (contiguous, the
    asked shape and dtype); name: the buffer's name in guard_writes ("out", "lse", "dq"...)."""

    def __init__(self, name, inner, n, size, dtype_name, read_bytes):
        self.name = name
        self.inner = inner
        self._n = n
        self._size = size
        self._want = _pattern(dtype_name, size)
        self._read = read_bytes  # () -> uint8 numpy array of the whole buffer, bands included

    def writes(self):
        """[{"buffer", "margin", "offset", "count"}] for each band that changed: "before",
        "after"."""
        rows = self._read().reshape(-1, self._size)
        out = []
        for margin, part in (("before", rows[:MARGIN]), ("after", rows[MARGIN + self._n:])):
            idx = _changed(part, self._want)
            if idx.size:
                out.append(_entry(self.name, margin, idx))
        return out


def numpy_out(shape, dtype, name="out"):
    """A numpy buffer of shape and dtype (numpy's, or ml_dtypes' bfloat16) inside bands; the
    inner view is C-contiguous and starts MARGIN elements in (64-byte aligned whenever the
    allocation is, for elements of 2 bytes or more)."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    flat = np.empty(MARGIN + n + MARGIN, dtype=dt)
    flat.view(np.uint8).reshape(-1, dt.itemsize)[:] = _pattern(dt.name, dt.itemsize)
    inner = flat[MARGIN:MARGIN + n].reshape(shape)
    inner[...] = 0
    return Guarded(name, inner, n, dt.itemsize, dt.name, lambda: flat.view(np.uint8))


def torch_out(shape, dtype, device="cpu", name="out"):
    """A torch buffer of shape and dtype on device inside bands (CPU or CUDA); the inner view
    is contiguous. Its bands are read back to the host after the run (a CUDA buffer is
    synchronized by the copy)."""
    import torch
    n = 1
    for s in shape:
        n *= int(s)
    flat = torch.empty(MARGIN + n + MARGIN, dtype=dtype, device=device)
    size = flat.element_size()
    name_of = str(dtype).replace("torch.", "")
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[size]
    bits = int.from_bytes(_pattern(name_of, size).tobytes(), "little", signed=True)
    flat.view(ints).fill_(bits)
    inner = flat[MARGIN:MARGIN + n].view(tuple(shape))
    inner.zero_()

    def read():
        return flat.detach().view(torch.uint8).cpu().numpy()

    return Guarded(name, inner, n, size, name_of, read)


class _Pages:
    """A paged cache's null page and page tails, snapshotted when made (guard.pages)."""

    def __init__(self, name, null, tails, read):
        self.name = name
        self._read = read
        self._null, self._tails = null, tails
        self._before = self._regions()

    def _regions(self):
        x = self._read()  # uint8 [P, page_size, H, D, size]
        null = x[self._null].reshape(-1, x.shape[-1])
        tails = [x[p, s:].reshape(-1, x.shape[-1]) for p, s in self._tails]
        tails = np.concatenate(tails) if tails else np.zeros((0, x.shape[-1]), np.uint8)
        return null, tails

    def writes(self):
        """[{"buffer", "margin": "null_page" or "page_tail", "offset", "count"}]."""
        out = []
        for margin, now, was in zip(("null_page", "page_tail"), self._regions(), self._before):
            idx = np.flatnonzero(np.any(now != was, axis=1))
            if idx.size:
                out.append(_entry(self.name, margin, idx))
        return out


def pages(case, name, cache, block_table):
    """The null page and the unused page tails of a paged cache ([P, page_size, H, D], numpy
    or torch, the kernel's own copy) as bands, remembered now: call before the run, writes()
    after. block_table: the case's int32 [B, W] table (the request's)."""
    from . import serving
    tab = np.asarray(block_table)
    null = int(serving.block_table(case)[2])
    tails = []
    for b in range(case.batch):
        n, ps = serving.seg_k(case, b), case.page_size
        if n % ps:
            tails.append((int(tab[b, n // ps]), n % ps))
    if isinstance(cache, np.ndarray):
        def read():
            c = np.array(cache, order="C")  # a copy: the snapshot must not follow the cache
            return c.view(np.uint8).reshape(c.shape + (c.itemsize,))
    else:
        def read():
            c = cache.detach().contiguous()
            return c.view(__import__("torch").uint8).cpu().numpy().reshape(tuple(c.shape) + (c.element_size(),))
    return _Pages(name, null, tails, read)


def writes(*guards):
    """The guard_writes of a result: the writes of each guard (Guarded or pages) in order, at
    most MAX_WRITES entries."""
    out = []
    for g in guards:
        out += g.writes()
    return out[:MAX_WRITES]
