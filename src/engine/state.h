/*
 * state.h - the engine's state, shared by the files of src/engine/ (lower.c, plan.c, the
 * kinds, run.c, reference.c, engine.c) and, through engine_internal.h, by the pipeline steps
 * of src/ and the tests that reach into plans. Not part of the public API.
 */
#ifndef AG_ENGINE_STATE_H
#define AG_ENGINE_STATE_H

#include "../graph/ops.h"
#include "../kernels/kernels.h"
#include "../kernels/onednn.h"
#include "../kernels/onednn_int8.h"
#include "../model/model_internal.h"
#include "../tensor/arena.h"

/* Hard ceiling on one image, whatever the front end allows: 64 Mpx. */
#define AG_MAX_PIXELS (64 * 1024 * 1024)

/* Where a pass reads the image and writes the result: u8 (H, W, bands) or f32 (H, W, 3). */
typedef struct ag_io {
    const uint8_t *in_u8;
    const float *in_f32;
    uint8_t *out_u8;
    float *out_f32;
    int bands;
} ag_io;

/* Target size of the band buffer a banded conv reads its padded input rows from: larger
 * bands mean fewer thread synchronisations per layer (costly when the machine is shared),
 * smaller ones less memory; 8 MB measured twice as fast as 2 MB on a loaded 2-core box. */
#define AG_BAND_BYTES ((size_t)8 << 20)

/* The engine's precision mode, decided once at create (mode.c); everything that depends on
 * the precision reads it through mode.c's questions. */
typedef enum ag_mode {
    AG_MODE_FP32,
    AG_MODE_BF16, /* activations and weights bf16 (fp32 accumulation and statistics) */
    AG_MODE_INT8, /* convs u8 x s8 where it pays (group.int8); activations fp32 */
    /* bf16 on a StyleGAN graph: the modulated convs' products bf16 x bf16 -> fp32 over the
     * model's shared bf16 weights; every activation and every other op fp32 */
    AG_MODE_MODCONV_BF16,
    /* int8 on a StyleGAN graph: the 3x3 modulated convs u8 x s8, band by band, each band
     * quantised with its own range; every other op as in fp32 */
    AG_MODE_MODCONV_INT8,
} ag_mode;

/*
 * The fused form of the graph the oneDNN backend runs (made once per model by the lowering,
 * lower.c): a step per group. A group is a producing node (a conv, or any op the bands
 * cannot absorb) followed by a chain of per-channel ops that only it reads: a norm (whose
 * affine form is computed from statistics after the step), a LeakyReLU, a residual add of
 * another group's value, a second LeakyReLU. The chain is never a separate pass: whoever
 * reads the group applies it on the fly while building its conv input band, or, when the
 * value is needed whole (several readers, a resize, a residual, a 1x1 conv), it is applied
 * in place once right after the step ("materialised").
 */
typedef struct ag_group {
    int head, tail; /* graph nodes: the producer and the chain's last node (the value) */
    int norm;       /* the chain's norm node, -1 for none */
    float pre_slope, post_slope; /* LeakyReLU before / after the residual add; 1: none */
    int prelu;    /* the PReLU node in pre_slope's place (its slopes per channel), -1: none;
                   * pre_slope is then the least of them (the int8 range's test) */
    ag_gate gate; /* SiLU or Mish in pre_slope's place (fp32 engines), 0: none */
    int residual; /* group whose value is added, -1 for none */
    /* a partial conv's concat (fp32): `into` on the conv, the group whose map holds the
     * concat and whose first channels its output replaces after its step (-1: none);
     * `spliced` on that group, whose value is then the concat, its head's before the step */
    int into, spliced;
    int act;         /* a generic head's bias_lrelu, applied as it writes (-1: none) */
    int materialize; /* chain applied in place after the step */
    /* a conv head's input */
    ag_band_kind kind;
    int src;                      /* group read (RAW, RESIZE), -1 for the image */
    int resize;                   /* the RESIZE node between src and this conv, -1 */
    int parts[AG_BAND_MAX_PARTS]; /* CONCAT: the groups whose values the band gathers */
    int part_count;
    int banded;     /* input rows built band by band; else oneDNN reads src's map whole */
    int direct;     /* unbanded with zero padding: oneDNN adds the zeros round src's map */
    int last_use;   /* last step that reads this group's buffer; group count = the output */
    int f32;        /* kept in fp32 even in bf16 mode (the output, generic readers) */
    int bf16_band;  /* gemm_bf16 mode: the conv's band and weights bf16, its output fp32 */
    int int8;       /* int8 mode: the conv runs u8 x s8 on a quantised copy of its band */
    int q8;         /* int8 mode: the head's output stored as a u8 map, a (scale, lo) per row */
    int alpha_only; /* the value reaches the output only through run-time alpha add_scaled
                     * terms: the step is skipped while that alpha is 0 (CodeFormer, w = 0) */
} ag_group;

/* A group's plan at the planned image size. */
typedef struct ag_group_exec {
    ag_shape in;  /* conv input after any resize, before padding */
    ag_shape out; /* the head's output */
    int hp, wp;   /* padded conv input */
    int band_rows, bands;
    int bottom_up; /* bands run last to first (an upsampling conv overwriting its source) */
    const struct ag_kind *kind; /* how the step runs (kind.h), chosen per plan */
    void *kernel;               /* the kind's primitive at this size; NULL: none */
    const void *shared_weights; /* its prepared weights, shared by the model's engines; NULL:
                                 * its own, at weight_offset in the engine's block */
    int buffer;                 /* arena buffer of the head's output */
    size_t offset;              /* within it (a conv overwriting its source as it goes) */
    long long run_at; /* planning: offset relative to the first group sharing the buffer */
    int run_joined;   /* planning: overwrites the group before, in its buffer */
    int run_cut;      /* planning: starts a new buffer instead (cut_runs) */
    ag_norm_affine affine;
    ag_resize_tap *row_taps, *col_taps;
    size_t weight_offset;
    /* int8 groups: the s8 weights and their per-OC scales (made at create) */
    int8_t *w_s8;
    float *w_scale;
    float y_scale; /* real value = y_scale * the head's output map (1 unless int8) */
    /* int8: per-channel [lo, hi] (C each) bounding the group's value (chain applied), from
     * the min/max taken with its statistics; range_ok 0 when it has none this run */
    float *lo, *hi;
    int range_ok;
    float *row_q; /* q8: (out.h, 2, out.c) scales and offsets of the map's rows (arena) */
    int row_q_id; /* q8: its arena buffer, live as long as the map */
} ag_group_exec;

struct ag_engine {
    const ag_model *model;
    ag_engine_options options;
    int threads;
    ag_resize_mode resize;        /* AG_RESIZE_DEFAULT: each resize node's own */
    ag_mode mode;                 /* the precision mode (mode.c) */
    int (*cancelled)(void *user); /* ag_engine_set_cancel: asked before each step and band */
    void *cancel_user;
    int has_runtime_alpha; /* ag_engine_set_runtime_alpha was called */
    float runtime_alpha;   /* the alpha of add_scaled nodes marked runtime_alpha */
    int steps_skipped;     /* the last run's steps skipped (alpha_only groups at alpha 0) */
    int (*progress)(void *user, int done, int total); /* ag_engine_set_progress: each step */
    void *progress_user;
    int measure_only; /* prepare plans sizes only (ag_engine_arena_bytes_for) */

    /* The lowering (oneDNN backend), independent of the size. */
    ag_group *groups; /* group_count entries, ag_malloc'ed at create */
    int group_count;
    int output_group; /* whose value the image is taken from (output_groups[0]) */
    int output_groups[AG_GRAPH_MAX_OUTPUTS];
    int output_tanh;     /* the graph's output is tanh of it */
    float *affine_block; /* every group's per-channel affine (and int8 range) arrays */

    /* The plan for planned_w x planned_h (0 x 0: none yet). */
    int planned_w, planned_h;
    ag_shape *shapes;    /* per graph node, ag_malloc'ed at create */
    ag_group_exec *exec; /* per group */
    ag_arena_buffer *buffers;
    int buffer_count, buffer_capacity;
    int band_id, scratch_id, partials_id, lade_id;
    int band_u8_id;   /* int8: the quantised band, -1 when no group is int8 */
    int range_id;     /* int8: per-thread min/max slots of the statistics pass, -1 */
    int q8_tmp_id;    /* int8: a q8 conv's fp32 band output, or rows materialised, -1 */
    int *node_buffer; /* reference: per graph node */
    int pad_id;       /* reference: padded conv input; lade's y */
    size_t band_bytes_target;
    size_t band_u8_bytes; /* int8: the largest quantised band of the plan */
    void *arena_block;    /* ag_malloc'ed; arena is its 64-byte aligned start */
    uint8_t *arena;
    size_t arena_bytes;
    size_t prepared_bytes; /* the prepared weights' block (planned, even when measure_only) */
    double *partials;

    /* AG_PROFILE=1 (tuning runs only): milliseconds and steps per op, printed at destroy. */
    double *profile_ms;
    int *profile_steps;
    double *profile_group_ms; /* AG_PROFILE=2: per group (AG_GRAPH_MAX_NODES entries) */
    int profile_runs;

    /* oneDNN state: primitives per group and their prepared weights (one allocation). */
    ag_dnnl *dnnl;
    void *weights_block;
    uint8_t *weights;
    void *int8_block; /* int8: every int8 group's s8 weights and scales, made at create */
};

int ag_engine_run_io(ag_engine *e, const ag_io *io, int width, int height, ag_error *err);

/*
 * Run the graph on a float input (H, W, 3) and copy each graph output o, (h, w, c) as
 * ag_engine_output_shape gives after prepare, into outs[o] (fp32, NHWC): for networks
 * whose outputs are not an image (the face detector and landmarks).
 */
int ag_engine_run_raw(ag_engine *e, const float *in, int width, int height, float *const *outs,
                      ag_error *err);
/* Shape of output `index` at the planned size; returns the output count, -1 if none. */
int ag_engine_output_shape(const ag_engine *e, int index, int *h, int *w, int *c);

/* Add a buffer to the plan being built; returns its id. */
int ag_engine_plan_add(ag_engine *e, size_t bytes, int first, int last);
static inline void *ag_engine_buffer(ag_engine *e, int id) {
    return e->arena + e->buffers[id].offset;
}

/* ---- within src/engine/ ---------------------------------------------------------------- */

/* mode.c: the precision mode and the questions the other files ask it. */
int ag_mode_decide(const ag_model *model, const ag_engine_options *options, ag_mode *mode,
                   ag_engine_options *resolved, ag_error *err);
int ag_mode_bf16_maps(const ag_engine *e);    /* activations stored bf16 */
int ag_mode_int8_maps(const ag_engine *e);    /* int8 groups, q8 maps, value ranges */
int ag_mode_fp32_bands(const ag_engine *e);   /* bands read fp32 maps as they are */
int ag_mode_modconv_bf16(const ag_engine *e); /* modulated convs' products bf16 */
int ag_mode_modconv_int8(const ag_engine *e); /* 3x3 modulated convs u8 x s8 */
int ag_mode_conv_int8(const ag_engine *e, const ag_node *head);      /* this conv runs u8 x s8 */
int ag_mode_conv_bf16_band(const ag_engine *e, const ag_node *head); /* its band bf16 */
int ag_mode_conv_winograd(const ag_engine *e, const ag_node *head);  /* fp32 Winograd */

/* lower.c: the groups, once per model. */
int ag_engine_lower(ag_engine *e, ag_error *err);
int ag_node_reads_src(const ag_node *n, int j);

/* plan.c: the plan for one image size. */
int ag_engine_plan(ag_engine *e, int width, int height, ag_error *err);
int ag_engine_band_rows_for(const ag_engine *e, int gi);
size_t ag_engine_band_input_bytes(const ag_engine *e, int gi, int rows);

/* kinds.c: each group's kind and kernel (kind.h). */
int ag_engine_create_kernels(ag_engine *e, size_t *scratch_max, size_t *band_max, ag_error *err);
void ag_engine_bind_kernels(ag_engine *e);
void ag_engine_destroy_kernels(ag_engine *e);
int ag_engine_quantize_weights(ag_engine *e, ag_error *err);

/* run.c: the steps. */
int ag_engine_run_steps(ag_engine *e, const ag_io *io, ag_error *err);
int ag_engine_cancelled(const ag_engine *e, ag_error *err); /* AG_E_CANCELLED when asked */
/* The value of the graph's run-time alpha (CodeFormer's fidelity w) for the next runs. */
void ag_engine_set_runtime_alpha(ag_engine *e, float alpha);
/* Node n as it runs now: n itself, or a copy in *tmp with the run-time alpha. */
const ag_node *ag_engine_node_now(const ag_engine *e, const ag_node *n, ag_node *tmp);
ag_band_source ag_engine_band_source(ag_engine *e, int gi, const ag_io *io);
void ag_engine_norm_affine(ag_engine *e, int gi);
float *ag_engine_range_begin(ag_engine *e, int gi, int layer_norm);
void ag_engine_range_end(ag_engine *e, int gi, const float *slots);
void ag_engine_run_node(ag_engine *e, int gi, const ag_node_fast *fast);
void ag_engine_print_profile(const ag_engine *e);

/* reference.c: the reference backend, node by node. */
int ag_reference_plan(ag_engine *e, ag_error *err);
int ag_reference_steps(ag_engine *e, const ag_io *io, ag_error *err); /* no output pass */
int ag_reference_run(ag_engine *e, const ag_io *io, ag_error *err);

static inline const ag_node *ag_engine_head(const ag_engine *e, int gi) {
    return &e->model->graph.nodes[e->groups[gi].head];
}

/* The raw output of group gi's head. */
static inline void *ag_engine_y_map(ag_engine *e, int gi) {
    return e->arena + e->buffers[e->exec[gi].buffer].offset + e->exec[gi].offset;
}

/* Bytes of one activation element of group gi. */
static inline size_t ag_engine_elem_bytes(const ag_engine *e, int gi) {
    if (e->groups[gi].q8)
        return 1;
    return ag_mode_bf16_maps(e) && !e->groups[gi].f32 ? 2 : sizeof(float);
}

/* The first output row of group gi's band b (the last band is moved up to end at the last
 * row: every band has the same height, so one primitive serves them). */
static inline int ag_band_first_row(const ag_group_exec *x, int b) {
    int first = b * x->band_rows;
    return first + x->band_rows > x->out.h ? x->out.h - x->band_rows : first;
}

/* The band processed i-th of `bands` in the order given: bottom-up, last to first. */
static inline int ag_band_in_order(int bands, int i, int bottom_up) {
    return bottom_up ? bands - 1 - i : i;
}

/* The band group x processes i-th, in its planned order. */
static inline int ag_band_at(const ag_group_exec *x, int i) {
    return ag_band_in_order(x->bands, i, x->bottom_up);
}

#endif
