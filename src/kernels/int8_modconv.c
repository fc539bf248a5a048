/*
 * int8_modconv.c - the modulated 3x3 convs (stride 1, zero padding 1) of an int8 StyleGAN
 * engine as u8 x s8 oneDNN convs (onednn_int8.h), band by band: the range of each band's
 * modulated input rows is taken in one pass, the rows are modulated straight into u8 with
 * the (scale, zero) it gives in a second, and convolved with the weight quantised once per
 * output channel; the band's scale joins the demodulation in the epilogue. Bands of 16
 * output rows (a map up to 32 rows whole), the last moved up to end at the last row, so one
 * primitive serves every band.
 */
#include "kernels.h"
#include "onednn_int8.h"

#include "../util/util_internal.h"

#include <string.h>

#define BAND_ROWS 16

struct ag_int8_modconv {
    int H, W, IC, OC, rows;
    ag_dnnl_int8_conv *conv;
    int8_t *w_s8;   /* (OC, IC, 3, 3), kept for prepare */
    float *w_scale; /* OC */
    /* bound: the band's u8 rows, the conv's output and the epilogue's scale */
    uint8_t *rows_u8;
    float *out_band, *scale;
};

static size_t round64(size_t bytes) {
    return (bytes + 63) & ~(size_t)63;
}

/* The padded input rows of a band, in values (bytes, as u8). */
static size_t rows_values(const ag_int8_modconv *c) {
    return (size_t)(c->rows + 2) * (c->W + 2) * c->IC;
}

void ag_int8_modconv_destroy(ag_int8_modconv *c) {
    if (!c)
        return;
    ag_dnnl_int8_conv_destroy(c->conv);
    ag_free(c->w_s8);
    ag_free(c->w_scale);
    ag_free(c);
}

int ag_int8_modconv_create(ag_dnnl *dnnl, int H, int W, int IC, int OC, const float *packed,
                           ag_int8_modconv **out, size_t *scratch_bytes, size_t *band_bytes,
                           size_t *weight_bytes, ag_error *err) {
    *out = NULL;
    ag_int8_modconv *c = ag_calloc(1, sizeof *c);
    size_t count = (size_t)OC * IC * 9;
    float *oihw = ag_malloc(sizeof(float) * count);
    if (c) {
        c->w_s8 = ag_malloc(count);
        c->w_scale = ag_malloc(sizeof(float) * (size_t)OC);
    }
    if (!c || !oihw || !c->w_s8 || !c->w_scale) {
        ag_free(oihw);
        ag_int8_modconv_destroy(c);
        return ag_error_set(err, AG_E_NOMEM, "out of memory");
    }
    c->H = H, c->W = W, c->IC = IC, c->OC = OC;
    c->rows = H <= 2 * BAND_ROWS ? H : BAND_ROWS;
    for (int ic = 0; ic < IC; ic++) /* packed (IC, 9, OC) -> (OC, IC, 3, 3) */
        for (int t = 0; t < 9; t++)
            for (int oc = 0; oc < OC; oc++)
                oihw[((size_t)oc * IC + ic) * 9 + t] = packed[((size_t)ic * 9 + t) * OC + oc];
    ag_int8_quantize_weights(c->w_s8, c->w_scale, oihw, OC, (size_t)IC * 9, ag_int8_weight_max());
    ag_free(oihw);
    ag_int8_conv_shape s = {c->rows + 2, W + 2, IC, OC, 3, 1, 1, 0, 0};
    int rc = ag_dnnl_int8_conv_create(dnnl, &s, c->w_scale, 1.0f, &c->conv, scratch_bytes,
                                      weight_bytes, err);
    if (rc) {
        ag_int8_modconv_destroy(c);
        return rc;
    }
    *band_bytes = round64(rows_values(c)) + round64(sizeof(float) * (size_t)c->rows * W * OC) +
                  round64(sizeof(float) * (size_t)OC);
    *out = c;
    return AG_OK;
}

int ag_int8_modconv_same_weights(const ag_int8_modconv *c, const ag_int8_modconv *other) {
    return c && other && ag_dnnl_int8_conv_same_weights(c->conv, other->conv);
}

int ag_int8_modconv_prepare_weights(ag_int8_modconv *c, void *prepared, ag_error *err) {
    return ag_dnnl_int8_conv_prepare_weights(c->conv, c->w_s8, prepared, err);
}

void ag_int8_modconv_bind(ag_int8_modconv *c, void *prepared, void *band, void *scratch) {
    uint8_t *at = band;
    c->rows_u8 = at;
    at += round64(rows_values(c));
    c->out_band = (float *)at;
    at += round64(sizeof(float) * (size_t)c->rows * c->W * c->OC);
    c->scale = (float *)at;
    ag_dnnl_int8_conv_bind(c->conv, c->rows_u8, c->out_band, prepared, scratch);
}

void ag_int8_modconv_run(const ag_int8_modconv *c, float *out, const float *src, const float *style,
                         const float *scale, const float *shift, int threads) {
    static const int pad[4] = {1, 1, 1, 1};
    for (int y0 = 0; y0 < c->H; y0 += c->rows) {
        int first = y0 + c->rows <= c->H ? y0 : c->H - c->rows; /* the last band moved up */
        float lo, hi; /* the input rows the band reads: [first - 1, first + rows + 1) */
        ag_fused_modulate_range(src, c->H, c->W, c->IC, style, first - 1, c->rows + 2, &lo, &hi,
                                threads);
        ag_int8_quant q = ag_int8_quant_from_range(lo, hi);
        ag_fused_modulate_u8(c->rows_u8, src, c->H, c->W, c->IC, style, pad, first, c->rows + 2,
                             q.x_scale, q.x_zero, threads);
        ag_error err;
        int rc = ag_dnnl_int8_conv_run(c->conv, &q, NULL, &err);
        AG_ASSERT(rc == AG_OK);            /* shapes fixed at create: nothing left to fail */
        for (int oc = 0; oc < c->OC; oc++) /* the output is y / x_scale */
            c->scale[oc] = (scale ? scale[oc] : 1.0f) * q.x_scale;
        ag_fused_scale_shift(out + (size_t)first * c->W * c->OC, c->out_band, (size_t)c->W * c->OC,
                             c->rows, c->W, c->OC, c->scale, shift, threads);
    }
}
