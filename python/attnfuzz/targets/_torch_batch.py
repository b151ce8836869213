"""A batch frame's inputs on the GPU in one host-to-device copy.

A CUDA worker that uploaded each tensor of each case with its own `.to("cuda")` paid a
pageable copy and its synchronization per tensor, several times a case (on an H100 host,
about a fifth of a millisecond each: most of a small case's time). `Staging.upload` copies
the spans of every input of a batch (q, k, v or the packed buffer, the masks, dO) into one
pinned host buffer, each span at a 256-byte boundary (the alignment a tensor of its own
would get from the CUDA allocator, so that a kernel's alignment checks see what they saw
before), sends that buffer in one copy, and hands the cases device views with the physical
inputs' shapes and element strides (stride-0 and permuted views included). `to_torch`
returns a device tensor it is given as it is, so the module code (and the repro snippets,
which get numpy arrays) does not change. ATTNFUZZ_TORCH_STAGING=0 in a worker's environment
turns it off (each tensor copied alone, as before), to compare.

The way back: `Download.fetch` brings every device tensor of a batch's results (outputs,
gradients, keep masks) into one pinned host buffer with asynchronous copies and waits for
the device once. A worker that synchronized and copied each case's tensors alone waited on
the device four or five times a case, and with many processes sharing a GPU each wait is a
turn of the card's time slicing.
"""

import numpy as np

# Each span starts at a multiple of this many bytes in the staged buffer (cudaMalloc's
# guarantee; PyTorch's caching allocator gives at least as much).
ALIGN = 256


def _span(a):
    """(first byte, byte length) of the memory numpy view a reads (non-negative strides,
    as the protocol sends), or None for an empty array."""
    if a.size == 0 or any(s < 0 for s in a.strides):
        return None
    n = a.itemsize + sum((d - 1) * s for d, s in zip(a.shape, a.strides))
    return a.__array_interface__["data"][0], n


def _grown(torch, buf, n, pin):
    """buf (a uint8 host tensor, or None) if it holds n bytes and is pinned as asked, else a
    new one of at least n bytes, 1.5 times the old one's size (so a growing workload
    allocates a few times, not every batch)."""
    if buf is not None and buf.numel() >= n and buf.is_pinned() == pin:
        return buf
    size = max(n, int(1.5 * (buf.numel() if buf is not None else 0)), 1)
    return torch.empty(size, dtype=torch.uint8, pin_memory=pin)


def _bytes(a, n):
    """The n bytes from a's first element, as a flat uint8 view (no copy)."""
    flat = np.lib.stride_tricks.as_strided(a, shape=(n // a.itemsize,), strides=(a.itemsize,))
    return flat.view(np.uint8)


# The request fields a batch stages (attnfuzz.request.Request); the serving tables stay host
# arrays (the serving variants read them on the host).
_STAGED = ("q", "k", "v", "qkv", "mask", "bool_mask", "dout")


class Staging:
    """One worker's staging buffer (pinned host memory, grown as batches need, reused)."""

    def __init__(self, torch):
        self.torch = torch
        self.pinned = None
        self.dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
                       "float64": torch.float64, "bool": torch.bool, "int64": torch.int64, "int32": torch.int32}


    def upload(self, requests, device):
        """requests (attnfuzz.request.Request) with numpy inputs -> new requests (the same
        cases) whose inputs (q, k, v, qkv, the masks, dout) are device views of one staged
        copy; the requests given are left as they are. An input it cannot stage (an unknown
        dtype, a view whose element offset does not divide) stays numpy, and to_torch copies
        it alone as before. With device "cpu" (the tests) the buffer is not pinned and the
        views are of a copy of it."""
        torch = self.torch
        arrays = []  # (array, start, length)
        for req in requests:
            for a in (req.qkv, req.q, req.k, req.v, req.mask, req.bool_mask, req.dout):
                if isinstance(a, np.ndarray) and a.dtype.name in self.dtypes:
                    sp = _span(a)
                    if sp is not None:
                        arrays.append((a, sp[0], sp[1]))
        if not arrays:
            return requests
        # spans in address order, each that is not inside the one before it given a slot
        order = sorted(range(len(arrays)), key=lambda i: (arrays[i][1], -arrays[i][2]))
        place = {}          # array index -> byte offset of its first element in the buffer
        copies = []         # (buffer offset, array index, length)
        total, cur = 0, None  # cur: (start, end, buffer offset) of the slot being filled
        for i in order:
            _, start, n = arrays[i]
            if cur is None or start + n > cur[1]:  # not inside the slot before: a slot of its own
                total = (total + ALIGN - 1) // ALIGN * ALIGN
                cur = (start, start + n, total)
                copies.append((total, i, n))
                total += n
            place[i] = cur[2] + start - cur[0]
        total = (total + 7) // 8 * 8
        cuda = str(device) != "cpu"
        if cuda:
            torch.cuda.current_stream().synchronize()  # the last batch's copy is done with the buffer
        buf = self.pinned = _grown(self.torch, self.pinned, total, cuda)
        host = buf.numpy()
        for off, i, n in copies:
            host[off:off + n] = _bytes(arrays[i][0], n)
        dev = buf[:total].to(device, non_blocking=True) if cuda else buf[:total].clone()
        typed = {}
        staged = {}
        for i, (a, _, _) in enumerate(arrays):
            off = place[i]
            if off % a.itemsize:
                continue
            td = self.dtypes[a.dtype.name]
            if td not in typed:
                typed[td] = dev.view(td)
            strides = tuple(s // a.itemsize for s in a.strides)
            staged[id(a)] = typed[td].as_strided(tuple(a.shape), strides, off // a.itemsize)

        def swap(a):
            return staged.get(id(a), a) if isinstance(a, np.ndarray) else a
        return [req.replace(**{n: swap(getattr(req, n)) for n in _STAGED}) for req in requests]


class Download:
    """One worker's pinned buffer for results (grown as batches need, reused: the numpy
    arrays fetch hands out are views of it, valid until the next fetch)."""

    ALIGN = 64

    def __init__(self, torch):
        self.torch = torch
        self.pinned = None

    def fetch(self, results, attrs=("out", "dropout_keep", "lse"), dict_attrs=("grads",)):
        """Every torch tensor found in results' attrs (and in the dicts of dict_attrs) copied
        to the host as numpy (bfloat16 as ml_dtypes.bfloat16, contiguous), in place; other
        items (exceptions, numpy arrays, None) left as they are. On a CUDA device the copies
        are asynchronous and followed by one synchronization, which raises any error the
        batch's kernels left behind."""
        torch = self.torch
        found = []  # (holder, key, tensor)
        for res in results:
            for a in attrs:
                t = getattr(res, a, None)
                if isinstance(t, torch.Tensor):
                    found.append((res, a, t))
            for a in dict_attrs:
                d = getattr(res, a, None)
                if isinstance(d, dict):
                    found.extend((d, n, t) for n, t in d.items() if isinstance(t, torch.Tensor))
        if not found:
            return results
        places, total = [], 0
        for _, _, t in found:
            places.append(total)
            total += (t.numel() * t.element_size() + self.ALIGN - 1) // self.ALIGN * self.ALIGN
        cuda = any(t.is_cuda for _, _, t in found)
        self.pinned = _grown(torch, self.pinned, total, cuda)
        hosts = []
        for (_, _, t), off in zip(found, places):
            n = t.numel() * t.element_size()
            dst = self.pinned[off:off + n].view(t.dtype).view(t.shape)
            dst.copy_(t.detach(), non_blocking=t.is_cuda)
            hosts.append(dst)
        if cuda:
            torch.cuda.current_stream().synchronize()
        for (holder, key, _), h in zip(found, hosts):
            if h.dtype == torch.bfloat16:
                import ml_dtypes
                a = h.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
            else:
                a = h.numpy()
            if isinstance(holder, dict):
                holder[key] = a
            else:
                setattr(holder, key, a)
        return results
