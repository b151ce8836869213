"""Frames of the worker protocol (docs/worker-protocol.md, protocol version 1).

A frame is a little-endian u32 N, then N bytes: a UTF-8 JSON object (the header), one
"\\n", then the payload of raw little-endian tensor bytes. Each tensor the header carries
is an entry {"name", "dtype", "shape", "strides" (bytes), "offset" (bytes)} into the
payload; entries may share bytes (a packed QKV buffer travels once, stride-0 dims are not
expanded).

    hdr, payload = read_frame(f)                    # None at the end of the stream
    q = tensor_from_entry(hdr["tensors"][0], payload)   # zero-copy, read-only view
    entries, parts = entries_for({"out": out})
    write_frame(f, {"type": "result", ..., "tensors": entries}, parts)
"""

import json
import struct

import numpy as np

from . import dtypes

PROTOCOL = 1
MAX_HEADER = 1 << 20  # a reader refuses a header over 1 MiB
MAX_FRAME = (1 << 32) - 1

_LEN = struct.Struct("<I")
_loads = json.loads
_dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=True).encode


class ProtocolError(ValueError):
    """A frame or tensor entry that breaks docs/worker-protocol.md."""


def _read_exact(f, view):
    """Fills view from f; returns the bytes read (less than asked only at end of stream)."""
    got = 0
    n = len(view)
    while got < n:
        k = f.readinto(view[got:])
        if not k:
            break
        got += k
    return got


def _split_header(buf, n):
    """(header dict, payload start) of the frame held in buf[:n]."""
    limit = min(n, MAX_HEADER + 1)
    pos = buf.find(b"\n", 0, limit)
    while pos >= 0:
        try:
            header = _loads(bytes(buf[:pos]))
        except (ValueError, UnicodeDecodeError):
            # a newline inside a pretty-printed header: try the next one
            pos = buf.find(b"\n", pos + 1, limit)
            continue
        if not isinstance(header, dict):
            raise ProtocolError("frame header is not a JSON object")
        return header, pos + 1
    if n > MAX_HEADER:
        raise ProtocolError("frame header over %d bytes (or no newline after it)" % MAX_HEADER)
    raise ProtocolError("frame of %d bytes has no JSON header followed by a newline" % n)


class FrameReader:
    """Reads frames from a binary stream into one grow-only buffer.

    read() returns (header, payload) with payload a read-only memoryview into the buffer,
    valid until the next read(); None at a clean end of stream (no byte of a new frame).
    Raises ProtocolError for a truncated or malformed frame."""

    def __init__(self, f):
        self.f = f
        self.buf = bytearray(1 << 16)
        self.lenbuf = bytearray(4)

    def read(self):
        got = _read_exact(self.f, memoryview(self.lenbuf))
        if got == 0:
            return None
        if got < 4:
            raise ProtocolError("stream ends inside a frame length (%d of 4 bytes)" % got)
        (n,) = _LEN.unpack(self.lenbuf)
        if n > len(self.buf):
            self.buf = bytearray(max(n, 2 * len(self.buf)))
        mv = memoryview(self.buf)
        got = _read_exact(self.f, mv[:n])
        if got < n:
            raise ProtocolError("stream ends inside a frame (%d of %d bytes)" % (got, n))
        header, start = _split_header(self.buf, n)
        return header, mv[start:n].toreadonly()


def read_frame(f):
    """One frame from binary stream f: (header dict, payload memoryview), or None at a
    clean end of stream. The payload is a fresh buffer (FrameReader reuses one)."""
    return FrameReader(f).read()


def parse_frame(data):
    """(header, payload) of one whole frame given as bytes (length prefix included)."""
    if len(data) < 4:
        raise ProtocolError("frame shorter than its length prefix")
    (n,) = _LEN.unpack_from(data, 0)
    if len(data) != 4 + n:
        raise ProtocolError("frame length %d but %d bytes follow" % (n, len(data) - 4))
    mv = memoryview(data)[4:]
    header, start = _split_header(bytes(mv[: min(n, MAX_HEADER + 1)]), n)
    return header, mv[start:].toreadonly()


def _nbytes(part):
    return memoryview(part).nbytes


def encode_frame(header, buffers=()):
    """The bytes of one frame (length prefix included)."""
    h = _dumps(header).encode("utf-8")
    parts = [memoryview(b).cast("B") if not isinstance(b, (bytes, bytearray)) else b for b in buffers]
    n = len(h) + 1 + sum(len(p) for p in parts)
    if n > MAX_FRAME:
        raise ProtocolError("frame of %d bytes is over 4 GiB" % n)
    return b"".join([_LEN.pack(n), h, b"\n"] + [bytes(p) for p in parts])


def write_frame(f, header, buffers=()):
    """Writes header (a dict, as compact JSON) and the payload buffers (bytes-like objects,
    e.g. the parts of entries_for) to binary stream f as one frame, then flushes."""
    h = _dumps(header).encode("utf-8")
    n = len(h) + 1
    for b in buffers:
        n += _nbytes(b)
    if n > MAX_FRAME:
        raise ProtocolError("frame of %d bytes is over 4 GiB" % n)
    f.write(_LEN.pack(n) + h + b"\n")
    for b in buffers:
        f.write(b)
    f.flush()


def _ints(entry, key, name):
    v = entry.get(key)
    if type(v) is list:
        for x in v:
            if type(x) is not int or x < 0:
                break
        else:
            return v
    raise ProtocolError("tensor %s: %s must be a list of non-negative integers" % (name, key))


def tensor_from_entry(entry, payload):
    """The numpy view that a tensor entry describes in payload (zero-copy; read-only when
    payload is). Raises ProtocolError for an unknown dtype, bad shape/strides, or an
    element outside the payload."""
    name = entry.get("name", "?")
    dt = dtypes.DTYPES.get(entry.get("dtype"))
    if dt is None:
        raise ProtocolError("tensor %s: unknown dtype %r" % (name, entry.get("dtype")))
    shape = _ints(entry, "shape", name)
    strides = _ints(entry, "strides", name)
    if len(shape) != len(strides):
        raise ProtocolError("tensor %s: %d dims but %d strides" % (name, len(shape), len(strides)))
    off = entry.get("offset", 0)
    if type(off) is not int or off < 0:
        raise ProtocolError("tensor %s: offset must be a non-negative integer" % name)
    if 0 in shape:
        end = off
    else:
        end = off + dt.itemsize
        for n, s in zip(shape, strides):
            end += (n - 1) * s
    size = memoryview(payload).nbytes
    if end > size:
        raise ProtocolError("tensor %s: elements up to byte %d lie outside the payload of %d bytes"
                            % (name, end, size))
    if 0 in shape:
        return np.empty(shape, dt)
    return np.ndarray(tuple(shape), dt, buffer=payload, offset=off, strides=tuple(strides))


def tensors_from_header(header, payload):
    """{name: view} for every entry of header["tensors"]."""
    out = {}
    for e in header.get("tensors") or ():
        if not isinstance(e, dict) or not isinstance(e.get("name"), str):
            raise ProtocolError("tensor entry without a name")
        out[e["name"]] = tensor_from_entry(e, payload)
    return out


class _Span:
    """A uint8 view of raw memory [ptr, ptr + n) that keeps owner alive."""

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, ptr, n, owner):
        self.__array_interface__ = {"data": (ptr, True), "shape": (n,), "typestr": "|u1", "version": 3}
        self.owner = owner


def _root(a):
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def entries_for(arrays):
    """Tensor entries and payload parts for arrays (a dict name -> array, or (name, array)
    pairs), in order. Arrays that are views of one base buffer travel once: one part spans
    them all and each entry keeps its own strides and offset into it; stride-0 dims are not
    expanded. Arrays with negative strides or big-endian bytes are copied first.

    Returns (entries, parts): write_frame(f, {..., "tensors": entries}, parts)."""
    items = arrays.items() if hasattr(arrays, "items") else arrays
    groups = []  # [root, lo, hi, [(name, array, ptr)]]
    for name, a in items:
        a = np.asarray(a)
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        if a.dtype not in dtypes.NAMES:
            raise ProtocolError("tensor %s: dtype %s has no protocol name" % (name, a.dtype))
        if any(s < 0 for s in a.strides):
            a = np.ascontiguousarray(a)
        ptr = a.__array_interface__["data"][0]
        span = 0
        if a.size:
            span = a.itemsize + sum((n - 1) * s for n, s in zip(a.shape, a.strides))
        root = _root(a)
        for g in groups:
            if g[0] is root:
                g[1] = min(g[1], ptr)
                g[2] = max(g[2], ptr + span)
                g[3].append((name, a, ptr))
                break
        else:
            groups.append([root, ptr, ptr + span, [(name, a, ptr)]])
    entries, parts = [], []
    base = 0
    for root, lo, hi, members in groups:
        if len(members) == 1 and members[0][1].flags.c_contiguous:
            a = members[0][1]
            parts.append(a.reshape(-1).view(np.uint8) if a.size else b"")
        else:
            parts.append(np.asarray(_Span(lo, hi - lo, root)))
        for name, a, ptr in members:
            entries.append({"name": name, "dtype": dtypes.NAMES[a.dtype], "shape": list(a.shape),
                            "strides": list(a.strides), "offset": base + ptr - lo})
        base += hi - lo
    return entries, parts


def entries_for_items(items):
    """Tensor entries per item, and one list of payload parts, for several items' arrays
    (the results of a batch): entries_for on each item, its offsets moved past the items
    before it, so every item's entries point into the one payload.

    Returns (entries_per_item, parts)."""
    per_item, parts, base = [], [], 0
    for arrays in items:
        entries, p = entries_for(arrays)
        for e in entries:
            e["offset"] += base
        per_item.append(entries)
        parts += p
        base += sum(_nbytes(x) for x in p)
    return per_item, parts
