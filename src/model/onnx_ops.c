/*
 * onnx_ops.c - the ONNX importer's ops: one function per ONNX op type, from the node's
 * inputs and attributes to values (constants, symbolic shapes, expressions, padded maps)
 * and graph nodes; the shape arithmetic (Shape, Gather, Slice, Squeeze, Concat, Mul on
 * shapes) folds a Resize's sizes to "2x its input" or "the size of map m".
 */
#include "onnx_import_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- reading inputs and attributes -------------------------------------------------------- */

static const ag_onnx_attr *attr(const imp *im, const char *name) {
    const ag_onnx_node *n = ag_oi_onnx_node(im, im->cur);
    for (int i = 0; i < n->attr_count; i++)
        if (ag_pb_span_eq(im->m->attrs[n->attr_first + i].name, name))
            return &im->m->attrs[n->attr_first + i];
    return NULL;
}

static int attr_int(imp *im, const char *name, int64_t fallback, int64_t *out) {
    const ag_onnx_attr *a = attr(im, name);
    *out = fallback;
    if (!a)
        return AG_OK;
    if (a->type != AG_ONNX_ATTR_INT)
        return REFUSE("attribute '%s' is not an INT", name);
    *out = a->i;
    return AG_OK;
}

static int attr_float(imp *im, const char *name, float fallback, float *out) {
    const ag_onnx_attr *a = attr(im, name);
    *out = fallback;
    if (!a)
        return AG_OK;
    if (a->type != AG_ONNX_ATTR_FLOAT)
        return REFUSE("attribute '%s' is not a FLOAT", name);
    *out = a->f;
    return AG_OK;
}

/* A STRING attribute compared with `text` (absent: `fallback`). */
static int attr_string(imp *im, const char *name, const char *fallback, ag_pb_span *out) {
    const ag_onnx_attr *a = attr(im, name);
    *out = (ag_pb_span){(const uint8_t *)fallback, strlen(fallback)};
    if (!a)
        return AG_OK;
    if (a->type != AG_ONNX_ATTR_STRING)
        return REFUSE("attribute '%s' is not a STRING", name);
    *out = a->s;
    return AG_OK;
}

/* An INTS attribute of at most max; *count -1 when absent. */
static int attr_ints(imp *im, const char *name, int64_t *out, int max, int *count) {
    const ag_onnx_attr *a = attr(im, name);
    *count = -1;
    if (!a)
        return AG_OK;
    if (a->type != AG_ONNX_ATTR_INTS || a->count > max)
        return REFUSE("attribute '%s' is not a list of at most %d INTS", name, max);
    return ag_onnx_attr_ints(a, out, max, count) == AG_OK
               ? AG_OK
               : REFUSE("attribute '%s' is malformed", name);
}

/* Value of input i of the current node, NULL when absent. */
static value *input(imp *im, int i) {
    const ag_onnx_node *n = ag_oi_onnx_node(im, im->cur);
    if (i >= n->input_count || im->m->names[n->input_first + i].len == 0)
        return NULL;
    int v = ag_oi_lookup(im, im->m->names[n->input_first + i]);
    return v >= 0 ? &im->vals[v] : NULL;
}

/* The integers of a constant input (shape constants: pads, axes, starts). */
static int const_ints(imp *im, const value *v, int64_t *out, int max, int *count) {
    if (!v || v->kind != V_CONST)
        return REFUSE("an integer input is not a constant");
    const ag_onnx_tensor *t = &im->m->tensors[v->tensor];
    if (t->count > max || t->ndim > 1)
        return REFUSE("an integer constant of %lld values", (long long)t->count);
    if (ag_onnx_tensor_ints(t, out, max, im->label, im->err) != AG_OK)
        return REFUSE("constant '%.*s' is not an integer tensor", AG_PB_SPAN_ARG(t->name));
    *count = (int)t->count;
    return AG_OK;
}

/* A value as a shape: itself, or an integer constant of rank 0 or 1. */
static int as_shape(imp *im, const value *v, value *out) {
    if (v && v->kind == V_SHAPE) {
        *out = *v;
        return AG_OK;
    }
    if (!v || v->kind != V_CONST)
        return REFUSE("a shape input is neither a shape nor a constant");
    const ag_onnx_tensor *t = &im->m->tensors[v->tensor];
    int64_t ints[MAX_SYM];
    float floats[MAX_SYM];
    if (t->count > MAX_SYM || t->ndim > 1)
        return REFUSE("a shape constant of %lld values", (long long)t->count);
    memset(out, 0, sizeof *out);
    out->kind = V_SHAPE;
    out->rank = t->ndim;
    out->n = (int)t->count;
    if (t->data_type == AG_ONNX_INT64 || t->data_type == AG_ONNX_INT32) {
        if (ag_onnx_tensor_ints(t, ints, MAX_SYM, im->label, im->err) != AG_OK)
            return AG_E_FORMAT;
    } else {
        if (ag_onnx_tensor_floats(t, floats, im->label, im->err) != AG_OK)
            return AG_E_FORMAT;
        for (int i = 0; i < out->n; i++) {
            if (!(fabsf(floats[i]) < 1e9f) || floats[i] != floorf(floats[i]))
                return REFUSE("a shape constant %g is not an integer", (double)floats[i]);
            ints[i] = (int64_t)floats[i];
        }
    }
    for (int i = 0; i < out->n; i++)
        out->s[i] = (sym){-1, 0, ints[i]};
    return AG_OK;
}

static bool is_seq(layout lay) {
    return lay == L_SEQ || lay == L_SEQT;
}

/* The channel axis of a value of layout lay and rank (4 unless a row sequence). */
static int channel_axis(layout lay, int rank) {
    return lay == L_NCHW ? 1 : lay == L_SEQT ? rank - 2 : rank - 1;
}

/* The expression of an operand; a constant is read in the layout `lay` of the other one,
 * where only the channel axis may exceed 1. */
static int operand_expr(imp *im, const value *v, layout lay, int seq_rank, int *e) {
    if (v->kind == V_EXPR) {
        *e = v->expr;
        return AG_OK;
    }
    if (v->kind != V_CONST || v->transposed)
        return REFUSE("an operand is not a map, a statistic or a constant");
    const ag_onnx_tensor *t = &im->m->tensors[v->tensor];
    int rank = is_seq(lay) ? seq_rank : 4, chan_axis = channel_axis(lay, rank);
    if (t->ndim > rank || t->count < 1 || t->count > MAX_CONST_FLOATS)
        return REFUSE("a constant of shape rank %d, %lld values, broadcast to a map", t->ndim,
                      (long long)t->count);
    if (t->count > 1) {
        if (lay == L_NONE)
            return REFUSE("two constants combined");
        for (int i = 0; i < t->ndim; i++) {
            int axis = rank - t->ndim + i;
            if (t->dims[i] != 1 && axis != chan_axis)
                return REFUSE("a constant that varies along an axis other than channels");
        }
    }
    float *values = ag_malloc((size_t)t->count * sizeof *values);
    if (!values)
        return ag_oi_nomem(im);
    int rc = ag_onnx_tensor_floats(t, values, im->label, im->err);
    if (rc == AG_OK) {
        *e = ag_oi_const_expr(im, values, (int)t->count);
        rc = *e < 0 ? im->err->code : AG_OK;
    }
    ag_free(values);
    return rc;
}

static value *out_value(imp *im, int i) {
    const ag_onnx_node *n = ag_oi_onnx_node(im, im->cur);
    int v = ag_oi_lookup(im, im->m->names[n->output_first + i]);
    return &im->vals[v];
}

/* Sets output 0 to an expression in layout lay. */
static int set_expr(imp *im, int e, layout lay, int rank) {
    if (e < 0)
        return im->err->code ? im->err->code : AG_E_NOMEM;
    value *o = out_value(im, 0);
    o->kind = V_EXPR;
    o->expr = e;
    o->lay = lay;
    o->rank = rank;
    return AG_OK;
}

static int map_input(imp *im, int i, value **v) {
    *v = input(im, i);
    if (!*v || (*v)->kind != V_EXPR || im->ex[(*v)->expr].vary != VARY_MAP)
        return REFUSE("input %d is not a feature map", i);
    return AG_OK;
}

/* ---- ops ------------------------------------------------------------------------------ */

static int op_alias(imp *im) {
    value *in = input(im, 0);
    if (!in)
        return REFUSE("no input");
    *out_value(im, 0) = *in;
    return AG_OK;
}

static int op_cast(imp *im) {
    value *in = input(im, 0);
    int64_t to;
    int rc = attr_int(im, "to", 0, &to);
    if (rc)
        return rc;
    if (!in)
        return REFUSE("no input");
    if (in->kind == V_EXPR && to != AG_ONNX_FLOAT)
        return REFUSE("a feature map cast to type %lld", (long long)to);
    if (in->kind == V_CONST) {
        /* fp16 weights cast to float stay the file's fp16 (widened when the model is
         * built); an integer cast of a small constant is shape arithmetic. */
        int32_t type = im->m->tensors[in->tensor].data_type;
        bool is_float = type == AG_ONNX_FLOAT || type == AG_ONNX_FLOAT16;
        if (to == AG_ONNX_FLOAT && is_float) {
            *out_value(im, 0) = *in;
            return AG_OK;
        }
        if (to != AG_ONNX_INT64 && to != AG_ONNX_INT32 && to != AG_ONNX_FLOAT)
            return REFUSE("a constant cast to type %lld", (long long)to);
        value s;
        if ((rc = as_shape(im, in, &s)) != AG_OK)
            return rc;
        *out_value(im, 0) = s;
        return AG_OK;
    }
    *out_value(im, 0) = *in;
    return AG_OK;
}

static int op_transpose(imp *im) {
    value *in = input(im, 0);
    int64_t perm[8];
    int n, rc = attr_ints(im, "perm", perm, 8, &n);
    if (rc)
        return rc;
    if (!in)
        return REFUSE("no input");
    value out = *in;
    if (in->kind == V_CONST) {
        const ag_onnx_tensor *t = &im->m->tensors[in->tensor];
        if (t->ndim != 2 || (n >= 0 && (n != 2 || perm[0] != 1 || perm[1] != 0)))
            return REFUSE("a transpose of a constant other than a matrix");
        out.transposed = !in->transposed;
    } else if (in->kind == V_EXPR && is_seq(in->lay)) {
        /* (1, N, C) <-> (1, C, N), or (N, C) <-> (C, N) */
        bool swap = in->rank == 3 ? n == 3 && perm[0] == 0 && perm[1] == 2 && perm[2] == 1
                                  : n < 0 || (n == 2 && perm[0] == 1 && perm[1] == 0);
        if (!swap)
            return REFUSE("a transpose of rows of pixels other than swapping the last two axes");
        out.lay = in->lay == L_SEQ ? L_SEQT : L_SEQ;
    } else if ((in->kind == V_EXPR || in->kind == V_PADDED) &&
               (in->lay == L_NCHW || in->lay == L_NHWC) && n == 4) {
        bool to_nchw = perm[0] == 0 && perm[1] == 3 && perm[2] == 1 && perm[3] == 2;
        bool to_nhwc = perm[0] == 0 && perm[1] == 2 && perm[2] == 3 && perm[3] == 1;
        bool same = perm[0] == 0 && perm[1] == 1 && perm[2] == 2 && perm[3] == 3;
        if (!same && !(to_nchw && in->lay == L_NHWC) && !(to_nhwc && in->lay == L_NCHW))
            return REFUSE("a transpose other than NHWC <-> NCHW");
        if (!same)
            out.lay = to_nchw ? L_NCHW : L_NHWC;
    } else {
        return REFUSE("a transpose of this kind of value");
    }
    *out_value(im, 0) = out;
    return AG_OK;
}

static int spatial_axes(layout lay, int *h, int *w) {
    *h = lay == L_NCHW ? 2 : 1;
    *w = *h + 1;
    return lay == L_NCHW || lay == L_NHWC;
}

static int op_pad(imp *im) {
    value *in;
    int rc = map_input(im, 0, &in);
    if (rc)
        return rc;
    ag_pb_span mode;
    int64_t pads[8];
    int n = -1;
    if ((rc = attr_string(im, "mode", "constant", &mode)) != AG_OK)
        return rc;
    if (im->m->opset < 11) {
        if ((rc = attr_ints(im, "pads", pads, 8, &n)) != AG_OK)
            return rc;
        float v;
        if ((rc = attr_float(im, "value", 0.0f, &v)) != AG_OK)
            return rc;
        if (v != 0.0f)
            return REFUSE("constant padding with %g", (double)v);
    } else {
        if ((rc = const_ints(im, input(im, 1), pads, 8, &n)) != AG_OK)
            return rc;
        value *cv = input(im, 2);
        if (cv) {
            int e;
            float v;
            if ((rc = operand_expr(im, cv, L_NONE, 4, &e)) != AG_OK)
                return rc;
            if (!ag_oi_is_scalar(im, e, &v) || v != 0.0f)
                return REFUSE("constant padding with a value other than 0");
        }
        if (input(im, 3))
            return REFUSE("padding with axes");
    }
    int h, w;
    if (n != 8 || !spatial_axes(in->lay, &h, &w))
        return REFUSE("pads of a map that is not 4-D");
    for (int i = 0; i < 8; i++)
        if (pads[i] < 0 || pads[i] > 64 || ((i % 4 != h && i % 4 != w) && pads[i] != 0))
            return REFUSE("pads %lld on axis %d", (long long)pads[i], i % 4);
    value out = *in;
    out.pad[0] = (int)pads[h], out.pad[1] = (int)pads[h + 4];
    out.pad[2] = (int)pads[w], out.pad[3] = (int)pads[w + 4];
    if (ag_pb_span_eq(mode, "reflect"))
        out.pad_mode = AG_PAD_REFLECT;
    else if (ag_pb_span_eq(mode, "constant"))
        out.pad_mode = AG_PAD_ZERO;
    else
        return REFUSE("pad mode '%.*s'", AG_PB_SPAN_ARG(mode));
    if (out.pad[0] || out.pad[1] || out.pad[2] || out.pad[3])
        out.kind = V_PADDED;
    *out_value(im, 0) = out;
    return AG_OK;
}

/* A float constant input of rank `ndim` (-1 any), as a model tensor index; only a matrix
 * may be a transposed view. */
static int weight_input(imp *im, int i, int ndim, const ag_onnx_tensor **t) {
    value *v = input(im, i);
    if (!v || v->kind != V_CONST || (v->transposed && ndim != 2))
        return REFUSE("input %d is not a constant weight", i);
    *t = &im->m->tensors[v->tensor];
    if ((ndim >= 0 && (*t)->ndim != ndim) ||
        ((*t)->data_type != AG_ONNX_FLOAT && (*t)->data_type != AG_ONNX_FLOAT16))
        return REFUSE("weight '%.*s' is not a %d-D float tensor", AG_PB_SPAN_ARG((*t)->name), ndim);
    return v->tensor;
}

static int op_conv(imp *im) {
    value *in = input(im, 0);
    if (!in || (in->kind != V_EXPR && in->kind != V_PADDED) || im->ex[in->expr].vary != VARY_MAP)
        return REFUSE("input 0 is not a feature map");
    if (in->lay != L_NCHW)
        return REFUSE("its input is not in NCHW layout");
    const ag_onnx_tensor *w, *b = NULL;
    int wt = weight_input(im, 1, 4, &w), bt = -1;
    if (wt < 0)
        return im->err->code;
    if (input(im, 2) && (bt = weight_input(im, 2, 1, &b)) < 0)
        return im->err->code;
    int64_t strides[4], dil[4], pads[8], kernel[4], group;
    int ns, nd, np, nk, rc;
    ag_pb_span auto_pad;
    if ((rc = attr_ints(im, "strides", strides, 4, &ns)) ||
        (rc = attr_ints(im, "dilations", dil, 4, &nd)) ||
        (rc = attr_ints(im, "pads", pads, 8, &np)) ||
        (rc = attr_ints(im, "kernel_shape", kernel, 4, &nk)) ||
        (rc = attr_int(im, "group", 1, &group)) ||
        (rc = attr_string(im, "auto_pad", "NOTSET", &auto_pad)))
        return rc;
    int64_t oc = w->dims[0], k = w->dims[2];
    if (w->dims[2] != w->dims[3] || k < 1 || k > 11)
        return REFUSE("a %lldx%lld kernel", (long long)w->dims[2], (long long)w->dims[3]);
    if (nk >= 0 && (nk != 2 || kernel[0] != k || kernel[1] != k))
        return REFUSE("kernel_shape does not match the weight");
    if (ns >= 0 && (ns != 2 || strides[0] != strides[1] || strides[0] < 1 || strides[0] > 4))
        return REFUSE("strides other than equal ones of 1..4");
    if (nd >= 0 && (nd != 2 || dil[0] != 1 || dil[1] != 1))
        return REFUSE("dilated convolution");
    if (!ag_pb_span_eq(auto_pad, "NOTSET") && !ag_pb_span_eq(auto_pad, "VALID"))
        return REFUSE("auto_pad %.*s", AG_PB_SPAN_ARG(auto_pad));
    int c = im->ex[in->expr].chan;
    if (group < 1 || group > 4096 || c % group || w->dims[1] * group != c || oc % group)
        return REFUSE("a weight for %lld x %lld input channels, the input has %d",
                      (long long)w->dims[1], (long long)group, c);
    if (b && b->dims[0] != oc)
        return REFUSE("a bias of %lld for %lld channels", (long long)b->dims[0], (long long)oc);
    int own[4] = {0, 0, 0, 0}; /* top, bottom, left, right */
    if (np >= 0) {
        if (np != 4)
            return REFUSE("pads of %d values", np);
        for (int i = 0; i < 4; i++)
            if (pads[i] < 0 || pads[i] > 64)
                return REFUSE("pads %lld", (long long)pads[i]);
        own[0] = (int)pads[0], own[2] = (int)pads[1], own[1] = (int)pads[2], own[3] = (int)pads[3];
    }
    bool own_any = own[0] || own[1] || own[2] || own[3];
    ag_node n = ag_node_make(AG_OP_CONV, "", -1, -1);
    n.pad_mode = AG_PAD_ZERO;
    if (in->kind == V_PADDED) {
        if (in->pad_mode == AG_PAD_REFLECT && own_any)
            return REFUSE("reflect padding followed by a conv's own zero padding");
        n.pad_mode = in->pad_mode;
        for (int i = 0; i < 4; i++)
            n.pad[i] = in->pad[i];
    }
    for (int i = 0; i < 4; i++)
        n.pad[i] += own[i];
    n.src[0] = ag_oi_materialize(im, in->expr, 0);
    if (n.src[0] < 0)
        return im->err->code;
    n.k = (int)k;
    n.stride = ns >= 0 ? (int)strides[0] : 1;
    n.groups = (int)group;
    n.in_c = c;
    n.out_c = (int)oc;
    if ((n.tensor[AG_T_WEIGHT] = ag_oi_use_tensor(im, wt)) < 0 ||
        (bt >= 0 && (n.tensor[AG_T_BIAS] = ag_oi_use_tensor(im, bt)) < 0))
        return im->err->code;
    int node = ag_oi_emit(im, &n, im->cur);
    return node < 0 ? im->err->code : set_expr(im, ag_oi_map_expr(im, node), L_NCHW, 4);
}

static int op_activation(imp *im, ag_op op) {
    value *in;
    int rc = map_input(im, 0, &in);
    if (rc)
        return rc;
    ag_node n = ag_node_make(op, "", -1, -1);
    if (op == AG_OP_LRELU && (rc = attr_float(im, "alpha", 0.01f, &n.alpha)) != AG_OK)
        return rc;
    if ((n.src[0] = ag_oi_materialize(im, in->expr, 0)) < 0)
        return im->err->code;
    n.out_c = ag_oi_channels_of(im, n.src[0]);
    int node = ag_oi_emit(im, &n, im->cur);
    return node < 0 ? im->err->code : set_expr(im, ag_oi_map_expr(im, node), in->lay, in->rank);
}

/* PRelu with a per-channel (or single) slope: AG_OP_PRELU, the slope as a C-vector. */
static int op_prelu(imp *im) {
    value *in, *slope = input(im, 1);
    int rc = map_input(im, 0, &in);
    if (rc)
        return rc;
    if (!slope)
        return REFUSE("no slope");
    int e, c = im->ex[in->expr].chan;
    if ((rc = operand_expr(im, slope, in->lay, in->rank, &e)) != AG_OK)
        return rc;
    if (!ag_oi_is_const(im, e) || (im->ex[e].cn != 1 && im->ex[e].cn != c) || c > MAX_CONST_FLOATS)
        return REFUSE("a slope that is not one value per channel");
    float *v = ag_malloc((size_t)c * sizeof *v);
    if (!v)
        return ag_oi_nomem(im);
    for (int i = 0; i < c; i++)
        v[i] = im->ex[e].c[im->ex[e].cn == 1 ? 0 : i];
    ag_node n = ag_node_make(AG_OP_PRELU, "", -1, -1);
    n.tensor[AG_T_GAMMA] = ag_oi_derived_tensor(im, "slope", v, c);
    ag_free(v);
    if (n.tensor[AG_T_GAMMA] < 0 || (n.src[0] = ag_oi_materialize(im, in->expr, 0)) < 0)
        return im->err->code;
    n.out_c = c;
    int node = ag_oi_emit(im, &n, im->cur);
    return node < 0 ? im->err->code : set_expr(im, ag_oi_map_expr(im, node), in->lay, in->rank);
}

/* Clip to [0, 6] is ReLU6, to [0, +inf) ReLU; bounds are attributes before opset 11. */
static int op_clip(imp *im) {
    float lo = -INFINITY, hi = INFINITY;
    int rc;
    if (im->m->opset < 11) {
        if ((rc = attr_float(im, "min", -INFINITY, &lo)) ||
            (rc = attr_float(im, "max", INFINITY, &hi)))
            return rc;
    } else {
        for (int i = 1; i <= 2; i++) {
            value *b = input(im, i);
            int e;
            float v;
            if (!b)
                continue;
            if ((rc = operand_expr(im, b, L_NONE, 4, &e)) != AG_OK)
                return rc;
            if (!ag_oi_is_scalar(im, e, &v))
                return REFUSE("a bound that is not one constant");
            *(i == 1 ? &lo : &hi) = v;
        }
    }
    if (lo != 0.0f || (hi != 6.0f && hi != INFINITY))
        return REFUSE("a clip to [%g, %g] (only [0, 6] and [0, inf))", (double)lo, (double)hi);
    return op_activation(im, hi == 6.0f ? AG_OP_RELU6 : AG_OP_RELU);
}

/* Elementwise product of two shapes (one may be a single element). */
static int shape_mul(imp *im, const value *a, const value *b) {
    value x, y;
    int rc;
    if ((rc = as_shape(im, a, &x)) || (rc = as_shape(im, b, &y)))
        return rc;
    if (x.n != y.n && x.n != 1 && y.n != 1)
        return REFUSE("shapes of %d and %d elements multiplied", x.n, y.n);
    value out = x.n >= y.n ? x : y;
    out.rank = x.rank > y.rank ? x.rank : y.rank;
    for (int i = 0; i < out.n; i++) {
        sym p = x.s[x.n == 1 ? 0 : i], q = y.s[y.n == 1 ? 0 : i];
        if (p.node >= 0 && q.node >= 0)
            return REFUSE("a product of two image dimensions");
        sym r = p.node >= 0 ? p : q;
        int64_t k = p.node >= 0 ? q.v : q.node >= 0 ? p.v : q.v;
        int64_t base = p.node >= 0 ? p.v : q.node >= 0 ? q.v : p.v;
        if (k > 1000000 || k < -1000000 || base > 1000000 || base < -1000000)
            return REFUSE("a shape element out of range");
        r.v = base * k;
        out.s[i] = r;
    }
    *out_value(im, 0) = out;
    return AG_OK;
}

static int op_binary(imp *im, ekind k) {
    value *a = input(im, 0), *b = input(im, 1);
    if (!a || !b)
        return REFUSE("an input is missing");
    if (a->kind == V_SHAPE || b->kind == V_SHAPE ||
        (a->kind == V_CONST && b->kind == V_CONST && k == E_MUL)) {
        if (k != E_MUL)
            return REFUSE("shape arithmetic other than a product");
        return shape_mul(im, a, b);
    }
    layout lay = a->kind == V_EXPR ? a->lay : b->kind == V_EXPR ? b->lay : L_NONE;
    int rank = a->kind == V_EXPR ? a->rank : b->kind == V_EXPR ? b->rank : 0;
    if (a->kind == V_EXPR && b->kind == V_EXPR && a->lay != b->lay)
        return REFUSE("operands in different layouts");
    int ea, eb, rc;
    if ((rc = operand_expr(im, a, lay, rank, &ea)) || (rc = operand_expr(im, b, lay, rank, &eb)))
        return rc;
    int ca = im->ex[ea].chan, cb = im->ex[eb].chan;
    if (ca && cb && ca != cb)
        return REFUSE("operands of %d and %d channels", ca, cb);
    int e = ag_oi_new_expr(im, k, ea, eb);
    if (e < 0)
        return im->err->code;
    im->ex[e].vary = im->ex[ea].vary | im->ex[eb].vary;
    im->ex[e].chan = ca ? ca : cb;
    return set_expr(im, e, lay, rank);
}

static int op_unary_expr(imp *im, ekind k) {
    value *in = input(im, 0);
    if (!in || in->kind != V_EXPR)
        return REFUSE("input 0 is not a map or a statistic");
    int a = in->expr, e;
    if (k == E_DIV) { /* Reciprocal */
        float one = 1.0f;
        int c = ag_oi_const_expr(im, &one, 1);
        if (c < 0)
            return im->err->code;
        e = ag_oi_new_expr(im, E_DIV, c, a);
    } else {
        e = ag_oi_new_expr(im, k, a, -1);
    }
    if (e < 0)
        return im->err->code;
    im->ex[e].vary = im->ex[a].vary;
    im->ex[e].chan = im->ex[a].chan;
    return set_expr(im, e, in->lay, in->rank);
}

/* Axes of a reduction: attribute (before opset 18 for ReduceMean, 13 for ReduceSum) or
 * input 1. */
static int reduce_axes(imp *im, int input_from_opset, int64_t *axes, int *n) {
    if (im->m->opset >= input_from_opset)
        return input(im, 1) ? const_ints(im, input(im, 1), axes, 8, n) : (*n = -1, AG_OK);
    return attr_ints(im, "axes", axes, 8, n);
}

static bool axes_are(const int64_t *axes, int n, int rank, int a0, int a1) {
    int want = a1 >= 0 ? 2 : 1, seen = 0;
    if (n != want)
        return false;
    for (int i = 0; i < n; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
        seen += a == a0 || a == a1;
    }
    return seen == want && (want == 1 || axes[0] != axes[1]);
}

static int op_reduce(imp *im, bool mean, bool global) {
    value *in = input(im, 0);
    if (!in || in->kind != V_EXPR || !(im->ex[in->expr].vary & VARY_PIXEL))
        return REFUSE("input 0 is not a feature map");
    int64_t axes[8], keep = 1;
    int n = 0, rc, rank = is_seq(in->lay) ? in->rank : 4, h, w;
    if (!global && ((rc = reduce_axes(im, mean ? 18 : 13, axes, &n)) != AG_OK ||
                    (rc = attr_int(im, "keepdims", 1, &keep)) != AG_OK))
        return rc;
    if (keep != 1)
        return REFUSE("a reduction without keepdims");
    ekind k;
    if (global) {
        if (in->lay != L_NCHW)
            return REFUSE("its input is not in NCHW layout");
        k = E_MEAN;
    } else if (spatial_axes(in->lay, &h, &w) && axes_are(axes, n, 4, h, w)) {
        k = E_MEAN;
    } else if (axes_are(axes, n, rank, channel_axis(in->lay, rank), -1)) {
        k = E_CSUM;
    } else {
        return REFUSE("a reduction over axes other than H, W or the channels");
    }
    if (k == E_MEAN && !mean)
        return REFUSE("a sum over H and W");
    if (k == E_CSUM && mean)
        return REFUSE("a mean over the channels");
    int e = ag_oi_new_expr(im, k, in->expr, -1);
    if (e < 0)
        return im->err->code;
    im->ex[e].vary = k == E_MEAN ? VARY_CHANNEL : VARY_PIXEL;
    im->ex[e].chan = k == E_MEAN ? im->ex[in->expr].chan : 0;
    return set_expr(im, e, in->lay, in->rank);
}

static int op_shape(imp *im) {
    value *in = input(im, 0);
    if (!in || (in->kind != V_EXPR && in->kind != V_PADDED) || im->ex[in->expr].vary != VARY_MAP)
        return REFUSE("the shape of something other than a feature map");
    if (in->kind == V_PADDED)
        return REFUSE("the shape of a padded map");
    int64_t start, end;
    int rc;
    if ((rc = attr_int(im, "start", 0, &start)) || (rc = attr_int(im, "end", 64, &end)))
        return rc;
    int node = ag_oi_materialize(im, in->expr, 0);
    if (node < 0)
        return im->err->code;
    value out = {.kind = V_SHAPE, .rank = 1};
    sym one = {-1, 0, 1}, c = {-1, 0, ag_oi_channels_of(im, node)};
    sym hh = {node, 'H', 1}, ww = {node, 'W', 1}, p = {node, 'P', 1};
    sym all[4];
    int n = 4;
    if (in->lay == L_NCHW)
        all[0] = one, all[1] = c, all[2] = hh, all[3] = ww;
    else if (in->lay == L_NHWC)
        all[0] = one, all[1] = hh, all[2] = ww, all[3] = c;
    else if (in->rank == 3 && in->lay == L_SEQ)
        all[0] = one, all[1] = p, all[2] = c, n = 3;
    else if (in->rank == 3)
        all[0] = one, all[1] = c, all[2] = p, n = 3;
    else if (in->lay == L_SEQ)
        all[0] = p, all[1] = c, n = 2;
    else
        all[0] = c, all[1] = p, n = 2;
    if (start < 0)
        start += n;
    if (end < 0)
        end += n;
    start = start < 0 ? 0 : start > n ? n : start;
    end = end < 0 ? 0 : end > n ? n : end;
    for (int64_t i = start; i < end; i++)
        out.s[out.n++] = all[i];
    *out_value(im, 0) = out;
    return AG_OK;
}

static int op_gather(imp *im) {
    value data, *idx = input(im, 1);
    int64_t axis, ind[MAX_SYM];
    int n, rc;
    if ((rc = attr_int(im, "axis", 0, &axis)) || (rc = as_shape(im, input(im, 0), &data)))
        return rc;
    if (axis != 0 || data.rank != 1)
        return REFUSE("a gather other than of shape elements");
    if ((rc = const_ints(im, idx, ind, MAX_SYM, &n)) != AG_OK)
        return rc;
    value out = {.kind = V_SHAPE, .rank = im->m->tensors[idx->tensor].ndim, .n = n};
    for (int i = 0; i < n; i++) {
        int64_t j = ind[i] < 0 ? ind[i] + data.n : ind[i];
        if (j < 0 || j >= data.n)
            return REFUSE("index %lld of %d shape elements", (long long)ind[i], data.n);
        out.s[i] = data.s[j];
    }
    *out_value(im, 0) = out;
    return AG_OK;
}

static int op_slice(imp *im) {
    value data;
    int64_t starts[1], ends[1], axes[1] = {0}, steps[1] = {1};
    int ns = 0, ne = 0, na = 1, nst = 1, rc;
    if ((rc = as_shape(im, input(im, 0), &data)) != AG_OK)
        return rc;
    if (im->m->opset >= 10) {
        if ((rc = const_ints(im, input(im, 1), starts, 1, &ns)) ||
            (rc = const_ints(im, input(im, 2), ends, 1, &ne)) ||
            (input(im, 3) && (rc = const_ints(im, input(im, 3), axes, 1, &na))) ||
            (input(im, 4) && (rc = const_ints(im, input(im, 4), steps, 1, &nst))))
            return rc;
    } else if ((rc = attr_ints(im, "starts", starts, 1, &ns)) ||
               (rc = attr_ints(im, "ends", ends, 1, &ne))) {
        return rc;
    }
    if (data.rank != 1 || ns != 1 || ne != 1 || na != 1 || nst != 1 || axes[0] != 0 ||
        steps[0] != 1)
        return REFUSE("a slice other than a range of shape elements");
    int64_t n = data.n, s = starts[0], e = ends[0];
    s = s < 0 ? s + n : s;
    e = e < 0 ? e + n : e;
    s = s < 0 ? 0 : s > n ? n : s;
    e = e < 0 ? 0 : e > n ? n : e;
    value out = {.kind = V_SHAPE, .rank = 1};
    for (int64_t i = s; i < e; i++)
        out.s[out.n++] = data.s[i];
    *out_value(im, 0) = out;
    return AG_OK;
}

static int op_squeeze(imp *im, bool squeeze) {
    value data;
    int rc = as_shape(im, input(im, 0), &data);
    if (rc)
        return rc;
    /* Axes (attribute before opset 13, else input 1) can only be [0] for a shape vector. */
    if (squeeze ? (data.rank != 1 || data.n != 1) : data.rank != 0)
        return REFUSE("a %s of a shape of rank %d", squeeze ? "squeeze" : "unsqueeze", data.rank);
    data.rank = squeeze ? 0 : 1;
    *out_value(im, 0) = data;
    return AG_OK;
}

static int op_concat(imp *im) {
    const ag_onnx_node *on = ag_oi_onnx_node(im, im->cur);
    int64_t axis;
    int rc = attr_int(im, "axis", 0, &axis);
    if (rc)
        return rc;
    value out = {.kind = V_SHAPE, .rank = 1};
    for (int i = 0; i < on->input_count; i++) {
        value part, *v = input(im, i);
        if (v && v->kind == V_EXPR)
            return REFUSE("a concatenation of feature maps");
        if ((rc = as_shape(im, v, &part)) != AG_OK)
            return rc;
        if (axis != 0 || part.rank != 1 || out.n + part.n > MAX_SYM)
            return REFUSE("a concatenation other than of shape vectors");
        for (int j = 0; j < part.n; j++)
            out.s[out.n++] = part.s[j];
    }
    *out_value(im, 0) = out;
    return AG_OK;
}

static int op_resize(imp *im) {
    value *in;
    int rc = map_input(im, 0, &in);
    if (rc)
        return rc;
    ag_pb_span mode, coord;
    if ((rc = attr_string(im, "mode", "nearest", &mode)) ||
        (rc = attr_string(im, "coordinate_transformation_mode",
                          im->m->opset < 11 ? "asymmetric" : "half_pixel", &coord)))
        return rc;
    if (!ag_pb_span_eq(mode, "linear"))
        return REFUSE("resize mode '%.*s' (only linear)", AG_PB_SPAN_ARG(mode));
    ag_node n = ag_node_make(AG_OP_RESIZE2X, "", -1, -1);
    if (ag_pb_span_eq(coord, "asymmetric"))
        n.mode = AG_RESIZE_ASYMMETRIC;
    else if (ag_pb_span_eq(coord, "align_corners"))
        n.mode = AG_RESIZE_ALIGN_CORNERS;
    else if (ag_pb_span_eq(coord, "half_pixel") || ag_pb_span_eq(coord, "pytorch_half_pixel"))
        n.mode = AG_RESIZE_HALF_PIXEL;
    else
        return REFUSE("coordinate_transformation_mode '%.*s'", AG_PB_SPAN_ARG(coord));
    int h, w;
    if (!spatial_axes(in->lay, &h, &w))
        return REFUSE("a resize of a map that is not 4-D");
    if ((n.src[0] = ag_oi_materialize(im, in->expr, 0)) < 0)
        return im->err->code;
    value *scales = input(im, im->m->opset < 11 ? 1 : 2), *sizes = input(im, 3);
    if (scales && scales->kind == V_CONST && im->m->tensors[scales->tensor].count == 0)
        scales = NULL;
    if (sizes) {
        value s;
        if ((rc = as_shape(im, sizes, &s)) != AG_OK)
            return rc;
        int c_axis = channel_axis(in->lay, 4);
        if (s.n != 4 || s.s[h].node < 0 || s.s[w].node < 0)
            return REFUSE("sizes that are not computed from a map's size");
        if (s.s[0].node >= 0 || s.s[0].v != 1 || s.s[c_axis].node >= 0 ||
            s.s[c_axis].v != ag_oi_channels_of(im, n.src[0]))
            return REFUSE("sizes that change the batch or the channels");
        sym sh = s.s[h], sw = s.s[w];
        if (sh.axis != 'H' || sw.axis != 'W' || sh.node != sw.node || sh.v != sw.v)
            return REFUSE("sizes that are not a map's height and width times one factor");
        if (sh.node == n.src[0] && sh.v == 2)
            n.op = AG_OP_RESIZE2X;
        else if (sh.v == 1 && sh.node != n.src[0])
            n.op = AG_OP_RESIZE, n.src[1] = sh.node;
        else
            return REFUSE("a resize by %lld", (long long)sh.v);
    } else if (scales && scales->kind == V_CONST) {
        const ag_onnx_tensor *t = &im->m->tensors[scales->tensor];
        float f[4];
        if (t->count != 4 || t->data_type != AG_ONNX_FLOAT)
            return REFUSE("scales that are not 4 floats");
        if ((rc = ag_onnx_tensor_floats(t, f, im->label, im->err)) != AG_OK)
            return rc;
        int c_axis = channel_axis(in->lay, 4);
        if (f[0] != 1.0f || f[c_axis] != 1.0f || f[h] != 2.0f || f[w] != 2.0f)
            return REFUSE("scales other than 2 on H and W");
    } else {
        return REFUSE("neither scales nor sizes");
    }
    n.out_c = ag_oi_channels_of(im, n.src[0]);
    int node = ag_oi_emit(im, &n, im->cur);
    return node < 0 ? im->err->code : set_expr(im, ag_oi_map_expr(im, node), in->lay, in->rank);
}

static int op_reshape(imp *im) {
    value *in = input(im, 0), s;
    int rc = as_shape(im, input(im, 1), &s);
    if (rc)
        return rc;
    if (!in || in->kind != V_EXPR)
        return REFUSE("a reshape of something other than a map or a statistic");
    const expr *x = &im->ex[in->expr];
    int c = x->chan;
    value out = *in;
    bool is_c[MAX_SYM], is_one[MAX_SYM];
    for (int i = 0; i < s.n; i++) {
        is_c[i] = s.s[i].node < 0 && s.s[i].v == c;
        is_one[i] = s.s[i].node < 0 && s.s[i].v == 1;
    }
    if (x->vary == VARY_CHANNEL && s.n == 4 && is_one[0] && is_one[2] &&
        ((is_c[1] && is_one[3]) || (is_one[1] && is_c[3]))) {
        /* (1, C, 1, 1) <-> (1, 1, 1, C): per-channel statistics change layout only. */
        out.lay = is_c[1] && !is_one[1] ? L_NCHW : L_NHWC;
    } else if (x->vary == VARY_MAP && in->lay == L_NHWC && (s.n == 2 || s.n == 3) &&
               is_c[s.n - 1] && (s.n == 2 || is_one[0])) {
        /* (1, H, W, C) -> (1, H*W, C) or (H*W, C): rows of pixels, the same NHWC data. */
        sym p = s.s[s.n - 2];
        if (!(p.node < 0 && p.v == -1) && !(p.axis == 'P' && p.v == 1))
            return REFUSE("a reshape that does not flatten H and W");
        out.lay = L_SEQ;
        out.rank = s.n;
    } else if (x->vary == VARY_MAP && in->lay == L_SEQ && s.n == 4 && is_c[3] &&
               s.s[1].axis == 'H' && s.s[2].axis == 'W' && s.s[1].node == s.s[2].node &&
               s.s[1].v == 1 && s.s[2].v == 1) {
        /* back to (1, H, W, C), H and W those of a map with the same pixels */
        out.lay = L_NHWC;
        out.rank = 4;
    } else {
        return REFUSE("a reshape other than of per-channel statistics or of pixels to rows and "
                      "back");
    }
    *out_value(im, 0) = out;
    return AG_OK;
}

static int op_matmul(imp *im) {
    value *in;
    int rc = map_input(im, 0, &in);
    if (rc)
        return rc;
    const ag_onnx_tensor *w;
    int wt = weight_input(im, 1, 2, &w);
    if (wt < 0)
        return im->err->code;
    if (in->lay != L_SEQ)
        return REFUSE("a matmul of a map not flattened to rows of pixels");
    bool t = input(im, 1)->transposed;
    int c = im->ex[in->expr].chan;
    if (w->dims[t ? 1 : 0] != c || w->dims[t ? 0 : 1] < 1 || w->dims[t ? 0 : 1] > 4096)
        return REFUSE("a (%lld, %lld) matrix for %d channels", (long long)w->dims[0],
                      (long long)w->dims[1], c);
    ag_node n = ag_node_make(AG_OP_MATMUL, "", -1, -1);
    if ((n.src[0] = ag_oi_materialize(im, in->expr, 0)) < 0)
        return im->err->code;
    n.transpose = t;
    n.in_c = c;
    n.out_c = (int)w->dims[t ? 0 : 1];
    if ((n.tensor[AG_T_WEIGHT] = ag_oi_use_tensor(im, wt)) < 0)
        return im->err->code;
    int node = ag_oi_emit(im, &n, im->cur);
    return node < 0 ? im->err->code : set_expr(im, ag_oi_map_expr(im, node), L_SEQ, in->rank);
}

static int op_softmax(imp *im) {
    value *in;
    int rc = map_input(im, 0, &in);
    if (rc)
        return rc;
    int64_t axis;
    if ((rc = attr_int(im, "axis", im->m->opset >= 13 ? -1 : 1, &axis)) != AG_OK)
        return rc;
    int rank = is_seq(in->lay) ? in->rank : 4;
    axis = axis < 0 ? axis + rank : axis;
    int chan_axis = channel_axis(in->lay, rank);
    int pixel_axis = in->lay == L_SEQ ? rank - 2 : in->lay == L_SEQT ? rank - 1 : -1;
    ag_node n = ag_node_make(AG_OP_SOFTMAX, "", -1, -1);
    /* Before opset 13 Softmax flattens every axis from `axis` on: one axis only if last. */
    if (axis == chan_axis && (im->m->opset >= 13 || axis == rank - 1))
        n.axis = AG_AXIS_CHANNEL;
    else if (axis == pixel_axis && (im->m->opset >= 13 || axis == rank - 1))
        n.axis = AG_AXIS_SPATIAL;
    else
        return REFUSE("a softmax over axis %lld of this layout", (long long)axis);
    if ((n.src[0] = ag_oi_materialize(im, in->expr, 0)) < 0)
        return im->err->code;
    n.out_c = ag_oi_channels_of(im, n.src[0]);
    int node = ag_oi_emit(im, &n, im->cur);
    return node < 0 ? im->err->code : set_expr(im, ag_oi_map_expr(im, node), in->lay, in->rank);
}

/* Per-channel vectors of a norm's constant inputs. */
static int channel_floats(imp *im, int i, int c, float *out) {
    const ag_onnx_tensor *t;
    if (weight_input(im, i, 1, &t) < 0)
        return im->err->code;
    if (t->count != c)
        return REFUSE("input %d has %lld values for %d channels", i, (long long)t->count, c);
    return ag_onnx_tensor_floats(t, out, im->label, im->err);
}

static int op_batch_norm(imp *im) {
    value *in;
    int rc = map_input(im, 0, &in);
    if (rc)
        return rc;
    if (in->lay != L_NCHW)
        return REFUSE("its input is not in NCHW layout");
    int c = im->ex[in->expr].chan;
    float eps;
    if (c < 1 || c > MAX_CONST_FLOATS)
        return REFUSE("%d channels", c);
    if ((rc = attr_float(im, "epsilon", 1e-5f, &eps)) != AG_OK)
        return rc;
    float *v = ag_malloc(4 * (size_t)c * sizeof *v);
    if (!v)
        return ag_oi_nomem(im);
    float *gamma = v, *beta = v + c, *mean = v + 2 * c, *var = v + 3 * c;
    if ((rc = channel_floats(im, 1, c, gamma)) || (rc = channel_floats(im, 2, c, beta)) ||
        (rc = channel_floats(im, 3, c, mean)) || (rc = channel_floats(im, 4, c, var))) {
        ag_free(v);
        return rc;
    }
    for (int i = 0; i < c; i++) {
        gamma[i] = gamma[i] / sqrtf(var[i] + eps);
        beta[i] -= mean[i] * gamma[i];
    }
    int s = ag_oi_const_expr(im, gamma, c), b = s < 0 ? -1 : ag_oi_const_expr(im, beta, c);
    ag_free(v);
    int mul = b < 0 ? -1 : ag_oi_new_expr(im, E_MUL, in->expr, s);
    if (mul < 0)
        return im->err->code;
    im->ex[mul].vary = VARY_MAP, im->ex[mul].chan = c;
    int add = ag_oi_new_expr(im, E_ADD, mul, b);
    if (add < 0)
        return im->err->code;
    im->ex[add].vary = VARY_MAP, im->ex[add].chan = c;
    return set_expr(im, add, L_NCHW, 4);
}

static int op_instance_norm(imp *im) {
    value *in;
    int rc = map_input(im, 0, &in);
    if (rc)
        return rc;
    if (in->lay != L_NCHW)
        return REFUSE("its input is not in NCHW layout");
    ag_node n = ag_node_make(AG_OP_INSTANCE_NORM, "", -1, -1);
    if ((rc = attr_float(im, "epsilon", 1e-5f, &n.eps)) != AG_OK)
        return rc;
    const ag_onnx_tensor *g, *b;
    int gt = weight_input(im, 1, 1, &g), bt = gt < 0 ? -1 : weight_input(im, 2, 1, &b);
    if (bt < 0)
        return im->err->code;
    if ((n.src[0] = ag_oi_materialize(im, in->expr, 0)) < 0)
        return im->err->code;
    n.out_c = ag_oi_channels_of(im, n.src[0]);
    if (g->count != n.out_c || b->count != n.out_c)
        return REFUSE("scale and bias of %lld and %lld for %d channels", (long long)g->count,
                      (long long)b->count, n.out_c);
    if ((n.tensor[AG_T_GAMMA] = ag_oi_use_tensor(im, gt)) < 0 ||
        (n.tensor[AG_T_BETA] = ag_oi_use_tensor(im, bt)) < 0)
        return im->err->code;
    int node = ag_oi_emit(im, &n, im->cur);
    return node < 0 ? im->err->code : set_expr(im, ag_oi_map_expr(im, node), L_NCHW, 4);
}

static int op_constant(imp *im) {
    const ag_onnx_attr *a = attr(im, "value");
    if (!a || a->type != AG_ONNX_ATTR_TENSOR || a->tensor < 0)
        return REFUSE("a Constant without a 'value' tensor");
    value *o = out_value(im, 0);
    o->kind = V_CONST;
    o->tensor = a->tensor;
    return AG_OK;
}

int ag_oi_import_node(imp *im) {
    const ag_onnx_node *n = ag_oi_onnx_node(im, im->cur);
    ag_pb_span op = n->op_type;
    if (n->domain.len && !ag_pb_span_eq(n->domain, "ai.onnx"))
        return REFUSE("operator domain '%.*s'", AG_PB_SPAN_ARG(n->domain));
    /* Every op read has one output, but Dropout may have a mask too: reading it is refused
     * (its value stays undefined). */
    for (int i = 0; i < n->attr_count; i++) {
        int32_t type = im->m->attrs[n->attr_first + i].type;
        if (type == AG_ONNX_ATTR_GRAPH || type < AG_ONNX_ATTR_FLOAT || type > AG_ONNX_ATTR_INTS)
            return REFUSE(NULL);
    }
    static const struct {
        const char *name;
        int kind; /* 0 alias, 1 activation, 2 binary, 3 unary */
        int arg;
    } table[] = {
        {"Identity", 0, 0},
        {"Dropout", 0, 0}, /* inference: the identity */
        {"LeakyRelu", 1, AG_OP_LRELU},
        {"Relu", 1, AG_OP_RELU},
        {"Tanh", 1, AG_OP_TANH},
        {"Sigmoid", 1, AG_OP_SIGMOID},
        {"Add", 2, E_ADD},
        {"Sub", 2, E_SUB},
        {"Mul", 2, E_MUL},
        {"Div", 2, E_DIV},
        {"Sqrt", 3, E_SQRT},
        {"Reciprocal", 3, E_DIV},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (!ag_pb_span_eq(op, table[i].name))
            continue;
        if (n->output_count != 1 && !(ag_pb_span_eq(op, "Dropout") && n->output_count == 2))
            return REFUSE("%d outputs", n->output_count);
        switch (table[i].kind) {
        case 0: return op_alias(im);
        case 1: return op_activation(im, (ag_op)table[i].arg);
        case 2: return op_binary(im, (ekind)table[i].arg);
        default: return op_unary_expr(im, (ekind)table[i].arg);
        }
    }
    if (n->output_count != 1)
        return REFUSE(NULL);
    if (ag_pb_span_eq(op, "Conv"))
        return op_conv(im);
    if (ag_pb_span_eq(op, "Pad"))
        return op_pad(im);
    if (ag_pb_span_eq(op, "Transpose"))
        return op_transpose(im);
    if (ag_pb_span_eq(op, "Cast"))
        return op_cast(im);
    if (ag_pb_span_eq(op, "GlobalAveragePool"))
        return op_reduce(im, true, true);
    if (ag_pb_span_eq(op, "ReduceMean"))
        return op_reduce(im, true, false);
    if (ag_pb_span_eq(op, "ReduceSum"))
        return op_reduce(im, false, false);
    if (ag_pb_span_eq(op, "Shape"))
        return op_shape(im);
    if (ag_pb_span_eq(op, "Gather"))
        return op_gather(im);
    if (ag_pb_span_eq(op, "Slice"))
        return op_slice(im);
    if (ag_pb_span_eq(op, "Squeeze"))
        return op_squeeze(im, true);
    if (ag_pb_span_eq(op, "Unsqueeze"))
        return op_squeeze(im, false);
    if (ag_pb_span_eq(op, "Concat"))
        return op_concat(im);
    if (ag_pb_span_eq(op, "Resize"))
        return op_resize(im);
    if (ag_pb_span_eq(op, "Reshape"))
        return op_reshape(im);
    if (ag_pb_span_eq(op, "MatMul"))
        return op_matmul(im);
    if (ag_pb_span_eq(op, "Softmax"))
        return op_softmax(im);
    if (ag_pb_span_eq(op, "BatchNormalization"))
        return op_batch_norm(im);
    if (ag_pb_span_eq(op, "InstanceNormalization"))
        return op_instance_norm(im);
    if (ag_pb_span_eq(op, "Constant"))
        return op_constant(im);
    if (ag_pb_span_eq(op, "PRelu"))
        return op_prelu(im);
    if (ag_pb_span_eq(op, "Clip"))
        return op_clip(im);
    return REFUSE(NULL);
}
