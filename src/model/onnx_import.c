/*
 * onnx_import.c - an ONNX graph (parsed by onnx_pb.c) translated into the engine's graph
 * (src/graph/graph.h): the convolutional generators tf2onnx and torch.onnx export, in
 * particular every AnimeGANv3 style.
 *
 * The ONNX nodes are walked once, in file order, by an abstract interpreter: each ONNX value
 * becomes one of
 *
 *   a constant    an initializer or Constant node (weights, pads, shape constants);
 *   a shape       a vector of symbolic integers: constants or "H (or W) of graph node m,
 *                 times k" - what the Shape/Gather/Cast/Slice/Squeeze/Mul/Unsqueeze/Concat
 *                 chains compute, so a Resize's sizes fold to "2x its input" or "the size of
 *                 map m" whatever the image size;
 *   an expression a small DAG of elementwise ops (Add, Sub, Mul, Div, Sqrt, spatial means,
 *                 channel sums) over feature maps and per-channel constants; it becomes graph
 *                 nodes only when something that needs a map reads it (a Conv, an activation,
 *                 a Resize, the output), and then by pattern: LADE, instance norm, a
 *                 per-channel affine chain, the sum normalisation of external attention, or
 *                 the addition of two maps;
 *   a padded map  a Pad waiting for the Conv it is folded into.
 *
 * Every value carries its layout in ONNX terms (NCHW, NHWC, or a flattened (H*W, C) row
 * sequence). Our maps are always NHWC, so the Transposes that tf2onnx writes between the
 * two layouts are no-ops that only change the tag; a Reshape of per-channel statistics from
 * (1, C, 1, 1) to (1, 1, 1, C) is one too.
 *
 * After the walk, each 2x upsample is retargeted to the size of the skip tensor it is later
 * added to (so any image size works, where the exported graph needs sides that are
 * multiples of 16), and nodes that only fed statistics (the 1x1 conv of LADE) are dropped.
 *
 * Anything else is refused with one line naming the ONNX node and its op type. Nothing in
 * the file is executed: constants are read, never computed from the graph.
 */
#include "onnx_import_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- messages ------------------------------------------------------------------------- */

const ag_onnx_node *ag_oi_onnx_node(const imp *im, int i) {
    return &im->m->nodes[i];
}

/* The one line naming the node being imported and why it cannot be. */
int ag_oi_refuse_at(imp *im, int node, const char *fmt, ...) {
    char why[200] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, sizeof why, fmt, ap);
        va_end(ap);
    }
    const ag_onnx_node *n = ag_oi_onnx_node(im, node);
    ag_pb_span name = n->name.len ? n->name : im->m->names[n->output_first];
    return ag_error_set(im->err, AG_E_UNSUPPORTED,
                        "%s: node \"%.*s\" (op %.*s) is not supported%s%s", im->label,
                        AG_PB_SPAN_ARG(name), AG_PB_SPAN_ARG(n->op_type), why[0] ? ": " : "", why);
}

int ag_oi_nomem(imp *im) {
    return ag_error_set(im->err, AG_E_NOMEM, "%s: out of memory", im->label);
}

/* ---- values by name ------------------------------------------------------------------- */

static uint64_t hash_span(ag_pb_span s) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < s.len; i++)
        h = (h ^ s.ptr[i]) * 1099511628211ull;
    return h;
}

static bool span_eq(ag_pb_span a, ag_pb_span b) {
    return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

/* Index of the value named `name`, or -1. */
int ag_oi_lookup(const imp *im, ag_pb_span name) {
    for (size_t i = hash_span(name) & im->slot_mask;; i = (i + 1) & im->slot_mask) {
        int v = im->slots[i];
        if (v < 0)
            return -1;
        if (span_eq(im->val_names[v], name))
            return v;
    }
}

/* A new value named `name`; -1 with the error set if the name is taken. */
static int define(imp *im, ag_pb_span name) {
    if (ag_oi_lookup(im, name) >= 0) {
        ag_error_set(im->err, AG_E_FORMAT, "%s: value '%.*s' is produced twice", im->label,
                     AG_PB_SPAN_ARG(name));
        return -1;
    }
    int v = im->val_count++;
    size_t i = hash_span(name) & im->slot_mask;
    while (im->slots[i] >= 0)
        i = (i + 1) & im->slot_mask;
    im->slots[i] = v;
    im->val_names[v] = name;
    memset(&im->vals[v], 0, sizeof im->vals[v]);
    return v;
}

/* ---- expressions ---------------------------------------------------------------------- */

int ag_oi_new_expr(imp *im, ekind k, int a, int b) {
    if (im->ex_count == im->ex_cap) {
        int cap = im->ex_cap ? im->ex_cap * 2 : 256;
        if (cap > 8 * AG_ONNX_MAX_NODES) {
            ag_error_set(im->err, AG_E_LIMIT, "%s: more than %d expressions", im->label,
                         8 * AG_ONNX_MAX_NODES);
            return -1;
        }
        expr *grown = ag_realloc(im->ex, (size_t)cap * sizeof *grown);
        if (!grown) {
            ag_oi_nomem(im);
            return -1;
        }
        im->ex = grown;
        im->ex_cap = cap;
    }
    expr *e = &im->ex[im->ex_count];
    memset(e, 0, sizeof *e);
    e->k = k, e->a = a, e->b = b, e->node = -1, e->mat = -1, e->src = im->cur;
    return im->ex_count++;
}

int ag_oi_map_expr(imp *im, int node) {
    int e = ag_oi_new_expr(im, E_MAP, -1, -1);
    if (e >= 0) {
        im->ex[e].node = im->ex[e].mat = node;
        im->ex[e].vary = VARY_MAP;
        im->ex[e].chan = im->g->nodes[node].out_c;
    }
    return e;
}

/* A constant expression of n values (copied). */
int ag_oi_const_expr(imp *im, const float *values, int n) {
    float *c = ag_malloc((size_t)n * sizeof *c);
    if (!c) {
        ag_oi_nomem(im);
        return -1;
    }
    memcpy(c, values, (size_t)n * sizeof *c);
    int e = ag_oi_new_expr(im, E_CONST, -1, -1);
    if (e < 0) {
        ag_free(c);
        return -1;
    }
    im->ex[e].c = c;
    im->ex[e].cn = n;
    im->ex[e].chan = n > 1 ? n : 0;
    return e;
}

bool ag_oi_is_const(const imp *im, int e) {
    return im->ex[e].k == E_CONST;
}

bool ag_oi_is_scalar(const imp *im, int e, float *v) {
    if (!ag_oi_is_const(im, e) || im->ex[e].cn != 1)
        return false;
    *v = im->ex[e].c[0];
    return true;
}

/* Structural equality: tf2onnx sometimes computes x - mean(x) twice. */
bool ag_oi_expr_eq(const imp *im, int a, int b, int depth) {
    if (a == b)
        return true;
    if (a < 0 || b < 0 || depth > 24 || --*im->eq_budget < 0)
        return false;
    const expr *x = &im->ex[a], *y = &im->ex[b];
    if (x->k != y->k)
        return false;
    switch (x->k) {
    case E_MAP: return x->node == y->node;
    case E_CONST: return x->cn == y->cn && !memcmp(x->c, y->c, (size_t)x->cn * sizeof *x->c);
    case E_MEAN:
    case E_CSUM:
    case E_SQRT: return ag_oi_expr_eq(im, x->a, y->a, depth + 1);
    default:
        return ag_oi_expr_eq(im, x->a, y->a, depth + 1) && ag_oi_expr_eq(im, x->b, y->b, depth + 1);
    }
}

/* ---- tensors into the set --------------------------------------------------------------- */

/* The set's index of model tensor `t` (a weight used as it is in the file). */
int ag_oi_use_tensor(imp *im, int t) {
    if (im->tensor_index[t] >= 0)
        return im->tensor_index[t];
    const ag_onnx_tensor *ot = &im->m->tensors[t];
    if (ot->ndim > AG_TENSOR_MAX_DIMS)
        return REFUSE("weight '%.*s' has %d dimensions", AG_PB_SPAN_ARG(ot->name), ot->ndim), -1;
    ag_tensor_ref ref = {0};
    snprintf(ref.name, sizeof ref.name, "onnx%d:%.*s", t,
             (int)(ot->name.len > 80 ? 80 : ot->name.len), (const char *)ot->name.ptr);
    ref.ndim = ot->ndim;
    for (int i = 0; i < ot->ndim; i++)
        ref.shape[i] = ot->dims[i];
    if (ot->data_type == AG_ONNX_FLOAT && (ot->has_raw || ot->typed.ptr || ot->count == 0)) {
        ref.dtype = AG_DTYPE_F32;
        ref.data = ot->has_raw ? ot->raw.ptr : ot->typed.ptr;
        ref.nbytes = (size_t)ot->count * 4;
    } else if (ot->data_type == AG_ONNX_FLOAT16 && ot->has_raw) {
        ref.dtype = AG_DTYPE_F16;
        ref.data = ot->raw.ptr;
        ref.nbytes = (size_t)ot->count * 2;
    } else if (ot->data_type == AG_ONNX_FLOAT || ot->data_type == AG_ONNX_FLOAT16) {
        /* Typed fields that are not one packed fp32 run: decoded into a blob. */
        float *blob = ag_malloc((size_t)(ot->count ? ot->count : 1) * sizeof *blob);
        if (!blob)
            return ag_oi_nomem(im), -1;
        int rc = ag_onnx_tensor_floats(ot, blob, im->label, im->err);
        if (rc != AG_OK) {
            ag_free(blob);
            return -1;
        }
        if ((rc = ag_tensor_set_own(im->set, blob, im->err)) != AG_OK)
            return ag_error_prefix(rc, im->label, im->err), -1;
        ref.dtype = AG_DTYPE_F32;
        ref.data = blob;
        ref.nbytes = (size_t)ot->count * 4;
    } else {
        return REFUSE("weight '%.*s' is not a float tensor", AG_PB_SPAN_ARG(ot->name)), -1;
    }
    int rc = ag_tensor_set_add(im->set, &ref, im->err);
    if (rc != AG_OK)
        return ag_error_prefix(rc, im->label, im->err), -1;
    return im->tensor_index[t] = im->set->count - 1;
}

/* A new fp32 tensor of the set holding `values` (C), for derived scales and shifts. */
int ag_oi_derived_tensor(imp *im, const char *what, const float *values, int n) {
    float *blob = ag_malloc((size_t)n * sizeof *blob);
    if (!blob)
        return ag_oi_nomem(im), -1;
    memcpy(blob, values, (size_t)n * sizeof *blob);
    int rc = ag_tensor_set_own(im->set, blob, im->err);
    if (rc != AG_OK)
        return ag_error_prefix(rc, im->label, im->err), -1;
    ag_tensor_ref ref = {0};
    snprintf(ref.name, sizeof ref.name, "derived%d:%s", im->set->count, what);
    ref.dtype = AG_DTYPE_F32;
    ref.ndim = 1;
    ref.shape[0] = n;
    ref.data = blob;
    ref.nbytes = (size_t)n * 4;
    rc = ag_tensor_set_add(im->set, &ref, im->err);
    if (rc != AG_OK)
        return ag_error_prefix(rc, im->label, im->err), -1;
    return im->set->count - 1;
}

/* ---- graph nodes ---------------------------------------------------------------------- */

/* A node named after ONNX node `src`; returns its index or -1. */
int ag_oi_emit(imp *im, ag_node *n, int src) {
    const ag_onnx_node *on = ag_oi_onnx_node(im, src);
    ag_pb_span name = on->name.len ? on->name : im->m->names[on->output_first];
    snprintf(n->name, sizeof n->name, "%.*s", (int)(name.len < 63 ? name.len : 63),
             (const char *)name.ptr);
    int i = ag_graph_add(im->g, n, im->err);
    if (i < 0) {
        ag_error_prefix(AG_E_LIMIT, im->label, im->err);
        return -1;
    }
    im->node_src[i] = src;
    return i;
}

int ag_oi_channels_of(const imp *im, int node) {
    return im->g->nodes[node].out_c;
}

/* ---- the walk and the passes after it ----------------------------------------------------- */

static int setup(imp *im) {
    const ag_onnx_model *m = im->m;
    size_t values = (size_t)m->tensor_count + (size_t)m->input_count + (size_t)m->name_count;
    size_t slots = 16;
    while (slots < 2 * values)
        slots *= 2;
    im->slot_mask = slots - 1;
    im->slots = ag_malloc(slots * sizeof *im->slots);
    im->vals = ag_malloc(values * sizeof *im->vals);
    im->val_names = ag_malloc(values * sizeof *im->val_names);
    im->tensor_index = ag_malloc(((size_t)m->tensor_count + 1) * sizeof *im->tensor_index);
    if (!im->slots || !im->vals || !im->val_names || !im->tensor_index)
        return ag_oi_nomem(im);
    memset(im->slots, 0xff, slots * sizeof *im->slots);
    for (int i = 0; i < m->tensor_count; i++)
        im->tensor_index[i] = -1;
    for (int i = 0; i < m->tensor_count; i++) {
        if (!m->tensors[i].initializer)
            continue;
        int v = define(im, m->tensors[i].name);
        if (v < 0)
            return im->err->code;
        im->vals[v].kind = V_CONST;
        im->vals[v].tensor = i;
    }
    /* The one image input: (1, H, W, 3) or (1, 3, H, W). Inputs that are also initializers
     * (IR < 4 lists them) are constants. */
    int images = 0;
    for (int i = 0; i < m->input_count; i++) {
        const ag_onnx_value_info *in = &m->inputs[i];
        if (ag_oi_lookup(im, in->name) >= 0)
            continue;
        bool nhwc = in->ndim == 4 && in->dims[3] == 3 && in->dims[1] != 3;
        bool nchw = in->ndim == 4 && in->dims[1] == 3 && in->dims[3] != 3;
        if (in->elem_type != AG_ONNX_FLOAT || !(nhwc || nchw) || in->dims[0] > 1 || images++)
            return ag_error_set(im->err, AG_E_UNSUPPORTED,
                                "%s: graph input '%.*s' is not the one float image input "
                                "(1, H, W, 3) or (1, 3, H, W) that is supported",
                                im->label, AG_PB_SPAN_ARG(in->name));
        int v = define(im, in->name);
        if (v < 0)
            return im->err->code;
        int e = ag_oi_map_expr(im, 0);
        if (e < 0)
            return im->err->code;
        im->vals[v].kind = V_EXPR;
        im->vals[v].expr = e;
        im->vals[v].lay = nhwc ? L_NHWC : L_NCHW;
        im->vals[v].rank = 4;
    }
    if (!images)
        return ag_error_set(im->err, AG_E_UNSUPPORTED, "%s: the graph has no image input",
                            im->label);
    return AG_OK;
}

static int walk(imp *im) {
    const ag_onnx_model *m = im->m;
    for (im->cur = 0; im->cur < m->node_count; im->cur++) {
        const ag_onnx_node *n = ag_oi_onnx_node(im, im->cur);
        for (int i = 0; i < n->input_count; i++) {
            ag_pb_span name = m->names[n->input_first + i];
            if (name.len && ag_oi_lookup(im, name) < 0)
                return ag_error_set(im->err, AG_E_FORMAT,
                                    "%s: node \"%.*s\" (op %.*s) reads '%.*s', which no earlier "
                                    "node produces (the graph has a cycle, is not in "
                                    "topological order or lacks a value)",
                                    im->label, AG_PB_SPAN_ARG(n->name), AG_PB_SPAN_ARG(n->op_type),
                                    AG_PB_SPAN_ARG(name));
        }
        for (int i = 0; i < n->output_count; i++)
            if (define(im, m->names[n->output_first + i]) < 0)
                return im->err->code;
        int rc = ag_oi_import_node(im);
        if (rc != AG_OK)
            return rc;
    }
    for (int i = 0; i < m->output_count; i++) {
        int v = ag_oi_lookup(im, m->outputs[i].name);
        if (v < 0)
            return ag_error_set(im->err, AG_E_FORMAT, "%s: graph output '%.*s' is not produced",
                                im->label, AG_PB_SPAN_ARG(m->outputs[i].name));
        value *o = &im->vals[v];
        if (o->kind != V_EXPR || im->ex[o->expr].vary != VARY_MAP ||
            (o->lay != L_NHWC && o->lay != L_NCHW))
            return ag_error_set(im->err, AG_E_UNSUPPORTED,
                                "%s: graph output '%.*s' is not a 4-D feature map", im->label,
                                AG_PB_SPAN_ARG(m->outputs[i].name));
        im->cur = im->ex[o->expr].src;
        int node = ag_oi_materialize(im, o->expr, 0);
        if (node < 0)
            return im->err->code;
        if (node == 0 || ag_graph_add_output(im->g, node, im->err) != AG_OK)
            return ag_error_set(im->err, AG_E_UNSUPPORTED,
                                "%s: graph output '%.*s' is the input or one output too many",
                                im->label, AG_PB_SPAN_ARG(m->outputs[i].name));
    }
    return AG_OK;
}

/* Whether node n keeps its input's height and width: the ops of a decoder block. */
static bool keeps_size(const ag_node *n) {
    switch (n->op) {
    case AG_OP_CONV:
        return n->stride == 1 && n->pad[0] + n->pad[1] == n->k - 1 &&
               n->pad[2] + n->pad[3] == n->k - 1;
    case AG_OP_LAYER_NORM:
    case AG_OP_INSTANCE_NORM:
    case AG_OP_LADE:
    case AG_OP_AFFINE:
    case AG_OP_LRELU:
    case AG_OP_PRELU:
    case AG_OP_RELU:
    case AG_OP_RELU6:
    case AG_OP_TANH:
    case AG_OP_SIGMOID: return true;
    default: return false;
    }
}

/* Each 2x upsample followed (through size-keeping ops) by an add of an earlier map is
 * resized to that map's size: the same whenever the sides divide, and defined when not. A
 * chain continues only through a node's one reader (a graph output has none). */
static void retarget_resizes(ag_graph *g) {
    int readers[AG_GRAPH_MAX_NODES] = {0}, reader[AG_GRAPH_MAX_NODES];
    for (int o = 0; o < g->output_count; o++)
        readers[g->outputs[o]] += 2;
    for (int j = 1; j < g->count; j++)
        for (int k = 0; k < 2; k++) {
            int i = g->nodes[j].src[k];
            if (i >= 0) {
                readers[i]++;
                reader[i] = j;
            }
        }
    for (int r = 1; r < g->count; r++) {
        if (g->nodes[r].op != AG_OP_RESIZE2X)
            continue;
        for (int cur = r; readers[cur] == 1;) {
            const ag_node *n = &g->nodes[reader[cur]];
            if (n->op == AG_OP_ADD) {
                int other = n->src[0] == cur ? n->src[1] : n->src[0];
                if (other < r) {
                    g->nodes[r].op = AG_OP_RESIZE;
                    g->nodes[r].src[1] = other;
                }
                break;
            }
            if (!keeps_size(n))
                break;
            cur = reader[cur];
        }
    }
}

/* Drops nodes no output depends on (convs that only fed statistics) and renumbers. */
static void drop_dead(imp *im) {
    ag_graph *g = im->g;
    bool live[AG_GRAPH_MAX_NODES] = {false};
    int remap[AG_GRAPH_MAX_NODES];
    live[0] = true;
    for (int o = 0; o < g->output_count; o++)
        live[g->outputs[o]] = true;
    for (int i = g->count - 1; i > 0; i--)
        for (int j = 0; j < 2 && live[i]; j++)
            if (g->nodes[i].src[j] >= 0)
                live[g->nodes[i].src[j]] = true;
    int count = 0;
    for (int i = 0; i < g->count; i++) {
        remap[i] = live[i] ? count : -1;
        if (!live[i])
            continue;
        ag_node n = g->nodes[i];
        for (int j = 0; j < 2; j++)
            if (n.src[j] >= 0)
                n.src[j] = remap[n.src[j]];
        g->nodes[count] = n;
        im->node_src[count] = im->node_src[i];
        count++;
    }
    g->count = count;
    for (int o = 0; o < g->output_count; o++)
        g->outputs[o] = remap[g->outputs[o]];
}

/* Whether name is taken by one of the first `count` nodes. */
static bool name_taken(const ag_graph *g, int count, const char *name) {
    for (int j = 0; j < count; j++)
        if (!strcmp(g->nodes[j].name, name))
            return true;
    return false;
}

/* Node i renamed "<name>~i", then "<name>~i.1", "~i.2", ...: the candidates are distinct
 * (truncated before the suffix), and only i names come before, so one of the first i + 1
 * is free and renaming ends (a file's names once made the same candidate come back). */
static void rename_node(ag_graph *g, int i) {
    char base[AG_GRAPH_NAME_BYTES], name[AG_GRAPH_NAME_BYTES];
    memcpy(base, g->nodes[i].name, sizeof base);
    for (int k = 0; k <= i; k++) {
        char suffix[24];
        int n = k ? snprintf(suffix, sizeof suffix, "~%d.%d", i, k)
                  : snprintf(suffix, sizeof suffix, "~%d", i);
        size_t len = strlen(base);
        if (len + (size_t)n >= sizeof name)
            len = sizeof name - 1 - (size_t)n;
        memcpy(name, base, len);
        memcpy(name + len, suffix, (size_t)n + 1);
        if (!name_taken(g, i, name))
            break;
    }
    memcpy(g->nodes[i].name, name, sizeof name);
}

/* Names are unique in a graph; ONNX names cut to 63 bytes may collide (or repeat). */
static void unique_names(ag_graph *g) {
    for (int i = 1; i < g->count; i++)
        if (name_taken(g, i, g->nodes[i].name))
            rename_node(g, i);
}

/* What the model builder reads from the metadata: the resize mode of the first upsample
 * (the model's own, for --upsample), the side multiple the network was exported for (the
 * largest downsampling of any map: 16 for the tiny generator, 8 for the full one) and so
 * the smallest side at which every map keeps a pixel, and the architecture when the graph
 * is AnimeGANv3's (LADE norms; with external attention the full generator, else the tiny
 * one), recognised from the ops, never from names. */
static int set_meta(imp *im) {
    ag_graph *g = im->g;
    int scale[AG_GRAPH_MAX_NODES], multiple = 1, lade = 0, attention = 0;
    const char *mode = NULL;
    scale[0] = 1;
    for (int i = 1; i < g->count; i++) {
        const ag_node *n = &g->nodes[i];
        scale[i] = scale[n->src[0]];
        if (n->op == AG_OP_CONV && scale[i] <= 64)
            scale[i] *= n->stride;
        else if (n->op == AG_OP_RESIZE)
            scale[i] = scale[n->src[1]];
        else if (n->op == AG_OP_RESIZE2X)
            scale[i] = scale[i] > 1 ? scale[i] / 2 : 1;
        multiple = scale[i] > multiple ? scale[i] : multiple;
        lade += n->op == AG_OP_LADE;
        attention += n->op == AG_OP_SOFTMAX && n->axis == AG_AXIS_SPATIAL;
        if (!mode && (n->op == AG_OP_RESIZE || n->op == AG_OP_RESIZE2X))
            mode = n->mode == AG_RESIZE_ALIGN_CORNERS ? "align-corners"
                   : n->mode == AG_RESIZE_HALF_PIXEL  ? "half-pixel"
                                                      : "asymmetric";
    }
    char text[16], min_side[16];
    multiple = multiple > 64 ? 64 : multiple;
    snprintf(text, sizeof text, "%d", multiple);
    snprintf(min_side, sizeof min_side, "%d", multiple > AG_MIN_SIDE ? multiple : AG_MIN_SIDE);
    int rc = ag_tensor_set_meta(im->set, "format", "onnx", im->err);
    if (rc == AG_OK)
        rc = ag_tensor_set_meta(im->set, "side_multiple", text, im->err);
    if (rc == AG_OK)
        rc = ag_tensor_set_meta(im->set, "min_side", min_side, im->err);
    if (rc == AG_OK && lade)
        rc = ag_tensor_set_meta(im->set, "architecture",
                                attention ? "animeganv3" : "animeganv3-tiny", im->err);
    if (rc == AG_OK && mode)
        rc = ag_tensor_set_meta(im->set, "resize", mode, im->err);
    return rc == AG_OK ? rc : ag_error_prefix(rc, im->label, im->err);
}

int ag_onnx_parse(const uint8_t *data, size_t size, const char *label, ag_tensor_set *tensors,
                  ag_graph *graph, ag_error *err) {
    ag_onnx_model m;
    ag_graph_init(graph);
    int rc = ag_onnx_pb_parse(data, size, label, &m, err);
    if (rc != AG_OK)
        return rc;
    imp *im = ag_calloc(1, sizeof *im);
    if (!im) {
        ag_onnx_model_fini(&m);
        return ag_error_set(err, AG_E_NOMEM, "%s: out of memory", label);
    }
    long eq_budget = 1L << 20;
    im->m = &m, im->label = label, im->err = err, im->set = tensors, im->g = graph;
    im->eq_budget = &eq_budget;
    err->code = AG_OK;
    if (m.opset < 7 || m.opset > 23)
        rc = ag_error_set(err, AG_E_UNSUPPORTED, "%s: opset %lld is not supported (7 to 23)", label,
                          (long long)m.opset);
    if (rc == AG_OK)
        rc = setup(im);
    if (rc == AG_OK)
        rc = walk(im);
    if (rc == AG_OK) {
        drop_dead(im); /* first: LADE's statistics conv is a second reader of its input */
        retarget_resizes(graph);
        unique_names(graph);
        rc = set_meta(im);
    }
    for (int i = 0; i < im->ex_count; i++)
        ag_free(im->ex[i].c);
    ag_free(im->ex);
    ag_free(im->slots);
    ag_free(im->vals);
    ag_free(im->val_names);
    ag_free(im->tensor_index);
    ag_free(im);
    ag_onnx_model_fini(&m);
    if (rc != AG_OK) {
        ag_tensor_set_fini(tensors);
        ag_graph_init(graph);
    }
    return rc;
}
