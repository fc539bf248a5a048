#!/usr/bin/python3
"""make_onnx_fixtures.py - writes the small ONNX files tests/test_onnx.c reads, into
tests/fixtures/onnx/. Needs Debian's python3-onnx and python3-numpy; run from the repository
root: /usr/bin/python3 tools/make_onnx_fixtures.py

The graphs use the vocabulary tf2onnx emits for AnimeGANv3 (NHWC input transposed to NCHW,
MirrorPad as Pad reflect, the Shape/Gather/Cast/Slice/Squeeze/Mul/Unsqueeze/Concat chain that
computes a Resize's sizes, LADE from tf.nn.moments): mini_v3 has the tiny generator's
block kinds at 4 channels, ea_block AnimeGANv3's external-attention block. The rest are
refusals: each is mini_v3 (or a two-node graph) broken in one way. Weights come from a
seeded generator, so the files are the same on every run.
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "onnx")
SEED = 20261201
rng = np.random.default_rng(SEED)


def init(name, array, dtype=None):
    array = np.asarray(array, dtype=dtype)
    return numpy_helper.from_array(array, name)


def weight(name, shape):
    return init(name, (rng.standard_normal(shape) * 0.3).astype(np.float32))


class Graph:
    def __init__(self):
        self.nodes, self.inits, self.count = [], [], 0

    def node(self, op, inputs, name=None, **attrs):
        self.count += 1
        name = name or "%s_%d" % (op, self.count)
        self.nodes.append(helper.make_node(op, inputs, [name + ":0"], name=name, **attrs))
        return name + ":0"

    def const(self, name, array, dtype=None):
        self.inits.append(init(name, array, dtype))
        return name

    def w(self, name, shape):
        self.inits.append(weight(name, shape))
        return name

    def model(self, inputs, outputs, opset=15):
        graph = helper.make_graph(self.nodes, "mini", inputs, outputs, self.inits)
        model = helper.make_model(graph, producer_name="make_onnx_fixtures",
                                  opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8
        return model


def nhwc_input(name="input:0", c=3):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, "h", "w", c])


def pad_conv(g, x, w, b=None, pads=(1, 1, 1, 1), stride=1, mode="reflect"):
    """tf2onnx's MirrorPad + Conv2D, in NCHW; pads top, left, bottom, right."""
    t, l, bo, r = pads
    p = g.const("pads_%d_%d_%d_%d" % pads, [0, 0, t, l, 0, 0, bo, r], np.int64) \
        if "pads_%d_%d_%d_%d" % pads not in [i.name for i in g.inits] else "pads_%d_%d_%d_%d" % pads
    x = g.node("Pad", [x, p], mode=mode)
    k = g.inits[[i.name for i in g.inits].index(w)].dims[2]
    ins = [x, w] + ([b] if b else [])
    return g.node("Conv", ins, dilations=[1, 1], strides=[stride, stride], kernel_shape=[k, k],
                  group=1)


def lrelu(g, x):
    return g.node("LeakyRelu", [x], alpha=0.2)


def resize_like_tf(g, x):
    """tf.image.resize(x, 2 * tf.shape(x)[1:3]) as tf2onnx writes it (x NCHW here)."""
    names = [i.name for i in g.inits]
    if "perm_nhwc" not in names:
        g.const("perm_nhwc", [0, 2, 3, 1], np.int64)
        g.const("c0", [0], np.int64)
        g.const("c1", [1], np.int64)
        g.const("c2", [2], np.int64)
        g.const("c3", [3], np.int64)
        g.const("two", np.array(2, np.int32))
        g.const("roi", np.zeros(0, np.float32))
    shape = g.node("Shape", [x])
    nc = g.node("Slice", [shape, "c0", "c2"])
    nhwc = g.node("Gather", [shape, "perm_nhwc"])
    s32 = g.node("Cast", [nhwc], to=TensorProto.INT32)
    wdim = g.node("Squeeze", [g.node("Slice", [s32, "c2", "c3", "c0"]), "c0"])
    hdim = g.node("Squeeze", [g.node("Slice", [s32, "c1", "c2", "c0"]), "c0"])
    w2 = g.node("Unsqueeze", [g.node("Mul", ["two", wdim]), "c0"])
    h2 = g.node("Unsqueeze", [g.node("Mul", ["two", hdim]), "c0"])
    hw = g.node("Cast", [g.node("Concat", [h2, w2], axis=0)], to=TensorProto.INT64)
    sizes = g.node("Concat", [nc, hw], axis=0)
    return g.node("Resize", [x, "roi", "roi", sizes], coordinate_transformation_mode="asymmetric",
                  exclude_outside=0, mode="linear", nearest_mode="floor")


def lade(g, x, c, wname, bias=None):
    """LADE as tf2onnx writes the tiny generator's: moments of x and of a 1x1 conv of x."""
    names = [i.name for i in g.inits]
    if "eps" not in names:
        g.const("eps", np.full((1, 1, 1, 1), 1e-5, np.float32))
        g.const("shape_nhwc_c", [1, 1, 1, c], np.int64)
        g.const("pads_0", [0] * 8, np.int64)
    mean = g.node("GlobalAveragePool", [x])
    sub = g.node("Sub", [x, mean])
    var = g.node("GlobalAveragePool", [g.node("Mul", [sub, sub])])
    std = g.node("Reshape", [g.node("Sqrt", [g.node("Add", [var, "eps"])]), "shape_nhwc_c"])
    norm = g.node("Div", [g.node("Transpose", [sub], perm=[0, 2, 3, 1]), std])
    g.w(wname, [c, c, 1, 1])
    if bias:
        g.w(bias, [c])
    y = g.node("Conv", [g.node("Pad", [x, "pads_0"], mode="reflect"), wname] + ([bias] if bias else []), dilations=[1, 1],
               strides=[1, 1], kernel_shape=[1, 1], group=1)
    ymean = g.node("GlobalAveragePool", [y])
    ysub = g.node("Sub", [y, ymean])
    yvar = g.node("GlobalAveragePool", [g.node("Mul", [ysub, ysub])])
    ystd = g.node("Reshape", [g.node("Sqrt", [g.node("Add", [yvar, "eps"])]), "shape_nhwc_c"])
    out = g.node("Transpose", [g.node("Mul", [norm, ystd])], perm=[0, 3, 1, 2])
    return g.node("Add", [out, ymean])


def mini_v3(lade_bias=None, fixed_size=False):
    """The tiny generator's block kinds: encoder with a stride-2 step, a residual 1x1 block,
    one 2x upsample (the tf resize chain) with a skip add, LADE, 7x7... here 3x3 to 3, tanh."""
    global rng
    rng = np.random.default_rng(SEED)
    g, c = Graph(), 4
    pad_in = g.const("pads_in", [0, 1, 1, 0, 0, 1, 1, 0], np.int64)
    x = g.node("Pad", ["input:0", pad_in], mode="reflect", name="enc/pad0")
    x = g.node("Transpose", [x], perm=[0, 3, 1, 2])
    e0 = g.node("Conv", [x, g.w("enc0.w", [c, 3, 3, 3]), g.w("enc0.b", [c])], dilations=[1, 1],
                strides=[1, 1], kernel_shape=[3, 3], group=1, name="enc/conv0")
    e0 = lrelu(g, e0)
    e1 = lrelu(g, pad_conv(g, e0, g.w("enc1.w", [c, c, 3, 3]), g.w("enc1.b", [c]),
                           pads=(1, 1, 0, 0), stride=2))
    r = pad_conv(g, e1, g.w("res.w", [c, c, 1, 1]), pads=(0, 0, 0, 0))
    e1 = lrelu(g, g.node("Add", [r, e1]))
    if fixed_size:
        up = g.node("Resize", [e1, "", "", g.const("fixed", [1, 4, 16, 16], np.int64)],
                    coordinate_transformation_mode="asymmetric", mode="linear")
    else:
        up = resize_like_tf(g, e1)
    d0 = lrelu(g, pad_conv(g, up, g.w("dec0.w", [c, c, 3, 3]), g.w("dec0.b", [c])))
    d0 = g.node("Add", [d0, e0])
    x = pad_conv(g, d0, g.w("lade.conv.w", [c, c, 3, 3]))
    x = lrelu(g, lade(g, x, c, "lade.w", lade_bias))
    x = pad_conv(g, x, g.w("out.w", [3, c, 3, 3]))
    x = g.node("Tanh", [x])
    g.nodes.append(helper.make_node("Transpose", [x], ["output:0"], perm=[0, 2, 3, 1],
                                    name="out/transpose"))
    out = helper.make_tensor_value_info("output:0", TensorProto.FLOAT, [1, "h", "w", 3])
    return g.model([nhwc_input()], [out])


def ea_block(transpose_node=False):
    """AnimeGANv3's external attention at 4 channels and 8 memory slots, on an NCHW map."""
    global rng
    rng = np.random.default_rng(SEED + 1)
    g, c, k = Graph(), 4, 8
    x = g.node("Transpose", ["input:0"], perm=[0, 3, 1, 2])
    x = lrelu(g, g.node("Conv", [x, g.w("in.w", [c, 3, 1, 1])], kernel_shape=[1, 1]))
    idn = x
    x = g.node("Conv", [x, g.w("ea.conv0.w", [c, c, 1, 1]), g.w("ea.conv0.b", [c])],
               kernel_shape=[1, 1])
    x = g.node("Transpose", [x], perm=[0, 2, 3, 1])
    shape = g.node("Shape", [x])
    flat = g.node("Reshape", [x, g.const("flat", [1, -1, c], np.int64)])
    memory = rng.standard_normal((c, k)).astype(np.float32)
    attn = g.node("MatMul", [flat, g.const("ea.memory", memory)])
    attn = g.node("Softmax", [attn], axis=1)
    total = g.node("ReduceSum", [attn, g.const("axes2", [2], np.int64)], keepdims=1)
    total = g.node("Add", [g.const("eps9", np.array(1e-9, np.float32)), total])
    attn = g.node("Div", [attn, total])
    if transpose_node:  # M^T as a Transpose of the same constant
        mt = g.node("Transpose", ["ea.memory"], perm=[1, 0])
    else:  # M^T folded into a constant, as tf2onnx does
        mt = g.const("ea.memory_t", memory.T.copy())
    x = g.node("MatMul", [attn, mt])
    x = g.node("Reshape", [x, shape])
    x = g.node("Transpose", [x], perm=[0, 3, 1, 2])
    x = g.node("Conv", [x, g.w("ea.conv1.w", [c, c, 1, 1])], kernel_shape=[1, 1])
    x = g.node("Mul", [x, g.const("bn.scale", rng.uniform(0.5, 1.5, (1, c, 1, 1)), np.float32)])
    x = g.node("Add", [x, g.const("bn.shift", rng.uniform(-0.5, 0.5, (1, c, 1, 1)), np.float32)])
    x = lrelu(g, g.node("Add", [x, idn]))
    x = g.node("Tanh", [g.node("Conv", [x, g.w("out.w", [3, c, 1, 1])], kernel_shape=[1, 1])])
    g.nodes.append(helper.make_node("Transpose", [x], ["output:0"], perm=[0, 2, 3, 1]))
    out = helper.make_tensor_value_info("output:0", TensorProto.FLOAT, [1, "h", "w", 3])
    return g.model([nhwc_input()], [out])


def torch_style():
    """torch.onnx's vocabulary instead of tf2onnx's: an NCHW input, convs with their own zero
    pads, InstanceNormalization, Relu, Dropout, PRelu, BatchNormalization, Clip(0, 6), Sigmoid, a
    Resize by scales (half_pixel) and one sized like the skip it is added to (Shape ->
    Slice -> Concat, align_corners), opset 13."""
    global rng
    rng = np.random.default_rng(SEED + 2)
    g, c = Graph(), 4

    def conv(x, name, cin, cout, k, stride=1):
        p = k // 2
        return g.node("Conv", [x, g.w(name + ".w", [cout, cin, k, k]), g.w(name + ".b", [cout])],
                      kernel_shape=[k, k], strides=[stride, stride], pads=[p, p, p, p])

    x = conv("input", "c0", 3, c, 3)
    x = g.node("InstanceNormalization",
               [x, g.const("in.scale", rng.uniform(0.5, 1.5, c), np.float32),
                g.const("in.bias", rng.uniform(-0.5, 0.5, c), np.float32)], epsilon=1e-5)
    e0 = g.node("Dropout", [g.node("Relu", [x])])
    e1 = g.node("PRelu", [conv(e0, "c1", c, c, 3, 2),
                          g.const("slope", rng.uniform(0.0, 0.3, (c, 1, 1)), np.float32)])
    up = g.node("Resize", [e1, "", g.const("scales", [1, 1, 2, 2], np.float32)],
                mode="linear", coordinate_transformation_mode="half_pixel")
    a = g.node("Add", [up, e0])
    r = g.node("Clip", [a, g.const("zero", np.array(0, np.float32)),
                        g.const("six", np.array(6, np.float32))])
    e2 = conv(r, "c2", c, c, 3, 2)
    e2 = g.node("BatchNormalization",
                [e2, g.const("bn.g", rng.uniform(0.5, 1.5, c), np.float32),
                 g.const("bn.b", rng.uniform(-0.5, 0.5, c), np.float32),
                 g.const("bn.m", rng.uniform(-0.5, 0.5, c), np.float32),
                 g.const("bn.v", rng.uniform(0.5, 1.5, c), np.float32)], epsilon=1e-3)
    e2 = g.node("Sigmoid", [e2])
    nc = g.node("Slice", [g.node("Shape", [e2]), g.const("s0", [0], np.int64),
                          g.const("s2", [2], np.int64)])
    hw = g.node("Slice", [g.node("Shape", [r]), "s2", g.const("s4", [4], np.int64)])
    sizes = g.node("Concat", [nc, hw], axis=0)
    u2 = g.node("Resize", [e2, "", "", sizes], mode="linear",
                coordinate_transformation_mode="align_corners")
    x = g.node("Add", [u2, r])
    g.nodes.append(helper.make_node("Tanh", [conv(x, "out", c, 3, 1)], ["output"], name="out"))
    inp = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, "h", "w"])
    out = helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 3, "h", "w"])
    return g.model([inp], [out], opset=13)


def inorm(reciprocal=False):
    """Instance norm decomposed as tf.nn.moments writes it, then gamma and beta; or with
    Reciprocal(Sqrt(.)) and no affine."""
    global rng
    rng = np.random.default_rng(SEED + 3 + reciprocal)
    g, c = Graph(), 4
    x = g.node("Transpose", ["input:0"], perm=[0, 3, 1, 2])
    x = g.node("Conv", [x, g.w("c0.w", [c, 3, 3, 3]), g.w("c0.b", [c])], kernel_shape=[3, 3],
               pads=[1, 1, 1, 1])
    mean = g.node("ReduceMean", [x], axes=[2, 3], keepdims=1)
    sub = g.node("Sub", [x, mean])
    var = g.node("ReduceMean", [g.node("Mul", [sub, sub])], axes=[2, 3], keepdims=1)
    std = g.node("Sqrt", [g.node("Add", [g.const("eps", np.array(1e-3, np.float32)), var])])
    if reciprocal:
        x = g.node("Mul", [g.node("Reciprocal", [std]), sub])
    else:
        x = g.node("Div", [sub, std])
        x = g.node("Mul", [x, g.const("gamma", rng.uniform(0.5, 1.5, (1, c, 1, 1)), np.float32)])
        x = g.node("Add", [g.const("beta", rng.uniform(-0.5, 0.5, (1, c, 1, 1)), np.float32), x])
    x = g.node("LeakyRelu", [x], alpha=0.1)
    x = g.node("Tanh", [g.node("Conv", [x, g.w("out.w", [3, c, 1, 1])], kernel_shape=[1, 1])])
    g.nodes.append(helper.make_node("Transpose", [x], ["output:0"], perm=[0, 2, 3, 1]))
    out = helper.make_tensor_value_info("output:0", TensorProto.FLOAT, [1, "h", "w", 3])
    return g.model([nhwc_input()], [out], opset=13)


def fp16_weights(model):
    """Every 4-D float weight stored as FLOAT16 and Cast to float where it is read, as fp16
    weight-only exports are."""
    graph = model.graph
    halves = {}
    for t in graph.initializer:
        if t.data_type == TensorProto.FLOAT and len(t.dims) == 4:
            a = numpy_helper.to_array(t).astype(np.float16)
            t.CopyFrom(numpy_helper.from_array(a, t.name))
            halves[t.name] = t.name + ":f32"
    casts = [helper.make_node("Cast", [n], [f], name="cast/" + n, to=TensorProto.FLOAT)
             for n, f in halves.items()]
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in halves:
                node.input[i] = halves[name]
    nodes = casts + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    return model


def two_nodes(op="Tanh", **attrs):
    """input -> Transpose -> op -> Transpose -> output."""
    g = Graph()
    x = g.node("Transpose", ["input:0"], perm=[0, 3, 1, 2])
    x = g.node(op, [x], name="odd", **attrs)
    g.nodes.append(helper.make_node("Transpose", [x], ["output:0"], perm=[0, 2, 3, 1]))
    out = helper.make_tensor_value_info("output:0", TensorProto.FLOAT, [1, "h", "w", 3])
    return g.model([nhwc_input()], [out])


def cyclic():
    """a = Add(input, b); b = Tanh(a): a cycle, written in that order."""
    g = Graph()
    nodes = [helper.make_node("Add", ["input:0", "b"], ["a"], name="a"),
             helper.make_node("Tanh", ["a"], ["b"], name="b")]
    out = helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, "h", "w", 3])
    graph = helper.make_graph(nodes, "cyclic", [nhwc_input()], [out], g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    return model


def with_initializer(model, name, mutate):
    for t in model.graph.initializer:
        if t.name == name:
            mutate(t)
    return model


def external(t):
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    entry = t.external_data.add()
    entry.key, entry.value = "location", "weights.bin"


def absurd_dims(t):
    del t.dims[:]
    t.dims.extend([1 << 40, 4, 3, 3])


def huge_dims(t):
    """Each dimension sane, their product far past the file."""
    del t.dims[:]
    t.dims.extend([1 << 20, 1 << 20, 3, 3])


def too_many_dims(t):
    del t.dims[:]
    t.dims.extend([1] * 9)


def as_double(t):
    t.data_type = TensorProto.DOUBLE


def short_raw(t):
    t.raw_data = t.raw_data[:-4]


def int_weight(t):
    t.data_type = TensorProto.INT64
    t.raw_data = np.zeros(int(np.prod(t.dims)), np.int64).tobytes()


def typed_floats(t):
    """The same weight in float_data instead of raw_data."""
    values = numpy_helper.to_array(t).ravel().tolist()
    t.ClearField("raw_data")
    t.float_data.extend(values)


def colliding_names():
    """mini_v3 with every node named 'a' * 61 + '~3': the third graph node's first rename
    candidate was its own name, which looped forever at load (issue 17, finding 6)."""
    model = mini_v3()
    for n in model.graph.node:
        n.name = "a" * 61 + "~3"
    return model


def main():
    os.makedirs(OUT, exist_ok=True)
    files = {
        "mini_v3.onnx": mini_v3(),
        "mini_v3_float_data.onnx": with_initializer(mini_v3(), "enc0.w", typed_floats),
        "mini_v3_fp16.onnx": fp16_weights(mini_v3()),
        "ea_block.onnx": ea_block(),
        "ea_block_transpose.onnx": ea_block(transpose_node=True),
        "torch_style.onnx": torch_style(),
        "inorm.onnx": inorm(),
        "inorm_reciprocal.onnx": inorm(reciprocal=True),
        "bad_lade_bias.onnx": mini_v3(lade_bias="lade.b"),
        "bad_fixed_size.onnx": mini_v3(fixed_size=True),
        "bad_unknown_op.onnx": two_nodes("GridSample"),
        "bad_cyclic.onnx": cyclic(),
        "bad_external.onnx": with_initializer(mini_v3(), "enc1.w", external),
        "bad_absurd_dims.onnx": with_initializer(mini_v3(), "enc1.w", absurd_dims),
        "bad_nine_dims.onnx": with_initializer(mini_v3(), "enc1.w", too_many_dims),
        "bad_huge_tensor.onnx": with_initializer(mini_v3(), "enc1.w", huge_dims),
        "bad_double.onnx": with_initializer(mini_v3(), "enc1.w", as_double),
        "bad_short_raw.onnx": with_initializer(mini_v3(), "enc1.w", short_raw),
        "bad_int_weight.onnx": with_initializer(mini_v3(), "enc1.w", int_weight),
        "bad_alpha_type.onnx": two_nodes("LeakyRelu", alpha=2),
        "bad_nearest.onnx": None,
        "colliding_names.onnx": colliding_names(),
    }
    model = mini_v3()
    for n in model.graph.node:
        if n.op_type == "Resize":
            for a in n.attribute:
                if a.name == "mode":
                    a.s = b"cubic"
    files["bad_cubic.onnx"] = model
    del files["bad_nearest.onnx"]
    for name, model in files.items():
        data = model.SerializeToString()
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        print("%-28s %6d bytes" % (name, len(data)))


if __name__ == "__main__":
    main()
