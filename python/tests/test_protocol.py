"""Frames of docs/worker-protocol.md against hand-written bytes: header, newline, payload,
entries sharing bytes, stride 0, a packed QKV travelling once, and the refusals."""

import io
import json
import struct
import unittest

import _util  # noqa: F401
import ml_dtypes
import numpy as np

from attnfuzz import protocol
from attnfuzz.protocol import ProtocolError


def frame(header_text, payload=b""):
    body = header_text.encode() + b"\n" + payload
    return struct.pack("<I", len(body)) + body


class ReadFrames(unittest.TestCase):
    def test_header_newline_payload(self):
        payload = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)
        data = frame('{"type":"run","id":7,"tensors":[{"name":"q","dtype":"f32","shape":[2,2],'
                     '"strides":[8,4],"offset":0}]}', payload)
        self.assertEqual(struct.unpack_from("<I", data)[0], len(data) - 4)
        h, p = protocol.read_frame(io.BytesIO(data))
        self.assertEqual(h["type"], "run")
        self.assertEqual(h["id"], 7)
        self.assertEqual(bytes(p), payload)
        q = protocol.tensor_from_entry(h["tensors"][0], p)
        self.assertEqual(q.dtype, np.float32)
        self.assertEqual(q.tolist(), [[1.0, 2.0], [3.0, 4.0]])
        self.assertFalse(q.flags.writeable)

    def test_strides_offsets_and_stride0(self):
        # 6 float32: 10 11 12 13 14 15; a transposed [2,3] view, a stride-0 row, an offset
        payload = struct.pack("<6f", 10, 11, 12, 13, 14, 15)
        t = protocol.tensor_from_entry({"name": "a", "dtype": "f32", "shape": [3, 2], "strides": [4, 12],
                                        "offset": 0}, memoryview(payload))
        self.assertEqual(t.tolist(), [[10, 13], [11, 14], [12, 15]])
        b = protocol.tensor_from_entry({"name": "b", "dtype": "f32", "shape": [4, 3], "strides": [0, 4],
                                        "offset": 12}, memoryview(payload))
        self.assertEqual(b.tolist(), [[13, 14, 15]] * 4)
        self.assertEqual(b.strides, (0, 4))

    def test_packed_qkv_travels_once(self):
        # qkv_bs3hd [B=1, S=2, 3, H=1, D=2] float32: element (s, w, d) holds 100 s + 10 w + d
        vals = [100 * s + 10 * w + d for s in range(2) for w in range(3) for d in range(2)]
        payload = struct.pack("<12f", *vals)
        ents = [{"name": n, "dtype": "f32", "shape": [1, 2, 1, 2], "strides": [48, 24, 8, 4], "offset": 8 * w}
                for w, n in enumerate("qkv")]
        ents.append({"name": "qkv", "dtype": "f32", "shape": [1, 2, 3, 1, 2], "strides": [48, 24, 8, 8, 4],
                     "offset": 0})
        data = frame(json.dumps({"type": "run", "id": 1, "tensors": ents}), payload)
        self.assertEqual(len(data), 4 + len(json.dumps({"type": "run", "id": 1, "tensors": ents})) + 1 + 48)
        h, p = protocol.read_frame(io.BytesIO(data))
        t = protocol.tensors_from_header(h, p)
        for w, n in enumerate("qkv"):
            self.assertEqual(t[n][0, :, 0, :].tolist(), [[10 * w, 10 * w + 1], [100 + 10 * w, 101 + 10 * w]])
            self.assertTrue(np.shares_memory(t[n], t["qkv"]))
        self.assertEqual(t["qkv"][0, 1, 2, 0, 1], 121)

    def test_f16_bf16_bool(self):
        payload = struct.pack("<HH", 0x3C00, 0xC000) + struct.pack("<HH", 0x3F80, 0xC040) + bytes([1, 0, 1])
        h = {"tensors": [{"name": "h", "dtype": "f16", "shape": [2], "strides": [2], "offset": 0},
                         {"name": "b", "dtype": "bf16", "shape": [2], "strides": [2], "offset": 4},
                         {"name": "m", "dtype": "bool", "shape": [3], "strides": [1], "offset": 8}]}
        t = protocol.tensors_from_header(h, memoryview(payload))
        self.assertEqual(t["h"].dtype, np.float16)
        self.assertEqual(t["h"].tolist(), [1.0, -2.0])
        self.assertEqual(t["b"].dtype, ml_dtypes.bfloat16)
        self.assertEqual(t["b"].astype(np.float32).tolist(), [1.0, -3.0])
        self.assertEqual(t["m"].tolist(), [True, False, True])

    def test_pretty_printed_header(self):
        data = frame('{\n\t"type": "bye"\n}')
        h, p = protocol.read_frame(io.BytesIO(data))
        self.assertEqual(h, {"type": "bye"})
        self.assertEqual(len(p), 0)

    def test_end_of_stream(self):
        self.assertIsNone(protocol.read_frame(io.BytesIO(b"")))
        with self.assertRaises(ProtocolError):
            protocol.read_frame(io.BytesIO(b"\x05\x00"))
        with self.assertRaises(ProtocolError):
            protocol.read_frame(io.BytesIO(frame('{"type":"bye"}')[:-3]))
        r = protocol.FrameReader(io.BytesIO(frame('{"a":1}') + frame('{"a":2}', b"xy")))
        self.assertEqual(r.read()[0], {"a": 1})
        h, p = r.read()
        self.assertEqual((h, bytes(p)), ({"a": 2}, b"xy"))
        self.assertIsNone(r.read())

    def test_refusals(self):
        p = memoryview(bytes(16))
        bad = [
            {"name": "x", "dtype": "f32", "shape": [2, 2], "strides": [8, 4], "offset": 4},   # ends at 20 > 16
            {"name": "x", "dtype": "f32", "shape": [5], "strides": [4], "offset": 0},         # 20 bytes
            {"name": "x", "dtype": "i64", "shape": [1], "strides": [4], "offset": 0},
            {"name": "x", "dtype": "f32", "shape": [2], "strides": [-4], "offset": 4},
            {"name": "x", "dtype": "f32", "shape": [2, 2], "strides": [4], "offset": 0},
            {"name": "x", "dtype": "f32", "shape": [2], "strides": [4], "offset": -1},
            {"name": "x", "dtype": "f32", "shape": [True], "strides": [4], "offset": 0},
            {"name": "x", "dtype": "f64", "shape": [2], "strides": [8], "offset": 1},          # ends at 17
        ]
        for e in bad:
            with self.assertRaises(ProtocolError, msg=str(e)):
                protocol.tensor_from_entry(e, p)
        # exactly at the end is fine, stride 0 over a huge dim too
        protocol.tensor_from_entry({"name": "x", "dtype": "f32", "shape": [2, 2], "strides": [8, 4], "offset": 0}, p)
        protocol.tensor_from_entry({"name": "x", "dtype": "f64", "shape": [10 ** 6], "strides": [0], "offset": 8}, p)
        with self.assertRaises(ProtocolError):
            protocol.read_frame(io.BytesIO(struct.pack("<I", 5) + b"nojson"[:5]))
        with self.assertRaises(ProtocolError):
            protocol.read_frame(io.BytesIO(frame("[1, 2]")))
        big = b"{" + b" " * (protocol.MAX_HEADER + 10) + b"}"
        with self.assertRaises(ProtocolError):
            protocol.read_frame(io.BytesIO(struct.pack("<I", len(big) + 1) + big + b"\n"))


class WriteFrames(unittest.TestCase):
    def test_write_frame_bytes(self):
        f = io.BytesIO()
        protocol.write_frame(f, {"type": "result", "id": 3}, [b"\x01\x02", bytearray(b"\x03")])
        want = b'{"type":"result","id":3}\n\x01\x02\x03'
        self.assertEqual(f.getvalue(), struct.pack("<I", len(want)) + want)

    def test_entries_for_shares_bytes(self):
        buf = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 2, 2)  # [B, S, 3, H, D]
        q, k, v = buf[:, :, 0], buf[:, :, 1], buf[:, :, 2]
        ents, parts = protocol.entries_for([("q", q), ("k", k), ("v", v), ("qkv", buf)])
        self.assertEqual(len(parts), 1)
        self.assertEqual(memoryview(parts[0]).nbytes, 96)
        self.assertEqual([e["offset"] for e in ents], [0, 16, 32, 0])
        self.assertEqual(ents[0]["strides"], [96, 48, 8, 4])
        self.assertEqual(ents[3]["shape"], [1, 2, 3, 2, 2])
        # a stride-0 dim is not expanded; a second, unrelated array gets its own part
        row = np.arange(1000, dtype=np.float64)
        bc = np.broadcast_to(row, (4, 1000))
        other = np.ones((2, 3), np.float16).T  # F-order view: its strides are kept
        ents, parts = protocol.entries_for({"m": bc, "o": other})
        self.assertEqual([memoryview(x).nbytes for x in parts], [8000, 12])
        self.assertEqual(ents[0]["strides"], [0, 8])
        self.assertEqual(ents[1], {"name": "o", "dtype": "f16", "shape": [3, 2], "strides": [2, 6], "offset": 8000})

    def test_round_trip(self):
        rng = np.random.default_rng(3)
        buf = rng.standard_normal((2, 12, 5)).astype(ml_dtypes.bfloat16)  # qkv_channels_first, H*D = 4
        arrays = {"q": buf[:, 0:4], "k": buf[:, 4:8], "v": buf[:, 8:12], "qkv": buf,
                  "mask": np.broadcast_to(rng.standard_normal((1, 1, 3, 5)).astype(np.float16), (2, 4, 3, 5)),
                  "bool_mask": rng.random((3, 5)) < 0.5, "f64": rng.standard_normal((2, 3)).T}
        ents, parts = protocol.entries_for(arrays)
        data = protocol.encode_frame({"type": "run", "id": 9, "tensors": ents}, parts)
        h, p = protocol.parse_frame(data)
        got = protocol.tensors_from_header(h, p)
        self.assertEqual(h["id"], 9)
        for n, a in arrays.items():
            self.assertEqual(got[n].dtype, a.dtype, n)
            self.assertEqual(got[n].shape, a.shape, n)
            self.assertEqual(got[n].tobytes(), np.ascontiguousarray(a).tobytes(), n)
        self.assertEqual(got["mask"].strides[:2], (0, 0))
        self.assertTrue(np.shares_memory(got["q"], got["qkv"]))
        self.assertEqual(len(p), 2 * 12 * 5 * 2 + 3 * 5 * 2 + 15 + 48)


if __name__ == "__main__":
    unittest.main()
