/*
 * onnx_patterns.c - the ONNX importer's pattern recognisers: an expression (the small DAG of
 * elementwise ops over maps and per-channel constants that onnx_import.c builds) becomes
 * graph nodes when something needs a map, by pattern: LADE, instance norm, the sum
 * normalisation of external attention, a per-channel affine chain, or the sum of two maps.
 */
#include "onnx_import_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- materialising an expression into nodes ------------------------------------------- */

static bool mean_of(const imp *im, int e, int *x) {
    if (im->ex[e].k != E_MEAN)
        return false;
    *x = im->ex[e].a;
    return true;
}

/* e = x - mean(x) */
static bool centered(const imp *im, int e, int *x) {
    int m;
    if (im->ex[e].k != E_SUB || !mean_of(im, im->ex[e].b, &m) ||
        !ag_oi_expr_eq(im, m, im->ex[e].a, 0))
        return false;
    *x = im->ex[e].a;
    return true;
}

/* e = mean((x - mean x)^2) */
static bool variance(const imp *im, int e, int *x) {
    int sq;
    if (!mean_of(im, e, &sq) || im->ex[sq].k != E_MUL ||
        !ag_oi_expr_eq(im, im->ex[sq].a, im->ex[sq].b, 0))
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
    if (ag_oi_is_scalar(im, sum->b, eps))
        return variance(im, sum->a, x);
    return ag_oi_is_scalar(im, sum->a, eps) && variance(im, sum->b, x);
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
            if (im->ex[inv].k == E_DIV && ag_oi_is_scalar(im, im->ex[inv].a, &one) && one == 1.0f)
                c = side ? d->b : d->a, s = im->ex[inv].b;
        }
    }
    if (s < 0 || !centered(im, c, x) || !std_dev(im, s, &x2, eps))
        return false;
    return ag_oi_expr_eq(im, *x, x2, 0);
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
                ag_oi_expr_eq(im, *y, y2, 0) && eps_y == *eps)
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
        bool left = ag_oi_is_const(im, x->a), right = ag_oi_is_const(im, x->b);
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
    int xn = ag_oi_materialize(im, x, depth + 1);
    if (xn < 0)
        return -1;
    const ag_node *conv = im->ex[y].k == E_MAP ? &im->g->nodes[im->ex[y].node] : NULL;
    if (!conv || conv->op != AG_OP_CONV || conv->src[0] != xn || conv->k != 1 ||
        conv->tensor[AG_T_BIAS] >= 0 || conv->stride != 1 || conv->groups != 1 ||
        conv->pad[0] + conv->pad[1] + conv->pad[2] + conv->pad[3] != 0 ||
        conv->out_c != ag_oi_channels_of(im, xn))
        return ag_oi_refuse_at(
                   im, im->ex[e].src,
                   "LADE statistics taken from something other than a bias-free 1x1 conv "
                   "of the normalised map"),
               -1;
    ag_node n = ag_node_make(AG_OP_LADE, "", xn, -1);
    n.tensor[AG_T_WEIGHT] = conv->tensor[AG_T_WEIGHT];
    n.eps = eps;
    n.in_c = n.out_c = ag_oi_channels_of(im, xn);
    return ag_oi_emit(im, &n, im->ex[e].src);
}

/* sum normalisation: x / (sum over channels of x + eps) */
static bool sum_normalized(const imp *im, int e, int *x, float *eps) {
    const expr *d = &im->ex[e];
    if (d->k != E_DIV || im->ex[d->b].k != E_ADD)
        return false;
    const expr *den = &im->ex[d->b];
    int sum = -1;
    if (ag_oi_is_scalar(im, den->a, eps))
        sum = den->b;
    else if (ag_oi_is_scalar(im, den->b, eps))
        sum = den->a;
    if (sum < 0 || im->ex[sum].k != E_CSUM || !ag_oi_expr_eq(im, im->ex[sum].a, d->a, 0))
        return false;
    *x = d->a;
    return true;
}

int ag_oi_materialize(imp *im, int e, int depth) {
    if (im->ex[e].mat >= 0)
        return im->ex[e].mat;
    if (depth > 32)
        return ag_oi_refuse_at(im, im->ex[e].src, "elementwise expressions nested too deeply"), -1;
    if (im->ex[e].vary != VARY_MAP)
        return ag_oi_refuse_at(im, im->ex[e].src,
                               "a per-channel statistic or constant is used as a feature map"),
               -1;
    int c = im->ex[e].chan;
    if (c < 1 || c > MAX_CONST_FLOATS)
        return ag_oi_refuse_at(im, im->ex[e].src, "a map of %d channels", c), -1;
    float *scale = ag_malloc(2 * (size_t)c * sizeof *scale);
    if (!scale)
        return ag_oi_nomem(im), -1;
    float *shift = scale + c;
    int base = e, x, y, node = -1;
    float eps;
    bool any;
    int src = im->ex[e].src;
    if (linear(im, e, &base, scale, shift, c, &any) != AG_OK)
        goto done;
    if (any && im->ex[base].vary != VARY_MAP) {
        ag_oi_refuse_at(im, src, "a per-channel statistic or constant is used as a feature map");
        goto done;
    }
    if (normalized(im, base, &x, &eps)) {
        /* Instance norm; the affine around it becomes its gamma and beta. */
        int xn = ag_oi_materialize(im, x, depth + 1);
        if (xn < 0)
            goto done;
        ag_node n = ag_node_make(AG_OP_INSTANCE_NORM, "", xn, -1);
        n.eps = eps;
        n.out_c = c;
        if (any && (n.tensor[AG_T_GAMMA] = ag_oi_derived_tensor(im, "gamma", scale, c)) < 0)
            goto done;
        if (any && (n.tensor[AG_T_BETA] = ag_oi_derived_tensor(im, "beta", shift, c)) < 0)
            goto done;
        node = ag_oi_emit(im, &n, src);
        any = false;
    } else if (lade(im, base, &x, &y, &eps)) {
        node = emit_lade(im, base, x, y, eps, depth);
    } else if (sum_normalized(im, base, &x, &eps)) {
        int xn = ag_oi_materialize(im, x, depth + 1);
        if (xn < 0)
            goto done;
        ag_node n = ag_node_make(AG_OP_SUM_NORMALIZE, "", xn, -1);
        n.eps = eps;
        n.out_c = c;
        node = ag_oi_emit(im, &n, im->ex[base].src);
    } else if (im->ex[base].k == E_ADD && im->ex[im->ex[base].a].vary == VARY_MAP &&
               im->ex[im->ex[base].b].vary == VARY_MAP) {
        int a = ag_oi_materialize(im, im->ex[base].a, depth + 1);
        int b = a < 0 ? -1 : ag_oi_materialize(im, im->ex[base].b, depth + 1);
        if (b < 0)
            goto done;
        if (ag_oi_channels_of(im, a) != ag_oi_channels_of(im, b)) {
            ag_oi_refuse_at(im, im->ex[base].src, "adds %d channels to %d",
                            ag_oi_channels_of(im, b), ag_oi_channels_of(im, a));
            goto done;
        }
        ag_node n = ag_node_make(AG_OP_ADD, "", a, b);
        n.out_c = c;
        node = ag_oi_emit(im, &n, im->ex[base].src);
    } else if (im->ex[base].k == E_MAP || im->ex[base].mat >= 0) {
        node = im->ex[base].mat;
    } else {
        static const char *const kinds[] = {"map", "const", "mean", "channel sum", "Add",
                                            "Sub", "Mul",   "Div",  "Sqrt"};
        ag_oi_refuse_at(im, im->ex[base].src,
                        "an elementwise %s the importer does not recognise (not a norm, LADE, "
                        "per-channel affine or the sum of two maps)",
                        kinds[im->ex[base].k]);
        goto done;
    }
    if (node >= 0 && any && !(all_equal(scale, c, 1.0f) && all_equal(shift, c, 0.0f))) {
        ag_node n = ag_node_make(AG_OP_AFFINE, "", node, -1);
        n.out_c = c;
        if (!all_equal(scale, c, 1.0f) &&
            (n.tensor[AG_T_GAMMA] = ag_oi_derived_tensor(im, "scale", scale, c)) < 0)
            node = -1;
        if (node >= 0 && !all_equal(shift, c, 0.0f) &&
            (n.tensor[AG_T_BETA] = ag_oi_derived_tensor(im, "shift", shift, c)) < 0)
            node = -1;
        if (node >= 0)
            node = ag_oi_emit(im, &n, src);
    }
done:
    ag_free(scale);
    if (node >= 0)
        im->ex[e].mat = node;
    return node;
}
