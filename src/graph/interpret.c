/*
 * interpret.c - the reference backend: the graph run node by node with the plain kernels,
 * every node's output its own fp32 map in the arena (offsets by liveness), nothing fused.
 * Slow and obvious: the oracle the oneDNN backend's fusion is tested against, and the
 * interpreter of any graph a loader produces.
 */
#include "../engine_internal.h"

#include <math.h>
#include <string.h>

static size_t map_floats(ag_shape s) {
    return (size_t)s.h * s.w * s.c;
}

static ag_shape input_shape(const ag_node *n, const ag_shape *shapes, int index) {
    (void)index;
    return shapes[n->in[0]];
}

size_t ag_node_scratch_floats(const ag_node *n, const ag_shape *shapes, int index) {
    ag_shape in = index > 0 ? input_shape(n, shapes, index) : shapes[0];
    if (n->op == AG_OP_CONV || n->op == AG_OP_MAX_POOL)
        return (size_t)(in.h + n->pad[0] + n->pad[1]) * (in.w + n->pad[2] + n->pad[3]) * in.c;
    if (n->op == AG_OP_LADE)
        return map_floats(in);
    return 0;
}

/* out (HP, WP, C) <- in (H, W, C) padded by reflection or zeros (max pool: -inf). */
static void pad_map(float *out, const float *in, ag_shape s, const int *pad, ag_pad_mode mode,
                    float fill) {
    if (mode == AG_PAD_REFLECT) {
        ag_pad p = {pad[0], pad[1], pad[2], pad[3]};
        ag_ref_reflect_pad(out, in, s.h, s.w, s.c, p);
        return;
    }
    int HP = s.h + pad[0] + pad[1], WP = s.w + pad[2] + pad[3];
    for (int y = 0; y < HP; y++)
        for (int x = 0; x < WP; x++) {
            float *o = out + ((size_t)y * WP + x) * s.c;
            int sy = y - pad[0], sx = x - pad[2];
            if (sy < 0 || sy >= s.h || sx < 0 || sx >= s.w)
                for (int c = 0; c < s.c; c++)
                    o[c] = fill;
            else
                memcpy(o, in + ((size_t)sy * s.w + sx) * s.c, sizeof(float) * (size_t)s.c);
        }
}

/* Per-channel x * scale + shift (NULL: 1 and 0). */
static void affine_map(float *out, const float *in, size_t N, int C, const float *scale,
                       const float *shift) {
    for (size_t p = 0; p < N; p++)
        for (int c = 0; c < C; c++)
            out[p * C + c] = in[p * C + c] * (scale ? scale[c] : 1.0f) + (shift ? shift[c] : 0.0f);
}

/* Instance norm (and LADE's rescaling): per channel, from double moments. */
static void normalize_channels(float *out, const float *in, size_t N, int C, const double *mean,
                               const double *var, float eps, const double *mean_y,
                               const double *var_y, const float *gamma, const float *beta) {
    for (int c = 0; c < C; c++) {
        double scale = 1.0 / sqrt(var[c] + (double)eps), shift = 0.0;
        if (mean_y)
            scale *= sqrt(var_y[c] + (double)eps), shift = mean_y[c];
        if (gamma)
            scale *= (double)gamma[c], shift *= (double)gamma[c];
        if (beta)
            shift += (double)beta[c];
        for (size_t p = 0; p < N; p++)
            out[p * C + c] = (float)(((double)in[p * C + c] - mean[c]) * scale + shift);
    }
}

static void max_pool(float *out, const float *padded, ag_shape in, ag_shape o, const ag_node *n) {
    int WP = in.w + n->pad[2] + n->pad[3];
    for (int y = 0; y < o.h; y++)
        for (int x = 0; x < o.w; x++)
            for (int c = 0; c < o.c; c++) {
                float m = -INFINITY;
                for (int ky = 0; ky < n->k; ky++)
                    for (int kx = 0; kx < n->k; kx++) {
                        float v =
                            padded[((size_t)(y * n->stride + ky) * WP + x * n->stride + kx) * in.c +
                                   c];
                        m = v > m ? v : m;
                    }
                out[((size_t)y * o.w + x) * o.c + c] = m;
            }
}

static void activation(float *out, const float *in, size_t n, const ag_node *node) {
    for (size_t i = 0; i < n; i++) {
        float v = in[i];
        switch (node->op) {
        case AG_OP_LRELU: v = v < 0.0f ? v * node->alpha : v; break;
        case AG_OP_RELU: v = v < 0.0f ? 0.0f : v; break;
        case AG_OP_RELU6: v = v < 0.0f ? 0.0f : v > 6.0f ? 6.0f : v; break;
        case AG_OP_TANH: v = tanhf(v); break;
        case AG_OP_SIGMOID: v = 1.0f / (1.0f + expf(-v)); break;
        default: break;
        }
        out[i] = v;
    }
}

void ag_node_run(const ag_node *n, const ag_shape *shapes, int index, const float *in0,
                 const float *in1, float *out, float *scratch, int fast, ag_resize_mode resize,
                 int threads) {
    ag_shape in = shapes[n->in[0]], o = shapes[index];
    size_t N = (size_t)in.h * in.w;
    double mean[AG_NORM_MAX_CHANNELS], var[AG_NORM_MAX_CHANNELS];
    double mean_y[AG_NORM_MAX_CHANNELS], var_y[AG_NORM_MAX_CHANNELS];
    switch (n->op) {
    case AG_OP_CONV:
        pad_map(scratch, in0, in, n->pad, n->pad_mode, 0.0f);
        ag_ref_conv2d(out, scratch, n->weight, n->bias, in.h + n->pad[0] + n->pad[1],
                      in.w + n->pad[2] + n->pad[3], in.c, o.c, n->k, n->stride, n->groups);
        break;
    case AG_OP_MAX_POOL:
        pad_map(scratch, in0, in, n->pad, AG_PAD_ZERO, -INFINITY);
        max_pool(out, scratch, in, o, n);
        break;
    case AG_OP_LAYER_NORM:
        memcpy(out, in0, sizeof(float) * map_floats(in));
        ag_ref_layer_norm(out, n->gamma, n->beta, in.h, in.w, in.c, n->eps);
        break;
    case AG_OP_INSTANCE_NORM:
        ag_channel_moments(mean, var, in0, N, in.c, 1);
        normalize_channels(out, in0, N, in.c, mean, var, n->eps, NULL, NULL, n->gamma, n->beta);
        break;
    case AG_OP_LADE:
        /* y = W1 x in full (the definition), then both sets of moments. */
        ag_matmul(scratch, in0, n->weight, 1, N, in.c, in.c, 0, threads);
        ag_channel_moments(mean, var, in0, N, in.c, 1);
        ag_channel_moments(mean_y, var_y, scratch, N, in.c, 1);
        normalize_channels(out, in0, N, in.c, mean, var, n->eps, mean_y, var_y, NULL, NULL);
        break;
    case AG_OP_AFFINE: affine_map(out, in0, N, in.c, n->gamma, n->beta); break;
    case AG_OP_PRELU:
        for (size_t i = 0; i < map_floats(in); i++)
            out[i] = in0[i] < 0.0f ? in0[i] * n->gamma[i % (size_t)in.c] : in0[i];
        break;
    case AG_OP_LRELU:
    case AG_OP_RELU:
    case AG_OP_RELU6:
    case AG_OP_TANH:
    case AG_OP_SIGMOID: activation(out, in0, map_floats(in), n); break;
    case AG_OP_ADD:
        for (size_t i = 0; i < map_floats(in); i++)
            out[i] = in0[i] + in1[i];
        break;
    case AG_OP_RESIZE:
    case AG_OP_RESIZE2X:
        ag_ref_resize_bilinear(out, in0, in.h, in.w, o.h, o.w, in.c,
                               resize != AG_RESIZE_DEFAULT ? resize : n->mode);
        break;
    case AG_OP_MATMUL:
        ag_matmul(out, in0, n->weight, n->transpose, N, in.c, o.c, fast, threads);
        break;
    case AG_OP_SOFTMAX:
        memcpy(out, in0, sizeof(float) * map_floats(in));
        ag_softmax(out, N, in.c, n->axis == AG_AXIS_SPATIAL, threads);
        break;
    case AG_OP_SUM_NORMALIZE:
        memcpy(out, in0, sizeof(float) * map_floats(in));
        ag_sum_normalize(out, N, in.c, n->eps, threads);
        break;
    case AG_OP_PAD_CHANNELS:
        for (size_t p = 0; p < N; p++) {
            memcpy(out + p * o.c, in0 + p * in.c, sizeof(float) * (size_t)in.c);
            memset(out + p * o.c + in.c, 0, sizeof(float) * (size_t)(o.c - in.c));
        }
        break;
    default: AG_ASSERT(!"node op without a kernel");
    }
}

/* ---- the reference plan ---------------------------------------------------------------- */

int ag_interpret_plan(ag_engine *e, ag_error *err) {
    (void)err;
    const ag_graph *g = &e->model->graph;
    int last[AG_GRAPH_MAX_NODES] = {0};
    for (int i = 0; i < g->count; i++)
        last[i] = i;
    for (int i = 0; i < g->count; i++)
        for (int j = 0; j < 2; j++)
            if (g->nodes[i].in[j] >= 0)
                last[g->nodes[i].in[j]] = i;
    for (int o = 0; o < g->output_count; o++)
        last[g->outputs[o]] = g->count;
    size_t scratch = 0;
    for (int i = 1; i < g->count; i++) {
        size_t s = ag_node_scratch_floats(&g->nodes[i], e->shapes, i);
        scratch = s > scratch ? s : scratch;
        e->node_buffer[i] =
            ag_engine_plan_add(e, sizeof(float) * map_floats(e->shapes[i]), i, last[i]);
    }
    e->node_buffer[0] = ag_engine_plan_add(e, sizeof(float) * map_floats(e->shapes[0]), 0, last[0]);
    e->pad_id = ag_engine_plan_add(e, sizeof(float) * (scratch ? scratch : 1), 0, g->count);
    return AG_OK;
}

void ag_interpret_steps(ag_engine *e, const ag_io *io) {
    const ag_graph *g = &e->model->graph;
    float *x = ag_engine_buffer(e, e->node_buffer[0]);
    size_t n = (size_t)e->planned_h * e->planned_w;
    for (size_t i = 0; i < n; i++)
        for (int c = 0; c < 3; c++)
            x[i * 3 + c] = io->in_u8 ? (float)io->in_u8[i * io->bands + c] / 127.5f - 1.0f
                                     : io->in_f32[i * 3 + c];
    float *scratch = ag_engine_buffer(e, e->pad_id);
    for (int i = 1; i < g->count; i++) {
        const ag_node *node = &g->nodes[i];
        const float *in1 =
            node->in[1] >= 0 ? ag_engine_buffer(e, e->node_buffer[node->in[1]]) : NULL;
        ag_node_run(node, e->shapes, i, ag_engine_buffer(e, e->node_buffer[node->in[0]]), in1,
                    ag_engine_buffer(e, e->node_buffer[i]), scratch, 0, e->resize, 1);
    }
}

void ag_interpret_run(ag_engine *e, const ag_io *io) {
    const ag_graph *g = &e->model->graph;
    ag_interpret_steps(e, io);
    int out = g->outputs[0];
    ag_shape s = e->shapes[out];
    ag_fused_output(io->out_f32, io->out_u8, io->bands, ag_engine_buffer(e, e->node_buffer[out]), 0,
                    s.h, s.w, 1);
}
