/*
 * fuzz_face.c - libFuzzer target for the face path without the networks: the detector's
 * decoding and weighted NMS (src/face/detect.c) on arbitrary raw outputs for arbitrary image
 * sizes, the FFHQ quads of what it keeps, and the warp and the aligned crop with its fill
 * (warp.c, align.c, fill.c) on those quads and on arbitrary affine maps (degenerate, huge,
 * non-finite) over a small image. Built by fuzz/run.sh with the face sources instrumented and
 * the rest from build/libanimegan.a.
 *
 * Input: u16 width, u16 height (of the notional photo; 1..65535), u8 min_score (0.05..1),
 * u8 max_faces, u8 crop size (8..71), u8 border/filter bits, 6 f32 of an affine map, then
 * records of u16 anchor + 17 f32 (score logit, 16 regressor values); other anchors score 0.
 */
#include "../src/face/face_internal.h"
#include "../src/util/util_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static ag_face_detector det; /* buffers only: no engines */
static ag_face faces[AG_FACE_MAX];
static uint8_t photo[64 * 48 * 4];

static int setup(void) {
    if (det.pass)
        return 0;
    det.regressors = malloc(sizeof(float) * AG_FACE_ANCHORS * 16);
    det.scores = malloc(sizeof(float) * AG_FACE_ANCHORS);
    det.pass = malloc(sizeof *det.pass * AG_FACE_ANCHORS);
    det.candidates = malloc(sizeof *det.candidates * AG_FACE_CANDIDATES);
    det.kept = malloc(sizeof *det.kept * AG_FACE_CANDIDATES);
    for (size_t i = 0; i < sizeof photo; i++)
        photo[i] = (uint8_t)(i * 37 + (i >> 7) * 11); /* a texture, not a flat colour */
    return !det.regressors || !det.scores || !det.pass || !det.candidates || !det.kept;
}

static float f32_at(const uint8_t *p) {
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* A warp of the test photo through `m` (both borders, both filters) and an aligned crop of
 * `face`: errors are fine, crashes and leaks are not. */
static void exercise_warp(const ag_affine *m, ag_face *face, int bits, int side) {
    ag_image im = {64, 48, bits & 4 ? 4 : 3, photo};
    static uint8_t out_u8[72 * 72 * 4];
    static float out_f32[72 * 72 * 4];
    ag_error err;
    ag_face_warp(&im, m, side, side, bits & 1 ? AG_WARP_LETTERBOX : AG_WARP_REFLECT,
                 bits & 2 ? AG_WARP_LINEAR : AG_WARP_CUBIC, bits & 8 ? NULL : out_u8,
                 bits & 8 ? out_f32 : NULL, &err);
    ag_image crop;
    if (ag_face_align(&im, face, side, &crop, &err) == AG_OK)
        ag_image_fini(&crop);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 32 || setup())
        return 0;
    size_t before = ag_allocated_bytes();
    int W = 1 + (data[0] | data[1] << 8) % 65535, H = 1 + (data[2] | data[3] << 8) % 65535;
    float min_score = 0.05f + (float)data[4] / 255.0f * 0.95f;
    int max_faces = data[5] % (AG_FACE_MAX + 1), side = 8 + data[6] % 64, bits = data[7];
    float a[6];
    for (int k = 0; k < 6; k++)
        a[k] = f32_at(data + 8 + 4 * k);
    ag_affine m = {a[0], a[1], a[2], a[3], a[4], a[5]};
    data += 32, size -= 32;

    for (int i = 0; i < AG_FACE_ANCHORS; i++)
        det.scores[i] = -100.0f;
    memset(det.regressors, 0, sizeof(float) * AG_FACE_ANCHORS * 16);
    for (; size >= 2 + 17 * 4; data += 2 + 17 * 4, size -= 2 + 17 * 4) {
        int anchor = (data[0] | data[1] << 8) % AG_FACE_ANCHORS;
        det.scores[anchor] = f32_at(data + 2);
        for (int k = 0; k < 16; k++)
            det.regressors[anchor * 16 + k] = f32_at(data + 6 + 4 * k);
    }
    /* The letterbox pass and one interior tile, as ag_faces_detect maps them. */
    double scale = (double)AG_FACE_SIDE / (W > H ? W : H);
    ag_affine view = {1 / scale, 0,         -(AG_FACE_SIDE - W * scale) / 2 / scale,
                      0,         1 / scale, -(AG_FACE_SIDE - H * scale) / 2 / scale};
    int n = 0, found = 0;
    ag_face_decode_pass(&det, &view, 0, min_score, &n);
    ag_face_decode_pass(&det, &view, bits >> 4, min_score, &n);
    AG_ASSERT(n <= AG_FACE_CANDIDATES);
    int kept = ag_face_select(&det, n, max_faces, faces, &found);
    AG_ASSERT(kept <= max_faces && kept <= found);
    for (int i = 0; i < kept; i++) {
        ag_face_quad_from_keypoints(faces[i].keypoints, 1.3f, faces[i].quad);
        if (i < 2) /* the crops cost more than the decoding: two per input */
            exercise_warp(&m, &faces[i], bits, side);
    }
    if (kept == 0) { /* still a quad: the map's own square, likely degenerate */
        ag_face f;
        memset(&f, 0, sizeof f);
        const float q[4][2] = {{a[2], a[5]},
                               {a[2] + a[1] * side, a[5] + a[4] * side},
                               {a[2] + (a[0] + a[1]) * side, a[5] + (a[3] + a[4]) * side},
                               {a[2] + a[0] * side, a[5] + a[3] * side}};
        memcpy(f.quad, q, sizeof q);
        exercise_warp(&m, &f, bits, side);
    }
    AG_ASSERT(ag_allocated_bytes() == before);
    return 0;
}
