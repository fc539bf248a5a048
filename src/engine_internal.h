/*
 * engine_internal.h - the engine's state, shared by engine.c and stylize.c (and the tests,
 * which reach into plans). Not part of the public API.
 */
#ifndef AG_ENGINE_INTERNAL_H
#define AG_ENGINE_INTERNAL_H

#include "kernels/kernels.h"
#include "kernels/onednn.h"
#include "model/model_internal.h"
#include "tensor/arena.h"

/* Hard ceiling on one image, whatever the front end allows: 64 Mpx. */
#define AG_MAX_PIXELS (64 * 1024 * 1024)

/* Feature-map sizes of one layer at the planned image size. */
typedef struct ag_layer_geom {
    int in_h, in_w;   /* after any resize, before padding */
    int hp, wp;       /* padded input */
    int out_h, out_w; /* conv output */
} ag_layer_geom;

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

/* How layer i runs on oneDNN at the planned size. */
typedef struct ag_layer_exec {
    int banded;           /* input rows built band by band (padding, resize, norm on the fly) */
    int materialize_prev; /* normalise Y[i-1] in place first (1x1 convs, resize sources) */
    int band_rows, bands; /* output rows per band; a non-banded layer is one band */
    struct ag_dnnl_conv *conv; /* for one band of band_rows output rows */
} ag_layer_exec;

struct ag_engine {
    const ag_model *model;
    ag_engine_options options;
    int threads;
    ag_resize_mode resize;
    int bf16;         /* activations and weights bf16 (fp32 accumulation and statistics) */
    int measure_only; /* prepare plans sizes only (ag_engine_arena_bytes_for) */

    /* The plan for planned_w x planned_h (0 x 0: none yet). */
    int planned_w, planned_h;
    ag_layer_geom geom[AG_MAX_LAYERS];
    ag_arena_buffer buffers[4 * AG_MAX_LAYERS + 8];
    int y_ids[AG_MAX_LAYERS];        /* oneDNN: the buffer holding each conv output */
    size_t y_offsets[AG_MAX_LAYERS]; /* and where in it (layers overwriting their input) */
    int band_id, scratch_id;
    int ref_ids[4]; /* reference: two activations, padded input, residual */
    size_t band_bytes_target;
    ag_layer_exec exec[AG_MAX_LAYERS];
    void *arena_block; /* ag_malloc'ed; arena is its 64-byte aligned start */
    uint8_t *arena;
    size_t arena_bytes;

    /* Views into the arena bound at prepare time. */
    double *partials;
    ag_norm_affine affine;
    ag_resize_tap *row_taps[AG_MAX_LAYERS], *col_taps[AG_MAX_LAYERS];

    /* oneDNN state: primitives per layer and their prepared weights (one allocation). */
    ag_dnnl *dnnl;
    void *weights_block;
    uint8_t *weights;
    size_t weight_offsets[AG_MAX_LAYERS];
};

int ag_engine_run_io(ag_engine *e, const ag_io *io, int width, int height, ag_error *err);

#endif
