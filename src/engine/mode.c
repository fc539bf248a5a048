/*
 * mode.c - the engine's precision mode, decided once at create from the precision asked
 * (resolved by src/precision.c), the backend and the graph; and the questions the lowering,
 * the plan and the kinds ask it. Nothing else in src/engine/ reads the precision.
 */
#include "state.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* A precision on a graph: the mode it runs as. */
typedef struct mode_row {
    ag_precision precision;
    int stylegan; /* a face restorer's graph: modulated convs (GPEN, GFPGAN) or a codebook
                     (CodeFormer); its activations stay fp32 */
    ag_mode mode;
} mode_row;

static const mode_row mode_rows[] = {
    {AG_PRECISION_FP32, 0, AG_MODE_FP32},
    {AG_PRECISION_FP32, 1, AG_MODE_FP32},
    /* every activation bf16 on a conv / LayerNorm graph */
    {AG_PRECISION_BF16, 0, AG_MODE_BF16},
    /* a StyleGAN graph's activations stay fp32: only the modulated convs' products bf16 */
    {AG_PRECISION_BF16, 1, AG_MODE_MODCONV_BF16},
    /* the plain convs u8 x s8 on quantised bands, maps stored u8 where they can be */
    {AG_PRECISION_INT8, 0, AG_MODE_INT8},
    /* only the 3x3 modulated convs u8 x s8, each band with its own range */
    {AG_PRECISION_INT8, 1, AG_MODE_MODCONV_INT8},
};

static int has_modconv(const ag_graph *g) {
    for (int i = 0; i < g->count; i++)
        if (g->nodes[i].op == AG_OP_MODCONV || g->nodes[i].op == AG_OP_CODEBOOK)
            return 1;
    return 0;
}

/* The options with the precision resolved: front ends resolve AUTO first, this is a net;
 * an explicit precision this CPU cannot run is refused. */
static int resolve(const ag_engine_options *o, ag_engine_options *resolved, ag_error *err) {
    ag_precision_choice choice;
    *resolved = *o;
    if (o->precision == AG_PRECISION_AUTO) {
        if (ag_precision_resolve(o->precision, o->backend, NULL, &choice) != 0)
            return ag_error_set(err, AG_E_UNSUPPORTED, "%s", choice.note);
        resolved->precision = choice.precision;
    } else if (o->backend == AG_BACKEND_ONEDNN &&
               ag_precision_resolve(o->precision, o->backend, NULL, &choice) == AG_E_UNSUPPORTED) {
        return ag_error_set(err, AG_E_UNSUPPORTED, "%s", choice.note);
    }
    return AG_OK;
}

/* Whether the backend and the model's weights allow the precision. */
static int check(const ag_model *model, const ag_engine_options *o, ag_error *err) {
    if (o->precision == AG_PRECISION_INT8 && o->backend == AG_BACKEND_REFERENCE)
        return ag_error_set(err, AG_E_UNSUPPORTED,
                            "the reference backend runs fp32 only; int8 needs --backend onednn");
    if (o->precision == AG_PRECISION_BF16 && o->backend == AG_BACKEND_REFERENCE)
        return ag_error_set(err, AG_E_UNSUPPORTED,
                            "the reference backend runs fp32 only; bf16 needs --backend onednn");
    if (o->backend != AG_BACKEND_ONEDNN && o->backend != AG_BACKEND_REFERENCE)
        return ag_error_set(err, AG_E_ARG, "unknown backend %d", (int)o->backend);
    if (model->fp32_dropped &&
        (o->precision != AG_PRECISION_BF16 || o->backend != AG_BACKEND_ONEDNN))
        return ag_error_set(err, AG_E_UNSUPPORTED,
                            "model %s keeps its weights in bf16 only (it was prepared so): "
                            "it runs with --precision bf16 on the onednn backend",
                            model->info.name);
    return AG_OK;
}

int ag_mode_decide(const ag_model *model, const ag_engine_options *options, ag_mode *mode,
                   ag_engine_options *resolved, ag_error *err) {
    int rc = resolve(options, resolved, err);
    if (rc == AG_OK)
        rc = check(model, resolved, err);
    if (rc)
        return rc;
    int stylegan = has_modconv(&model->graph);
    for (size_t i = 0; i < sizeof mode_rows / sizeof mode_rows[0]; i++)
        if (mode_rows[i].precision == resolved->precision && mode_rows[i].stylegan == stylegan) {
            *mode = mode_rows[i].mode;
            return AG_OK;
        }
    return ag_error_set(err, AG_E_ARG, "unknown precision %d", (int)resolved->precision);
}

int ag_mode_bf16_maps(const ag_engine *e) {
    return e->mode == AG_MODE_BF16;
}

int ag_mode_int8_maps(const ag_engine *e) {
    return e->mode == AG_MODE_INT8;
}

/* u8 and bf16 bands read one map each, converted: gathering a concat's parts or letting
 * oneDNN pad a map in place is for the modes whose bands read fp32 maps as they are. */
int ag_mode_fp32_bands(const ag_engine *e) {
    return e->mode == AG_MODE_FP32 || e->mode == AG_MODE_MODCONV_INT8;
}

int ag_mode_modconv_bf16(const ag_engine *e) {
    return e->mode == AG_MODE_MODCONV_BF16;
}

int ag_mode_modconv_int8(const ag_engine *e) {
    return e->mode == AG_MODE_MODCONV_INT8;
}

/* int8: every conv but the depthwise ones and the 3-channel output (slower in int8). */
int ag_mode_conv_int8(const ag_engine *e, const ag_node *head) {
    return e->mode == AG_MODE_INT8 && head->groups == 1 && head->out_c != 3;
}

/* Whether node n comes before a codebook (CodeFormer's encoder and transformer): the convs
 * that decide the codes stay fp32, since a code chosen otherwise changes a whole patch. */
static int decides_codes(const ag_graph *g, const ag_node *n) {
    for (const ag_node *c = n + 1; c < g->nodes + g->count; c++)
        if (c->op == AG_OP_CODEBOOK)
            return 1;
    return 0;
}

/* StyleGAN graphs in bf16: every plain conv's products bf16 too, on a bf16 band of its fp32
 * source (the band is where the conversion costs no extra pass). */
int ag_mode_conv_bf16_band(const ag_engine *e, const ag_node *head) {
    return e->mode == AG_MODE_MODCONV_BF16 && head->groups == 1 &&
           !decides_codes(&e->model->graph, head);
}

/* A face restorer's fp32 3x3 convs on Winograd where oneDNN has it (kind_conv.c; onednn.h
 * says which shapes): not the bf16 ones; and an upscaler's in fp32 engines (SPAN, RealPLKSR,
 * Compact, RRDBNet: 1.3-3x the direct conv at one thread, docs/upscale.md). Their rounding
 * differs from the direct conv's, so the styles and detectors keep their outputs bit for
 * bit. AG_WINOGRAD=0 keeps them direct (A/B). */
int ag_mode_conv_winograd(const ag_engine *e, const ag_node *head) {
    const char *off = getenv("AG_WINOGRAD");
    int upscaler = e->mode == AG_MODE_FP32 && e->model->info.role == AG_MODEL_UPSCALER;
    return (has_modconv(&e->model->graph) || upscaler) && !ag_mode_conv_bf16_band(e, head) &&
           e->mode != AG_MODE_BF16 && !(off && strcmp(off, "0") == 0);
}
