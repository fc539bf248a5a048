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
#include "onnx_internal.h"

#include "../graph/graph.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Per-channel constants and shape vectors are small; anything larger is not one. */
#define MAX_CONST_FLOATS 4096
#define MAX_SYM 8

typedef enum vkind { V_UNDEF = 0, V_CONST, V_SHAPE, V_EXPR, V_PADDED } vkind;
/* L_SEQ: (1, H*W, C) or (H*W, C), our NHWC data read as rows of pixels; L_SEQT: the same
 * with the last two axes swapped, (1, C, H*W), as a Transpose before a Softmax leaves it. */
typedef enum layout { L_NONE = 0, L_NCHW, L_NHWC, L_SEQ, L_SEQT } layout;

/* One element of a shape: node < 0: the constant v; else v times the H, W or H*W of node. */
typedef struct sym {
    int node;
    char axis; /* 'H', 'W', 'P' (H*W) */
    int64_t v;
} sym;

typedef struct value {
    vkind kind;
    layout lay;
    int rank;        /* V_SHAPE: 0 or 1; L_SEQ, L_SEQT: 2 or 3; else 4 */
    int tensor;      /* V_CONST: index into the model's tensors */
    bool transposed; /* V_CONST: a 2-D constant read through a Transpose */
    int expr;        /* V_EXPR, V_PADDED */
    int pad[4];      /* V_PADDED: top, bottom, left, right */
    ag_pad_mode pad_mode;
    int n; /* V_SHAPE */
    sym s[MAX_SYM];
} value;

typedef enum ekind { E_MAP, E_CONST, E_MEAN, E_CSUM, E_ADD, E_SUB, E_MUL, E_DIV, E_SQRT } ekind;
enum { VARY_PIXEL = 1, VARY_CHANNEL = 2, VARY_MAP = 3 };

typedef struct expr {
    ekind k;
    int a, b; /* operands */
    int node; /* E_MAP: graph node */
    float *c; /* E_CONST: cn values (owned by the importer) */
    int cn;   /* 1: a scalar */
    int vary; /* VARY_* bits: what it varies over; 0 for a constant */
    int chan; /* channels; 0 when it broadcasts over them */
    int mat;  /* graph node it became, -1 */
    int src;  /* ONNX node that made it, for names and messages */
} expr;

typedef struct imp {
    const ag_onnx_model *m;
    const char *label;
    ag_error *err;
    ag_tensor_set *set;
    ag_graph *g;
    value *vals;
    int val_count;
    int *slots; /* hash of value names -> index in vals; -1 empty */
    ag_pb_span *val_names;
    size_t slot_mask;
    expr *ex;
    int ex_count, ex_cap;
    int *tensor_index; /* per model tensor: its index in `set`, -1 */
    int cur;           /* the ONNX node being imported */
    long *eq_budget;   /* structural comparisons left: a crafted DAG could make them explode */
    int node_src[AG_GRAPH_MAX_NODES]; /* ONNX node of each graph node */
} imp;

/* ---- messages ------------------------------------------------------------------------- */

static const ag_onnx_node *onnx_node(const imp *im, int i) {
    return &im->m->nodes[i];
}

/* The one line naming the node being imported and why it cannot be. */
static int refuse_at(imp *im, int node, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse_at(imp *im, int node, const char *fmt, ...) {
    char why[200] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, sizeof why, fmt, ap);
        va_end(ap);
    }
    const ag_onnx_node *n = onnx_node(im, node);
    ag_pb_span name = n->name.len ? n->name : im->m->names[n->output_first];
    return ag_error_set(im->err, AG_E_UNSUPPORTED,
                        "%s: node \"%.*s\" (op %.*s) is not supported%s%s", im->label,
                        AG_PB_SPAN_ARG(name), AG_PB_SPAN_ARG(n->op_type), why[0] ? ": " : "", why);
}

#define REFUSE(...) refuse_at(im, im->cur, __VA_ARGS__)

static int nomem(imp *im) {
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
static int lookup(const imp *im, ag_pb_span name) {
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
    if (lookup(im, name) >= 0) {
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

static int new_expr(imp *im, ekind k, int a, int b) {
    if (im->ex_count == im->ex_cap) {
        int cap = im->ex_cap ? im->ex_cap * 2 : 256;
        if (cap > 8 * AG_ONNX_MAX_NODES) {
            ag_error_set(im->err, AG_E_LIMIT, "%s: more than %d expressions", im->label,
                         8 * AG_ONNX_MAX_NODES);
            return -1;
        }
        expr *grown = ag_realloc(im->ex, (size_t)cap * sizeof *grown);
        if (!grown) {
            nomem(im);
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

static int map_expr(imp *im, int node) {
    int e = new_expr(im, E_MAP, -1, -1);
    if (e >= 0) {
        im->ex[e].node = im->ex[e].mat = node;
        im->ex[e].vary = VARY_MAP;
        im->ex[e].chan = im->g->nodes[node].out_c;
    }
    return e;
}

/* A constant expression of n values (copied). */
static int const_expr(imp *im, const float *values, int n) {
    float *c = ag_malloc((size_t)n * sizeof *c);
    if (!c) {
        nomem(im);
        return -1;
    }
    memcpy(c, values, (size_t)n * sizeof *c);
    int e = new_expr(im, E_CONST, -1, -1);
    if (e < 0) {
        ag_free(c);
        return -1;
    }
    im->ex[e].c = c;
    im->ex[e].cn = n;
    im->ex[e].chan = n > 1 ? n : 0;
    return e;
}

static bool is_const(const imp *im, int e) {
    return im->ex[e].k == E_CONST;
}

static bool is_scalar(const imp *im, int e, float *v) {
    if (!is_const(im, e) || im->ex[e].cn != 1)
        return false;
    *v = im->ex[e].c[0];
    return true;
}

/* Structural equality: tf2onnx sometimes computes x - mean(x) twice. */
static bool expr_eq(const imp *im, int a, int b, int depth) {
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
    case E_SQRT: return expr_eq(im, x->a, y->a, depth + 1);
    default: return expr_eq(im, x->a, y->a, depth + 1) && expr_eq(im, x->b, y->b, depth + 1);
    }
}

/* ---- tensors into the set --------------------------------------------------------------- */

/* The set's index of model tensor `t` (a weight used as it is in the file). */
static int use_tensor(imp *im, int t) {
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
            return nomem(im), -1;
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
static int derived_tensor(imp *im, const char *what, const float *values, int n) {
    float *blob = ag_malloc((size_t)n * sizeof *blob);
    if (!blob)
        return nomem(im), -1;
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
static int emit(imp *im, ag_node *n, int src) {
    const ag_onnx_node *on = onnx_node(im, src);
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

static int channels_of(const imp *im, int node) {
    return im->g->nodes[node].out_c;
}

/* ---- materialising an expression into nodes ------------------------------------------- */

static int materialize(imp *im, int e, int depth);

static bool mean_of(const imp *im, int e, int *x) {
    if (im->ex[e].k != E_MEAN)
        return false;
    *x = im->ex[e].a;
    return true;
}

/* e = x - mean(x) */
static bool centered(const imp *im, int e, int *x) {
    int m;
    if (im->ex[e].k != E_SUB || !mean_of(im, im->ex[e].b, &m) || !expr_eq(im, m, im->ex[e].a, 0))
        return false;
    *x = im->ex[e].a;
    return true;
}

/* e = mean((x - mean x)^2) */
static bool variance(const imp *im, int e, int *x) {
    int sq;
    if (!mean_of(im, e, &sq) || im->ex[sq].k != E_MUL ||
        !expr_eq(im, im->ex[sq].a, im->ex[sq].b, 0))
        return false;
    return centered(im, im->ex[sq].a, x);
}

/* e = sqrt(var x + eps) */
static bool std_dev(const imp *im, int e, int *x, float *eps) {
    if (im->ex[e].k != E_SQRT)
        return false;
    const expr *sum = &im->ex[im->ex[e].a];
    if (sum->k != E_ADD)
        return false;
    if (is_scalar(im, sum->b, eps))
        return variance(im, sum->a, x);
    return is_scalar(im, sum->a, eps) && variance(im, sum->b, x);
}

/* e = (x - mean x) / sqrt(var x + eps), or times 1 / sqrt(...) */
static bool normalized(const imp *im, int e, int *x, float *eps) {
    const expr *d = &im->ex[e];
    int x2, s = -1, c = -1;
    float one;
    if (d->k == E_DIV) {
        c = d->a, s = d->b;
    } else if (d->k == E_MUL) {
        for (int side = 0; side < 2 && s < 0; side++) {
            int inv = side ? d->a : d->b;
            if (im->ex[inv].k == E_DIV && is_scalar(im, im->ex[inv].a, &one) && one == 1.0f)
                c = side ? d->b : d->a, s = im->ex[inv].b;
        }
    }
    if (s < 0 || !centered(im, c, x) || !std_dev(im, s, &x2, eps))
        return false;
    return expr_eq(im, *x, x2, 0);
}

/* LADE: normalized(x) * sqrt(var y + eps) + mean(y) */
static bool lade(const imp *im, int e, int *x, int *y, float *eps) {
    const expr *add = &im->ex[e];
    if (add->k != E_ADD)
        return false;
    for (int side = 0; side < 2; side++) {
        int prod = side ? add->b : add->a, mean = side ? add->a : add->b;
        if (!mean_of(im, mean, y) || im->ex[prod].k != E_MUL)
            continue;
        for (int k = 0; k < 2; k++) {
            int n = k ? im->ex[prod].b : im->ex[prod].a, s = k ? im->ex[prod].a : im->ex[prod].b;
            int y2;
            float eps_y;
            if (normalized(im, n, x, eps) && std_dev(im, s, &y2, &eps_y) &&
                expr_eq(im, *y, y2, 0) && eps_y == *eps)
                return true;
        }
    }
    return false;
}

/* Peels per-channel constant operations off e: e = scale * base + shift. */
static int linear(imp *im, int e, int *base, float *scale, float *shift, int c, bool *any) {
    for (int i = 0; i < c; i++)
        scale[i] = 1.0f, shift[i] = 0.0f;
    *any = false;
    for (int guard = 0; guard < 64; guard++) {
        const expr *x = &im->ex[e];
        if (x->k != E_ADD && x->k != E_SUB && x->k != E_MUL && x->k != E_DIV)
            break;
        bool left = is_const(im, x->a), right = is_const(im, x->b);
        if (left == right || (x->k == E_DIV && left))
            break;
        const expr *k = &im->ex[left ? x->a : x->b];
        if (k->cn != 1 && k->cn != c)
            return REFUSE("a constant of %d values meets %d channels", k->cn, c);
        for (int i = 0; i < c; i++) {
            float v = k->c[k->cn == 1 ? 0 : i];
            switch (x->k) {
            case E_ADD: shift[i] += scale[i] * v; break;
            case E_SUB:
                if (left) {
                    shift[i] += scale[i] * v;
                    scale[i] = -scale[i];
                } else {
                    shift[i] -= scale[i] * v;
                }
                break;
            case E_MUL: scale[i] *= v; break;
            default:
                if (v == 0.0f)
                    return REFUSE("division by a constant 0");
                scale[i] /= v;
                break;
            }
        }
        *any = true;
        e = left ? x->b : x->a;
    }
    *base = e;
    return AG_OK;
}

static bool all_equal(const float *v, int n, float to) {
    for (int i = 0; i < n; i++)
        if (v[i] != to)
            return false;
    return true;
}

/* A LADE node for the pattern's x and y, y having to be a bias-free 1x1 conv of x. */
static int emit_lade(imp *im, int e, int x, int y, float eps, int depth) {
    int xn = materialize(im, x, depth + 1);
    if (xn < 0)
        return -1;
    const ag_node *conv = im->ex[y].k == E_MAP ? &im->g->nodes[im->ex[y].node] : NULL;
    if (!conv || conv->op != AG_OP_CONV || conv->src[0] != xn || conv->k != 1 ||
        conv->tensor[AG_T_BIAS] >= 0 || conv->stride != 1 || conv->groups != 1 ||
        conv->pad[0] + conv->pad[1] + conv->pad[2] + conv->pad[3] != 0 ||
        conv->out_c != channels_of(im, xn))
        return refuse_at(im, im->ex[e].src,
                         "LADE statistics taken from something other than a bias-free 1x1 conv "
                         "of the normalised map"),
               -1;
    ag_node n = ag_node_make(AG_OP_LADE, "", xn, -1);
    n.tensor[AG_T_WEIGHT] = conv->tensor[AG_T_WEIGHT];
    n.eps = eps;
    n.in_c = n.out_c = channels_of(im, xn);
    return emit(im, &n, im->ex[e].src);
}

/* sum normalisation: x / (sum over channels of x + eps) */
static bool sum_normalized(const imp *im, int e, int *x, float *eps) {
    const expr *d = &im->ex[e];
    if (d->k != E_DIV || im->ex[d->b].k != E_ADD)
        return false;
    const expr *den = &im->ex[d->b];
    int sum = -1;
    if (is_scalar(im, den->a, eps))
        sum = den->b;
    else if (is_scalar(im, den->b, eps))
        sum = den->a;
    if (sum < 0 || im->ex[sum].k != E_CSUM || !expr_eq(im, im->ex[sum].a, d->a, 0))
        return false;
    *x = d->a;
    return true;
}

static int materialize(imp *im, int e, int depth) {
    if (im->ex[e].mat >= 0)
        return im->ex[e].mat;
    if (depth > 32)
        return refuse_at(im, im->ex[e].src, "elementwise expressions nested too deeply"), -1;
    if (im->ex[e].vary != VARY_MAP)
        return refuse_at(im, im->ex[e].src,
                         "a per-channel statistic or constant is used as a feature map"),
               -1;
    int c = im->ex[e].chan;
    if (c < 1 || c > MAX_CONST_FLOATS)
        return refuse_at(im, im->ex[e].src, "a map of %d channels", c), -1;
    float *scale = ag_malloc(2 * (size_t)c * sizeof *scale);
    if (!scale)
        return nomem(im), -1;
    float *shift = scale + c;
    int base = e, x, y, node = -1;
    float eps;
    bool any;
    int src = im->ex[e].src;
    if (linear(im, e, &base, scale, shift, c, &any) != AG_OK)
        goto done;
    if (any && im->ex[base].vary != VARY_MAP) {
        refuse_at(im, src, "a per-channel statistic or constant is used as a feature map");
        goto done;
    }
    if (normalized(im, base, &x, &eps)) {
        /* Instance norm; the affine around it becomes its gamma and beta. */
        int xn = materialize(im, x, depth + 1);
        if (xn < 0)
            goto done;
        ag_node n = ag_node_make(AG_OP_INSTANCE_NORM, "", xn, -1);
        n.eps = eps;
        n.out_c = c;
        if (any && (n.tensor[AG_T_GAMMA] = derived_tensor(im, "gamma", scale, c)) < 0)
            goto done;
        if (any && (n.tensor[AG_T_BETA] = derived_tensor(im, "beta", shift, c)) < 0)
            goto done;
        node = emit(im, &n, src);
        any = false;
    } else if (lade(im, base, &x, &y, &eps)) {
        node = emit_lade(im, base, x, y, eps, depth);
    } else if (sum_normalized(im, base, &x, &eps)) {
        int xn = materialize(im, x, depth + 1);
        if (xn < 0)
            goto done;
        ag_node n = ag_node_make(AG_OP_SUM_NORMALIZE, "", xn, -1);
        n.eps = eps;
        n.out_c = c;
        node = emit(im, &n, im->ex[base].src);
    } else if (im->ex[base].k == E_ADD && im->ex[im->ex[base].a].vary == VARY_MAP &&
               im->ex[im->ex[base].b].vary == VARY_MAP) {
        int a = materialize(im, im->ex[base].a, depth + 1);
        int b = a < 0 ? -1 : materialize(im, im->ex[base].b, depth + 1);
        if (b < 0)
            goto done;
        if (channels_of(im, a) != channels_of(im, b)) {
            refuse_at(im, im->ex[base].src, "adds %d channels to %d", channels_of(im, b),
                      channels_of(im, a));
            goto done;
        }
        ag_node n = ag_node_make(AG_OP_ADD, "", a, b);
        n.out_c = c;
        node = emit(im, &n, im->ex[base].src);
    } else if (im->ex[base].k == E_MAP || im->ex[base].mat >= 0) {
        node = im->ex[base].mat;
    } else {
        static const char *const kinds[] = {"map", "const", "mean", "channel sum", "Add",
                                            "Sub", "Mul",   "Div",  "Sqrt"};
        refuse_at(im, im->ex[base].src,
                  "an elementwise %s the importer does not recognise (not a norm, LADE, "
                  "per-channel affine or the sum of two maps)",
                  kinds[im->ex[base].k]);
        goto done;
    }
    if (node >= 0 && any && !(all_equal(scale, c, 1.0f) && all_equal(shift, c, 0.0f))) {
        ag_node n = ag_node_make(AG_OP_AFFINE, "", node, -1);
        n.out_c = c;
        if (!all_equal(scale, c, 1.0f) &&
            (n.tensor[AG_T_GAMMA] = derived_tensor(im, "scale", scale, c)) < 0)
            node = -1;
        if (node >= 0 && !all_equal(shift, c, 0.0f) &&
            (n.tensor[AG_T_BETA] = derived_tensor(im, "shift", shift, c)) < 0)
            node = -1;
        if (node >= 0)
            node = emit(im, &n, src);
    }
done:
    ag_free(scale);
    if (node >= 0)
        im->ex[e].mat = node;
    return node;
}

/* ---- reading inputs and attributes -------------------------------------------------------- */

static const ag_onnx_attr *attr(const imp *im, const char *name) {
    const ag_onnx_node *n = onnx_node(im, im->cur);
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
    const ag_onnx_node *n = onnx_node(im, im->cur);
    if (i >= n->input_count || im->m->names[n->input_first + i].len == 0)
        return NULL;
    int v = lookup(im, im->m->names[n->input_first + i]);
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
        return nomem(im);
    int rc = ag_onnx_tensor_floats(t, values, im->label, im->err);
    if (rc == AG_OK) {
        *e = const_expr(im, values, (int)t->count);
        rc = *e < 0 ? im->err->code : AG_OK;
    }
    ag_free(values);
    return rc;
}

static value *out_value(imp *im, int i) {
    const ag_onnx_node *n = onnx_node(im, im->cur);
    int v = lookup(im, im->m->names[n->output_first + i]);
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
            if (!is_scalar(im, e, &v) || v != 0.0f)
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
    n.src[0] = materialize(im, in->expr, 0);
    if (n.src[0] < 0)
        return im->err->code;
    n.k = (int)k;
    n.stride = ns >= 0 ? (int)strides[0] : 1;
    n.groups = (int)group;
    n.in_c = c;
    n.out_c = (int)oc;
    if ((n.tensor[AG_T_WEIGHT] = use_tensor(im, wt)) < 0 ||
        (bt >= 0 && (n.tensor[AG_T_BIAS] = use_tensor(im, bt)) < 0))
        return im->err->code;
    int node = emit(im, &n, im->cur);
    return node < 0 ? im->err->code : set_expr(im, map_expr(im, node), L_NCHW, 4);
}

static int op_activation(imp *im, ag_op op) {
    value *in;
    int rc = map_input(im, 0, &in);
    if (rc)
        return rc;
    ag_node n = ag_node_make(op, "", -1, -1);
    if (op == AG_OP_LRELU && (rc = attr_float(im, "alpha", 0.01f, &n.alpha)) != AG_OK)
        return rc;
    if ((n.src[0] = materialize(im, in->expr, 0)) < 0)
        return im->err->code;
    n.out_c = channels_of(im, n.src[0]);
    int node = emit(im, &n, im->cur);
    return node < 0 ? im->err->code : set_expr(im, map_expr(im, node), in->lay, in->rank);
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
    if (!is_const(im, e) || (im->ex[e].cn != 1 && im->ex[e].cn != c) || c > MAX_CONST_FLOATS)
        return REFUSE("a slope that is not one value per channel");
    float *v = ag_malloc((size_t)c * sizeof *v);
    if (!v)
        return nomem(im);
    for (int i = 0; i < c; i++)
        v[i] = im->ex[e].c[im->ex[e].cn == 1 ? 0 : i];
    ag_node n = ag_node_make(AG_OP_PRELU, "", -1, -1);
    n.tensor[AG_T_GAMMA] = derived_tensor(im, "slope", v, c);
    ag_free(v);
    if (n.tensor[AG_T_GAMMA] < 0 || (n.src[0] = materialize(im, in->expr, 0)) < 0)
        return im->err->code;
    n.out_c = c;
    int node = emit(im, &n, im->cur);
    return node < 0 ? im->err->code : set_expr(im, map_expr(im, node), in->lay, in->rank);
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
            if (!is_scalar(im, e, &v))
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
    int e = new_expr(im, k, ea, eb);
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
        int c = const_expr(im, &one, 1);
        if (c < 0)
            return im->err->code;
        e = new_expr(im, E_DIV, c, a);
    } else {
        e = new_expr(im, k, a, -1);
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
    int e = new_expr(im, k, in->expr, -1);
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
    int node = materialize(im, in->expr, 0);
    if (node < 0)
        return im->err->code;
    value out = {.kind = V_SHAPE, .rank = 1};
    sym one = {-1, 0, 1}, c = {-1, 0, channels_of(im, node)};
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
    const ag_onnx_node *on = onnx_node(im, im->cur);
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
    if ((n.src[0] = materialize(im, in->expr, 0)) < 0)
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
            s.s[c_axis].v != channels_of(im, n.src[0]))
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
    n.out_c = channels_of(im, n.src[0]);
    int node = emit(im, &n, im->cur);
    return node < 0 ? im->err->code : set_expr(im, map_expr(im, node), in->lay, in->rank);
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
    if ((n.src[0] = materialize(im, in->expr, 0)) < 0)
        return im->err->code;
    n.transpose = t;
    n.in_c = c;
    n.out_c = (int)w->dims[t ? 0 : 1];
    if ((n.tensor[AG_T_WEIGHT] = use_tensor(im, wt)) < 0)
        return im->err->code;
    int node = emit(im, &n, im->cur);
    return node < 0 ? im->err->code : set_expr(im, map_expr(im, node), L_SEQ, in->rank);
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
    if ((n.src[0] = materialize(im, in->expr, 0)) < 0)
        return im->err->code;
    n.out_c = channels_of(im, n.src[0]);
    int node = emit(im, &n, im->cur);
    return node < 0 ? im->err->code : set_expr(im, map_expr(im, node), in->lay, in->rank);
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
        return nomem(im);
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
    int s = const_expr(im, gamma, c), b = s < 0 ? -1 : const_expr(im, beta, c);
    ag_free(v);
    int mul = b < 0 ? -1 : new_expr(im, E_MUL, in->expr, s);
    if (mul < 0)
        return im->err->code;
    im->ex[mul].vary = VARY_MAP, im->ex[mul].chan = c;
    int add = new_expr(im, E_ADD, mul, b);
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
    if ((n.src[0] = materialize(im, in->expr, 0)) < 0)
        return im->err->code;
    n.out_c = channels_of(im, n.src[0]);
    if (g->count != n.out_c || b->count != n.out_c)
        return REFUSE("scale and bias of %lld and %lld for %d channels", (long long)g->count,
                      (long long)b->count, n.out_c);
    if ((n.tensor[AG_T_GAMMA] = use_tensor(im, gt)) < 0 ||
        (n.tensor[AG_T_BETA] = use_tensor(im, bt)) < 0)
        return im->err->code;
    int node = emit(im, &n, im->cur);
    return node < 0 ? im->err->code : set_expr(im, map_expr(im, node), L_NCHW, 4);
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

static int import_node(imp *im) {
    const ag_onnx_node *n = onnx_node(im, im->cur);
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
        return nomem(im);
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
        if (lookup(im, in->name) >= 0)
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
        int e = map_expr(im, 0);
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
        const ag_onnx_node *n = onnx_node(im, im->cur);
        for (int i = 0; i < n->input_count; i++) {
            ag_pb_span name = m->names[n->input_first + i];
            if (name.len && lookup(im, name) < 0)
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
        int rc = import_node(im);
        if (rc != AG_OK)
            return rc;
    }
    for (int i = 0; i < m->output_count; i++) {
        int v = lookup(im, m->outputs[i].name);
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
        int node = materialize(im, o->expr, 0);
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

/* Names are unique in a graph; ONNX names cut to 63 bytes may collide. */
static void unique_names(ag_graph *g) {
    for (int i = 1; i < g->count; i++) {
        for (int j = 0; j < i; j++) {
            if (strcmp(g->nodes[i].name, g->nodes[j].name))
                continue;
            char suffix[16];
            int n = snprintf(suffix, sizeof suffix, "~%d", i);
            size_t len = strlen(g->nodes[i].name);
            if (len + (size_t)n >= sizeof g->nodes[i].name)
                len = sizeof g->nodes[i].name - 1 - (size_t)n;
            memcpy(g->nodes[i].name + len, suffix, (size_t)n + 1);
            j = -1; /* check the new name from the start */
        }
    }
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
