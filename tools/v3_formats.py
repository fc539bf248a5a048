"""v3_formats.py - readers for the three file formats the AnimeGANv3 models come in, shared by
the offline tools (tools/v3_convert.py, tools/v3_reference.py, tools/make_v3_onnx.py).
Python 3 + numpy only (the ONNX reader uses python3-onnx). Not used at run time.

  read_graphdef(buf)  a frozen TensorFlow GraphDef (.pb), parsed from the protobuf wire format
                      by the small reader below (no TensorFlow): list of PbNode
  TFLite(buf)         a TFLite flatbuffer (schema v3) with float32 / float16 / int32 tensors,
                      using the flatbuffer Table of tools/convert_tflite.py
  read_onnx(path)     an ONNX ModelProto through python3-onnx: (nodes, initializers, model)

Every reader is strict: a field or type it does not know where it matters is an error.
"""

import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from convert_tflite import Table  # noqa: E402  (the minimal flatbuffer table reader)


class FormatError(Exception):
    pass


def need(cond, msg):
    if not cond:
        raise FormatError(msg)


# ---- protobuf wire format ---------------------------------------------------------------

def _varint(b, p):
    r = 0
    shift = 0
    while True:
        need(p < len(b), "truncated varint")
        c = b[p]
        p += 1
        r |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return r, p
        need(shift < 70, "varint too long")


def pb_fields(b):
    """Yield (field number, wire type, value) of one message: value is an int for varints,
    bytes for fixed64 / fixed32 / length-delimited fields."""
    b = memoryview(b)
    p = 0
    n = len(b)
    while p < n:
        key, p = _varint(b, p)
        field, wt = key >> 3, key & 7
        if wt == 0:
            v, p = _varint(b, p)
        elif wt == 1:
            need(p + 8 <= n, "truncated fixed64")
            v = bytes(b[p:p + 8])
            p += 8
        elif wt == 2:
            ln, p = _varint(b, p)
            need(p + ln <= n, "truncated field %d" % field)
            v = bytes(b[p:p + ln])
            p += ln
        elif wt == 5:
            need(p + 4 <= n, "truncated fixed32")
            v = bytes(b[p:p + 4])
            p += 4
        else:
            raise FormatError("wire type %d" % wt)
        yield field, wt, v


def _packed_varints(v, wt):
    if wt == 0:
        return [v]
    out = []
    p = 0
    while p < len(v):
        x, p = _varint(v, p)
        out.append(x)
    return out


def _signed64(x):
    return x - (1 << 64) if x >= (1 << 63) else x


# tensorflow/core/framework/types.proto
TF_DTYPES = {1: np.float32, 3: np.int32, 9: np.int64, 19: np.float16, 10: np.bool_}


def pb_tensor(b):
    """TensorProto -> numpy array (dtype, shape, tensor_content or the typed *_val fields)."""
    dtype = None
    shape = []
    content = None
    vals = []
    for f, wt, v in pb_fields(b):
        if f == 1:
            dtype = v
        elif f == 2:  # TensorShapeProto
            for f2, _, v2 in pb_fields(v):
                if f2 == 2:
                    size = 0
                    for f3, _, v3 in pb_fields(v2):
                        if f3 == 1:
                            size = _signed64(v3)
                    shape.append(size)
                elif f2 == 3:
                    raise FormatError("tensor of unknown rank")
        elif f == 4:
            content = v
        elif f == 5:  # float_val
            vals += list(np.frombuffer(v, "<f4")) if wt == 2 else [struct.unpack("<f", v)[0]]
        elif f in (7, 10):  # int_val, int64_val
            vals += [_signed64(x) for x in _packed_varints(v, wt)]
        elif f == 13:  # half_val (uint16 bits in int32)
            vals += list(np.array(_packed_varints(v, wt), np.uint16).view(np.float16))
        elif f == 11:  # bool_val
            vals += [bool(x) for x in _packed_varints(v, wt)]
    need(dtype in TF_DTYPES, "tensor dtype %s not supported" % dtype)
    dt = np.dtype(TF_DTYPES[dtype]).newbyteorder("<")
    n = int(np.prod(shape)) if shape else 1
    if content is not None:
        need(len(content) == n * dt.itemsize, "tensor_content of %d bytes for shape %s"
             % (len(content), shape))
        a = np.frombuffer(content, dt).astype(dt.newbyteorder("="))
    else:
        a = np.array(vals, dtype=TF_DTYPES[dtype])
        if a.size == 0:
            a = np.zeros(n, TF_DTYPES[dtype])
        elif a.size == 1 and n > 1:
            a = np.full(n, a[0], TF_DTYPES[dtype])
        need(a.size == n, "tensor has %d values for shape %s" % (a.size, shape))
    return a.reshape(shape)


def pb_attr(b):
    """AttrValue -> (kind, value)."""
    for f, wt, v in pb_fields(b):
        if f == 2:
            return "s", v
        if f == 3:
            return "i", _signed64(v)
        if f == 4:
            return "f", struct.unpack("<f", v)[0]
        if f == 5:
            return "b", bool(v)
        if f == 6:
            return "type", v
        if f == 7:
            return "shape", v
        if f == 8:
            return "tensor", pb_tensor(v)
        if f == 1:  # ListValue
            out = []
            for f2, wt2, v2 in pb_fields(v):
                if f2 == 2:
                    out.append(v2)
                elif f2 in (3, 6):
                    out += [_signed64(x) for x in _packed_varints(v2, wt2)]
                elif f2 == 4:
                    out += (list(np.frombuffer(v2, "<f4")) if wt2 == 2
                            else [struct.unpack("<f", v2)[0]])
                elif f2 == 5:
                    out += [bool(x) for x in _packed_varints(v2, wt2)]
            return "list", out
    return None, None


class PbNode:
    def __init__(self):
        self.name = None
        self.op = None
        self.input = []
        self.attr = {}

    def a(self, key, default=None):
        kv = self.attr.get(key)
        return default if kv is None else kv[1]


def read_graphdef(buf):
    """GraphDef (field 1: repeated NodeDef) -> list of PbNode. NodeDef: name 1, op 2,
    input 3, device 4, attr 5 (map entry: key 1, value 2)."""
    nodes = []
    for f, _, v in pb_fields(buf):
        if f != 1:
            continue
        nd = PbNode()
        for f2, _, v2 in pb_fields(v):
            if f2 == 1:
                nd.name = v2.decode()
            elif f2 == 2:
                nd.op = v2.decode()
            elif f2 == 3:
                nd.input.append(v2.decode())
            elif f2 == 5:
                key = val = None
                for f3, _, v3 in pb_fields(v2):
                    if f3 == 1:
                        key = v3.decode()
                    elif f3 == 2:
                        val = pb_attr(v3)
                nd.attr[key] = val
        need(nd.name and nd.op, "node without name or op")
        nodes.append(nd)
    need(nodes, "no nodes: not a GraphDef")
    return nodes


# ---- TFLite flatbuffer ------------------------------------------------------------------

TFL_OPS = {0: "ADD", 3: "CONV_2D", 6: "DEQUANTIZE", 18: "MUL", 22: "RESHAPE", 23: "RESIZE_BILINEAR",
           25: "SOFTMAX", 28: "TANH", 39: "TRANSPOSE", 40: "MEAN", 41: "SUB", 42: "DIV",
           74: "SUM", 75: "SQRT", 76: "RSQRT", 98: "LEAKY_RELU", 99: "SQUARED_DIFFERENCE",
           100: "MIRROR_PAD"}
TFL_TYPES = {0: np.float32, 1: np.float16, 2: np.int32}


class TflTensor:
    def __init__(self, index, t, buffers):
        self.index = index
        shape = t.vector(0, "i4")
        self.shape = tuple(int(x) for x in shape) if shape is not None else ()
        self.type = t.scalar(1, "b")
        self.name = t.string(3) or ""
        need(self.type in TFL_TYPES, "tensor %s: type %d not supported" % (self.name, self.type))
        need(t.table(4) is None or t.table(4).vector(2, "f4") is None or
             len(t.table(4).vector(2, "f4")) == 0, "tensor %s is quantized" % self.name)
        data = buffers[t.scalar(2, "I")].vector(0, "u1")
        self.data = None
        if data is not None and len(data) > 0:
            dt = np.dtype(TFL_TYPES[self.type]).newbyteorder("<")
            n = int(np.prod(self.shape)) if self.shape else 1
            need(len(data) == n * dt.itemsize, "tensor %s: %d bytes for shape %s"
                 % (self.name, len(data), self.shape))
            self.data = np.frombuffer(data.tobytes(), dtype=dt).astype(
                dt.newbyteorder("=")).reshape(self.shape)


class TflOp:
    def __init__(self, index, o, codes):
        self.index = index
        code = codes[o.scalar(0, "I")]
        need(code in TFL_OPS, "op%d: operator %d not supported" % (index, code))
        self.name = TFL_OPS[code]
        self.inputs = [int(x) for x in o.vector(1, "i4")]
        self.outputs = [int(x) for x in o.vector(2, "i4")]
        self.options = o.table(4)

    def opt(self, index, fmt, default=0):
        return default if self.options is None else self.options.scalar(index, fmt, default)


class TFLite:
    def __init__(self, buf):
        need(len(buf) > 8 and bytes(buf[4:8]) == b"TFL3", "not a TFLite v3 flatbuffer")
        model = Table(buf, struct.unpack_from("<I", buf, 0)[0])
        codes = [max(oc.scalar(0, "b"), oc.scalar(3, "i")) for oc in model.tables(1)]
        sgs = model.tables(2)
        need(len(sgs) == 1, "expected one subgraph, found %d" % len(sgs))
        sg = sgs[0]
        buffers = model.tables(4)
        self.tensors = [TflTensor(i, t, buffers) for i, t in enumerate(sg.tables(0))]
        self.ops = [TflOp(i, o, codes) for i, o in enumerate(sg.tables(3))]
        self.inputs = [int(x) for x in sg.vector(1, "i4")]
        self.outputs = [int(x) for x in sg.vector(2, "i4")]


# ---- ONNX ---------------------------------------------------------------------------------

def read_onnx(path):
    import onnx
    from onnx import numpy_helper
    m = onnx.load(path)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    nodes = []
    for n in m.graph.node:
        attrs = {}
        for a in n.attribute:
            v = onnx.helper.get_attribute_value(a)
            if isinstance(v, bytes):
                v = v.decode()
            elif hasattr(v, "dims"):
                v = numpy_helper.to_array(v)
            attrs[a.name] = v
        nodes.append((n.op_type, n.name, list(n.input), list(n.output), attrs))
    return nodes, inits, m
