/*
 * test_upscale.c - the upscalers against their independent references, and tiling.
 *
 * Fixtures (tests/fixtures/upscale/NAME.agup, written by tools/make_upscale_fixtures.py):
 * seeded Real-ESRGAN checkpoints in the real key layouts run by tools/realesrgan_reference.py
 * (PyTorch, float64), and the bundled UpscalerJS models' original TF.js files run by
 * tools/tfjs_reference.py (numpy, float64). Tolerances, each reached error printed:
 *   float output, in the network's [0, 1] range: max |ours - reference| <= 1e-3 (fp32);
 *   8-bit output: at most 1 level apart; tiled = untiled within 1 level.
 */
#include "test.h"

#include "../src/engine/kind.h"
#include "../src/engine_internal.h"
#include "../src/kernels/fused_isa.h"
#include "../src/model/model_internal.h"

#include <stdint.h>

#define FP32_TOLERANCE 1e-3

typedef struct fixture {
    int width, height, scale;
    char model[65];
    uint8_t *input;   /* (H, W, 3) */
    float *output;    /* (sH, sW, 3), pixel units */
    uint8_t *output8; /* (sH, sW, 3) */
    uint8_t *file;
} fixture;

static uint32_t read_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int fixture_load(fixture *f, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/tests/fixtures/upscale/%s.agup", AG_SOURCE_DIR, name);
    memset(f, 0, sizeof *f);
    size_t size;
    ag_error err;
    CHECK_OK(ag_read_file(path, 64u << 20, &f->file, &size, &err), &err);
    const uint8_t *p = f->file;
    CHECK_MSG(size >= 84 && !memcmp(p, "AGUP", 4) && read_u32(p + 4) == 1, "%s: bad header", path);
    f->width = (int)read_u32(p + 8), f->height = (int)read_u32(p + 12);
    f->scale = (int)read_u32(p + 16);
    memcpy(f->model, p + 20, 64);
    size_t n = (size_t)f->width * f->height * 3, m = n * f->scale * f->scale;
    CHECK_MSG(size == 84 + n + m * 5, "%s: size %zu, expected %zu", path, size, 84 + n + m * 5);
    f->input = f->file + 84;
    f->output = ag_malloc(m * sizeof(float)); /* copied: the file offset is unaligned */
    memcpy(f->output, f->file + 84 + n, m * sizeof(float));
    f->output8 = f->file + 84 + n + 4 * m;
    return 0;
}

static void fixture_fini(fixture *f) {
    ag_free(f->file);
    ag_free(f->output);
}

static int open_model(const char *relative, ag_model **model) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", AG_SOURCE_DIR, relative);
    ag_error err = {0};
    CHECK_OK(ag_model_load(path, model, &err), &err);
    CHECK(!strcmp(ag_model_get_info(*model)->kind, "upscaler"));
    return 0;
}

/* The whole network on the fixture's input (float), and through ag_upscale (8-bit). */
static int golden(const char *name, ag_backend backend) {
    fixture f;
    if (fixture_load(&f, name))
        return 1;
    ag_model *model = NULL;
    ag_engine *engine = NULL;
    ag_error err = {0};
    int failed = open_model(f.model, &model);
    const ag_model_info *info = failed ? NULL : ag_model_get_info(model);
    ag_engine_options o = {.backend = backend, .precision = AG_PRECISION_FP32, .threads = 2};
    if (!failed &&
        (info->scale != f.scale || ag_engine_create(model, &o, &engine, &err) != AG_OK)) {
        fprintf(stderr, "  %s: scale %d (fixture %d): %s\n", name, info->scale, f.scale,
                err.message);
        failed = 1;
    }
    size_t n = (size_t)f.width * f.height * 3, m = n * f.scale * f.scale;
    float *in = ag_malloc(n * sizeof(float)), *out = ag_malloc(m * sizeof(float));
    double max_err = 0;
    int max_level = 0;
    /* x2plus: the network takes even sides (ag_upscale pads); the fixtures' are */
    if (!failed && f.width % info->side_multiple == 0 && f.height % info->side_multiple == 0) {
        for (size_t i = 0; i < n; i++)
            in[i] = f.input[i] * info->pixel_max / 255.0f;
        float *outs[1] = {out};
        failed = ag_engine_run_raw(engine, in, f.width, f.height, outs, &err) != AG_OK;
        if (failed)
            fprintf(stderr, "  %s: %s\n", name, err.message);
        for (size_t i = 0; !failed && i < m; i++) {
            double range = (double)info->pixel_max;
            double d = fabs((double)out[i] - (double)f.output[i] * range / 255.0) / range;
            max_err = d > max_err ? d : max_err;
        }
    }
    ag_image img = {f.width, f.height, 3, f.input}, big = {0};
    if (!failed && ag_upscale(engine, &img, NULL, &big, &err) != AG_OK) {
        fprintf(stderr, "  %s: %s\n", name, err.message);
        failed = 1;
    }
    for (size_t i = 0; !failed && i < m; i++) {
        int d = abs((int)big.pixels[i] - (int)f.output8[i]);
        max_level = d > max_level ? d : max_level;
    }
    printf("  %s (%s): %dx%d x%d, max float error %.2e (of 1), max 8-bit difference %d\n", name,
           backend == AG_BACKEND_REFERENCE ? "reference" : "onednn", f.width, f.height, f.scale,
           max_err, max_level);
    ag_image_fini(&big);
    ag_free(in);
    ag_free(out);
    ag_engine_destroy(engine);
    ag_model_destroy(model);
    fixture_fini(&f);
    CHECK(!failed);
    CHECK(max_err <= FP32_TOLERANCE);
    CHECK(max_level <= 1);
    return 0;
}

#define GOLDEN(fn, name)                                                                           \
    static int fn(void) {                                                                          \
        return golden(name, AG_BACKEND_ONEDNN) || golden(name, AG_BACKEND_REFERENCE);              \
    }
GOLDEN(animevideov3, "animevideov3")
GOLDEN(general_x4v3, "general-x4v3")
GOLDEN(x4plus, "x4plus")
GOLDEN(anime_6b, "anime-6B")
GOLDEN(x2plus, "x2plus")
GOLDEN(esrgan_slim_x2, "esrgan-slim-x2")
GOLDEN(esrgan_slim_x3, "esrgan-slim-x3")
GOLDEN(esrgan_medium_x2, "esrgan-medium-x2")
GOLDEN(esrgan_medium_x4, "esrgan-medium-x4")
/* tools/make_upscaler_arch_fixtures.py: spandrel's code on seeded weights */
GOLDEN(rrdb_old_x4, "arch/rrdb-old-x4")
GOLDEN(rrdb_old_x1, "arch/rrdb-old-x1")
GOLDEN(rrdb_old_x2, "arch/rrdb-old-x2")
GOLDEN(rrdb_old_x8, "arch/rrdb-old-x8")
GOLDEN(rrdb_bsrgan_x4, "arch/rrdb-bsrgan-x4")
GOLDEN(rrdb_new_x2, "arch/rrdb-new-x2")
GOLDEN(rrdb_new_x1, "arch/rrdb-new-x1")
GOLDEN(rrdb_new_x4, "arch/rrdb-new-x4")
GOLDEN(compact_x1, "arch/compact-x1")
GOLDEN(compact_x2, "arch/compact-x2")
GOLDEN(span_x4, "arch/span-x4")
GOLDEN(span_x2, "arch/span-x2")
GOLDEN(realplksr_x4, "arch/realplksr-x4")
GOLDEN(realplksr_x2, "arch/realplksr-x2")
GOLDEN(realplksr_ln_x4, "arch/realplksr-ln-x4")
GOLDEN(realplksr_dys_x4, "arch/realplksr-dys-x4")
GOLDEN(realplksr_dys_x3, "arch/realplksr-dys-x3")
GOLDEN(realplksr_dys_x1, "arch/realplksr-dys-x1")

/* ---- architecture inference and bad input ------------------------------------------------ */

static int inferred(void) {
    static const struct {
        const char *file, *arch;
        int scale;
    } cases[] = {
        {"tests/fixtures/upscale/animevideov3.pth", "srvggnet-compact", 4},
        {"tests/fixtures/upscale/general-x4v3.pth", "srvggnet-compact", 4},
        {"tests/fixtures/upscale/x4plus.pth", "rrdbnet", 4},
        {"tests/fixtures/upscale/x2plus.pth", "rrdbnet", 2},
        {"tests/fixtures/upscale/arch/rrdb-old-x4.pth", "rrdbnet", 4},
        {"tests/fixtures/upscale/arch/rrdb-old-x1.pth", "rrdbnet", 1},
        {"tests/fixtures/upscale/arch/rrdb-old-x8.safetensors", "rrdbnet", 8},
        {"tests/fixtures/upscale/arch/rrdb-bsrgan-x4.pth", "rrdbnet", 4},
        {"tests/fixtures/upscale/arch/rrdb-new-x1.pth", "rrdbnet", 1},
        {"tests/fixtures/upscale/arch/compact-x1.pth", "srvggnet-compact", 1},
        {"tests/fixtures/upscale/arch/span-x4.safetensors", "span", 4},
        {"tests/fixtures/upscale/arch/span-x2.pth", "span", 2},
        {"tests/fixtures/upscale/arch/realplksr-x4.safetensors", "realplksr", 4},
        {"tests/fixtures/upscale/arch/realplksr-x2.pth", "realplksr", 2},
        {"tests/fixtures/upscale/arch/realplksr-dys-x4.safetensors", "realplksr", 4},
        {"tests/fixtures/upscale/arch/realplksr-dys-x3.pth", "realplksr", 3},
        {"tests/fixtures/upscale/arch/realplksr-dys-x1.pth", "realplksr", 1},
        {"models/esrgan-slim-x3.safetensors", "rdn", 3},
        {"models/esrgan-medium-x8.safetensors", "rdn", 8},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ag_model *model = NULL;
        if (open_model(cases[i].file, &model))
            return 1;
        const ag_model_info *info = ag_model_get_info(model);
        int ok = !strcmp(info->architecture, cases[i].arch) && info->scale == cases[i].scale;
        if (!ok)
            fprintf(stderr, "  %s: %s x%d\n", cases[i].file, info->architecture, info->scale);
        ag_model_destroy(model);
        CHECK(ok);
    }
    return 0;
}

static int refuses_other_networks(void) {
    ag_model *model = NULL;
    ag_error err = {0};
    CHECK(ag_upscaler_load(AG_SOURCE_DIR "/models/hayao.safetensors", 0, &model, &err) == AG_E_ARG);
    CHECK(!model && strstr(err.message, "not an upscaler"));
    CHECK(ag_upscaler_load(AG_SOURCE_DIR "/tests/fixtures/random_zip.pt", 0, &model, &err) ==
          AG_E_ARG);
    CHECK(ag_upscaler_load("esrgan-slim", -1, &model, &err) == AG_E_ARG);
    CHECK(ag_upscaler_load("esrgan-slim", 17, &model, &err) == AG_E_ARG);
    return 0;
}

static int family_scales(void) {
    static const int want[][2] = {{0, 4}, {2, 2}, {3, 3}, {5, 8}, {8, 8}, {16, 8}};
    setenv("ANIMEGAN_MODEL_PATH", AG_SOURCE_DIR "/models", 1);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        ag_model *model = NULL;
        ag_error err = {0};
        CHECK_OK(ag_upscaler_load("esrgan-slim", want[i][0], &model, &err), &err);
        int scale = ag_model_get_info(model)->scale;
        ag_model_destroy(model);
        CHECK_MSG(scale == want[i][1], "--scale %d picked x%d", want[i][0], scale);
    }
    return 0;
}

/* The same weights as .pth and as .safetensors give the same output, bit for bit. */
static int safetensors_equals_pth(void) {
    static const char *const files[] = {"tests/fixtures/upscale/arch/rrdb-new-x4.pth",
                                        "tests/fixtures/upscale/arch/rrdb-new-x4.safetensors"};
    const int w = 13, h = 11, n = w * h * 3;
    float in[13 * 11 * 3], *out[2] = {NULL, NULL};
    for (int i = 0; i < n; i++)
        in[i] = (float)((i * 37) % 101) / 100.0f;
    for (int f = 0; f < 2; f++) {
        ag_model *model = NULL;
        ag_engine *engine = NULL;
        ag_error err = {0};
        if (open_model(files[f], &model))
            return 1;
        ag_engine_options o = {.precision = AG_PRECISION_FP32, .threads = 2};
        CHECK_OK(ag_engine_create(model, &o, &engine, &err), &err);
        out[f] = ag_malloc((size_t)n * 16 * sizeof(float));
        float *outs[1] = {out[f]};
        CHECK_OK(ag_engine_run_raw(engine, in, w, h, outs, &err), &err);
        ag_engine_destroy(engine);
        ag_model_destroy(model);
    }
    int same = !memcmp(out[0], out[1], (size_t)n * 16 * sizeof(float));
    printf("  rrdb-new-x4 .pth and .safetensors: %s\n", same ? "identical" : "different");
    ag_free(out[0]);
    ag_free(out[1]);
    CHECK(same);
    return 0;
}

/* `set` as a .safetensors file in memory (ag_malloc'ed), tensor `bad` one output channel
 * wider (zeros), everything else as loaded (fp32). */
static uint8_t *safetensors_with_wider(const ag_tensor_set *set, const char *bad, size_t *size) {
    size_t header_cap = 64 + (size_t)set->count * 200, data_bytes = 0;
    char *header = ag_malloc(header_cap);
    size_t len = (size_t)snprintf(header, header_cap, "{");
    for (int i = 0; i < set->count; i++) {
        const ag_tensor_ref *t = &set->tensors[i];
        int64_t d0 = t->shape[0] + !strcmp(t->name, bad);
        size_t bytes = t->nbytes / (size_t)t->shape[0] * (size_t)d0;
        len += (size_t)snprintf(header + len, header_cap - len,
                                "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld", i ? "," : "",
                                t->name, (long long)d0);
        for (int d = 1; d < t->ndim; d++)
            len +=
                (size_t)snprintf(header + len, header_cap - len, ",%lld", (long long)t->shape[d]);
        len += (size_t)snprintf(header + len, header_cap - len, "],\"data_offsets\":[%zu,%zu]}",
                                data_bytes, data_bytes + bytes);
        data_bytes += bytes;
    }
    len += (size_t)snprintf(header + len, header_cap - len, "}");
    uint8_t *file = ag_calloc(8 + len + data_bytes, 1);
    for (int b = 0; b < 8; b++)
        file[b] = (uint8_t)((uint64_t)len >> (8 * b));
    memcpy(file + 8, header, len);
    uint8_t *data = file + 8 + len;
    for (int i = 0; i < set->count; i++) {
        const ag_tensor_ref *t = &set->tensors[i];
        memcpy(data, t->data, t->nbytes);
        data += t->nbytes / (size_t)t->shape[0] * (size_t)(t->shape[0] + !strcmp(t->name, bad));
    }
    ag_free(header);
    *size = 8 + len + data_bytes;
    return file;
}

/* Each architecture's .pth fixture and the same tensors written as .safetensors (in memory)
 * give the same output (fp32, 16x12 input), bit for bit. */
static int safetensors_equals_pth_each_arch(void) {
    static const char *const files[] = {"arch/rrdb-old-x4.pth",     "arch/rrdb-bsrgan-x4.pth",
                                        "arch/rrdb-new-x1.pth",     "arch/compact-x1.pth",
                                        "arch/span-x2.pth",         "arch/realplksr-x2.pth",
                                        "arch/realplksr-dys-x3.pth"};
    const int w = 16, h = 12, n = w * h * 3; /* sides the unshuffle by 4 divides */
    float in[16 * 12 * 3];
    for (int i = 0; i < n; i++)
        in[i] = (float)((i * 37) % 101) / 100.0f;
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        char path[512];
        snprintf(path, sizeof path, "%s/tests/fixtures/upscale/%s", AG_SOURCE_DIR, files[f]);
        uint8_t *data, *st;
        size_t size, st_size;
        ag_error err = {0};
        ag_tensor_set set = {0};
        CHECK_OK(ag_read_file(path, 64u << 20, &data, &size, &err), &err);
        CHECK_OK(ag_pytorch_parse(data, size, path, &set, &err), &err);
        st = safetensors_with_wider(&set, "", &st_size); /* no tensor widened */
        ag_model *models[2] = {NULL, NULL};
        CHECK_OK(ag_model_load(path, &models[0], &err), &err);
        CHECK_OK(ag_model_load_memory(st, st_size, "same.safetensors", &models[1], &err), &err);
        float *out[2];
        for (int m = 0; m < 2; m++) {
            ag_engine *engine = NULL;
            ag_engine_options o = {.precision = AG_PRECISION_FP32, .threads = 2};
            CHECK_OK(ag_engine_create(models[m], &o, &engine, &err), &err);
            out[m] = ag_malloc((size_t)n * 64 * sizeof(float)); /* up to x8 */
            float *outs[1] = {out[m]};
            CHECK_OK(ag_engine_run_raw(engine, in, w, h, outs, &err), &err);
            ag_engine_destroy(engine);
        }
        int scale = ag_model_get_info(models[0])->scale;
        int same = !memcmp(out[0], out[1], (size_t)n * scale * scale * sizeof(float));
        double worst = 0;
        for (int i = 0; i < n * scale * scale; i++)
            worst = fmax(worst, fabs((double)out[0][i] - (double)out[1][i]));
        printf("  %s and its tensors as .safetensors: %s (max difference %.3g)\n", files[f],
               same ? "identical" : "not bit for bit", worst);
        for (int m = 0; m < 2; m++)
            ag_free(out[m]), ag_model_destroy(models[m]);
        ag_free(st);
        ag_tensor_set_fini(&set);
        ag_free(data);
        CHECK(same);
    }
    return 0;
}

/* A file of each architecture and layout with one tensor one channel wider is refused in
 * one line naming that tensor's layer. */
static int wrong_shape_refused(void) {
    static const struct {
        const char *file, *tensor, *layer;
    } cases[] = {
        {"arch/rrdb-old-x4.pth", "model.1.sub.0.RDB2.conv3.0.weight", "model.1.sub.0.RDB2.conv3.0"},
        {"arch/rrdb-bsrgan-x4.pth", "upconv1.weight", "upconv1"},
        {"arch/rrdb-new-x1.pth", "body.0.rdb1.conv2.weight", "body.0.rdb1.conv2"},
        {"arch/compact-x2.safetensors", "body.4.weight", "body.4"},
        {"arch/span-x4.safetensors", "block_3.c2_r.conv.1.weight", "block_3.c2_r.conv.1"},
        {"arch/span-x2.pth", "upsampler.0.weight", "upsampler.0"},
        {"arch/realplksr-x4.safetensors", "feats.2.lk.conv.weight", "feats.2.lk.conv"},
        {"arch/realplksr-x2.pth", "feats.1.channel_mixer.2.weight", "feats.1.channel_mixer.2"},
        {"arch/realplksr-dys-x4.safetensors", "to_img.scope.weight", "to_img.scope"},
        {"arch/realplksr-dys-x4.safetensors", "to_img.end_conv.weight", "to_img.end_conv"},
        {"arch/realplksr-dys-x3.pth", "to_img.offset.weight", "to_img.offset"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/tests/fixtures/upscale/%s", AG_SOURCE_DIR, cases[i].file);
        uint8_t *data;
        size_t size, bad_size;
        ag_error err = {0};
        ag_tensor_set set = {0};
        CHECK_OK(ag_read_file(path, 64u << 20, &data, &size, &err), &err);
        int st = strstr(path, ".safetensors") != NULL;
        CHECK_OK(st ? ag_safetensors_parse(data, size, path, &set, &err)
                    : ag_pytorch_parse(data, size, path, &set, &err),
                 &err);
        CHECK(ag_tensor_set_find(&set, cases[i].tensor));
        uint8_t *bad = safetensors_with_wider(&set, cases[i].tensor, &bad_size);
        ag_model *model = NULL;
        int rc = ag_model_load_memory(bad, bad_size, "bad.safetensors", &model, &err);
        printf("  %s, %s wider: %s\n", cases[i].file, cases[i].tensor, err.message);
        CHECK(rc != AG_OK && !model);
        CHECK(strstr(err.message, cases[i].layer) && !strchr(err.message, '\n'));
        ag_free(bad);
        ag_tensor_set_fini(&set);
        ag_free(data);
    }
    return 0;
}

/* DySample's init_pos is checked against the sub-pixel centres the op computes: one value
 * moved is refused in one line naming it. */
static int dysample_init_pos_checked(void) {
    uint8_t *data;
    size_t size, st_size;
    ag_error err = {0};
    ag_tensor_set set = {0};
    CHECK_OK(ag_read_file(AG_SOURCE_DIR "/tests/fixtures/upscale/arch/realplksr-dys-x3.pth",
                          64u << 20, &data, &size, &err),
             &err);
    CHECK_OK(ag_pytorch_parse(data, size, "dys.pth", &set, &err), &err);
    uint8_t *st = safetensors_with_wider(&set, "", &st_size);
    size_t at = 8, header = 0;
    for (int b = 0; b < 8; b++)
        header |= (size_t)st[b] << (8 * b);
    at += header;
    int i = 0;
    for (; i < set.count && strcmp(set.tensors[i].name, "to_img.init_pos"); i++)
        at += set.tensors[i].nbytes;
    CHECK(i < set.count);
    float v;
    memcpy(&v, st + at + 4, 4); /* the second x offset: (1 - 1) / 3 = 0 */
    v += 0.25f;
    memcpy(st + at + 4, &v, 4);
    ag_model *model = NULL;
    int rc = ag_model_load_memory(st, st_size, "bad.safetensors", &model, &err);
    printf("  init_pos[1] moved: %s\n", err.message);
    CHECK(rc != AG_OK && !model && strstr(err.message, "to_img.init_pos[1]") &&
          !strchr(err.message, '\n'));
    ag_free(st);
    ag_tensor_set_fini(&set);
    ag_free(data);
    return 0;
}

/* ---- tiling ------------------------------------------------------------------------------ */

/* A deterministic test photo crop of w x h, bands 3 or 4. */
static int photo(int w, int h, int bands, ag_image *img) {
    ag_error err = {0};
    ag_decode_options d = {0};
    ag_image full = {0};
    CHECK_OK(ag_image_decode_file(AG_SOURCE_DIR "/tests/data/astronaut.png", &d, &full, &err),
             &err);
    img->width = w, img->height = h, img->bands = bands;
    img->pixels = ag_malloc((size_t)w * h * bands);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < bands; c++)
                img->pixels[((size_t)y * w + x) * bands + c] =
                    c < 3 ? full.pixels[((size_t)(y + 100) * full.width + x + 150) * full.bands + c]
                          : (uint8_t)(x * 7 + y * 3);
    ag_image_fini(&full);
    return 0;
}

static int max_diff(const ag_image *a, const ag_image *b) {
    int m = 0;
    size_t n = (size_t)a->width * a->height * a->bands;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)a->pixels[i] - (int)b->pixels[i]);
        m = d > m ? d : m;
    }
    return m;
}

/* Tiled (tile sides that cut the image unevenly, at odd sizes) = untiled within 1 level. */
static int tiled_equals_untiled_case(const char *file, int w, int h, const int *tiles,
                                     int tile_count) {
    ag_model *model = NULL;
    ag_engine *engine = NULL;
    ag_error err = {0};
    if (open_model(file, &model))
        return 1;
    ag_engine_options o = {.precision = AG_PRECISION_FP32, .threads = 2};
    CHECK_OK(ag_engine_create(model, &o, &engine, &err), &err);
    ag_image in = {0}, whole = {0};
    if (photo(w, h, 3, &in))
        return 1;
    ag_upscale_options u;
    ag_upscale_options_init(&u);
    u.tile_px = 4096;
    CHECK_OK(ag_upscale(engine, &in, &u, &whole, &err), &err);
    int worst = 0;
    for (int t = 0; t < tile_count; t++) {
        ag_upscale_plan p;
        ag_image tiled = {0};
        u.tile_px = tiles[t];
        CHECK_OK(ag_upscale_plan_for(engine, w, h, &u, &p, &err), &err);
        CHECK(p.tiles_x * p.tiles_y > 1);
        CHECK_OK(ag_upscale(engine, &in, &u, &tiled, &err), &err);
        CHECK(tiled.width == whole.width && tiled.height == whole.height);
        int d = max_diff(&tiled, &whole);
        printf("  %s %dx%d, tile %d + pad %d: %dx%d tiles, max difference %d\n", file, w, h,
               p.tile_px, p.pad_px, p.tiles_x, p.tiles_y, d);
        worst = d > worst ? d : worst;
        ag_image_fini(&tiled);
    }
    ag_image_fini(&in);
    ag_image_fini(&whole);
    ag_engine_destroy(engine);
    ag_model_destroy(model);
    CHECK(worst <= 1);
    return 0;
}

static int tiled_equals_untiled(void) {
    static const int tiles[] = {16, 24, 20};
    return tiled_equals_untiled_case("models/esrgan-slim-x2.safetensors", 61, 47, tiles, 3) ||
           tiled_equals_untiled_case("tests/fixtures/upscale/animevideov3.pth", 91, 67, tiles, 2) ||
           tiled_equals_untiled_case("tests/fixtures/upscale/x2plus.pth", 101, 87, tiles, 2) ||
           tiled_equals_untiled_case("tests/fixtures/upscale/arch/rrdb-old-x4.pth", 101, 87, tiles,
                                     1) ||
           tiled_equals_untiled_case("tests/fixtures/upscale/arch/rrdb-new-x1.pth", 101, 87, tiles,
                                     1) ||
           tiled_equals_untiled_case("tests/fixtures/upscale/arch/compact-x1.pth", 61, 47, tiles,
                                     1) ||
           tiled_equals_untiled_case("tests/fixtures/upscale/arch/span-x4.safetensors", 101, 87,
                                     tiles, 1) ||
           tiled_equals_untiled_case("tests/fixtures/upscale/arch/realplksr-dys-x4.safetensors",
                                     101, 87, tiles, 1) ||
           tiled_equals_untiled_case("tests/fixtures/upscale/arch/realplksr-dys-x1.pth", 61, 47,
                                     tiles, 1);
}

/* RealPLKSR's GroupNorm takes its statistics over the whole map, so a tile's window sees
 * other ones than the image: by default the window is the whole image whenever the budget
 * allows (then tiled = untiled trivially); forced tiles stay close, at a stated PSNR. */
static int tiled_group_norm_psnr(void) {
    ag_model *model = NULL;
    ag_engine *engine = NULL;
    ag_error err = {0};
    if (open_model("tests/fixtures/upscale/arch/realplksr-x2.pth", &model))
        return 1;
    ag_engine_options o = {.precision = AG_PRECISION_FP32, .threads = 2};
    CHECK_OK(ag_engine_create(model, &o, &engine, &err), &err);
    ag_image in = {0}, whole = {0}, tiled = {0};
    if (photo(101, 87, 3, &in))
        return 1;
    ag_upscale_options u;
    ag_upscale_options_init(&u);
    ag_upscale_plan p;
    CHECK_OK(ag_upscale_plan_for(engine, 101, 87, &u, &p, &err), &err);
    CHECK(p.tiles_x * p.tiles_y == 1);
    CHECK_OK(ag_upscale(engine, &in, &u, &whole, &err), &err);
    u.tile_px = 48;
    CHECK_OK(ag_upscale(engine, &in, &u, &tiled, &err), &err);
    double se = 0;
    size_t n = (size_t)whole.width * whole.height * 3;
    for (size_t i = 0; i < n; i++) {
        double d = (double)whole.pixels[i] - (double)tiled.pixels[i];
        se += d * d;
    }
    double psnr = se > 0 ? 10 * log10(255.0 * 255.0 * (double)n / se) : 99;
    printf("  realplksr-x2 101x87: one window by default; tiles of 48: PSNR %.1f dB, max "
           "difference %d\n",
           psnr, max_diff(&whole, &tiled));
    ag_image_fini(&in);
    ag_image_fini(&whole);
    ag_image_fini(&tiled);
    ag_engine_destroy(engine);
    ag_model_destroy(model);
    CHECK(psnr >= 35);
    return 0;
}

/* Alpha enlarged separately, a requested scale other than the network's, tiny inputs. */
static int alpha_scale_and_small(void) {
    ag_model *model = NULL;
    ag_engine *engine = NULL;
    ag_error err = {0};
    if (open_model("models/esrgan-slim-x2.safetensors", &model))
        return 1;
    CHECK_OK(ag_engine_create(model, NULL, &engine, &err), &err);
    ag_image in = {0}, out = {0};
    if (photo(21, 13, 4, &in))
        return 1;
    ag_upscale_options u;
    ag_upscale_options_init(&u);
    CHECK_OK(ag_upscale(engine, &in, &u, &out, &err), &err);
    CHECK(out.width == 42 && out.height == 26 && out.bands == 4);
    CHECK(abs((int)out.pixels[(13 * 42 + 20) * 4 + 3] - (int)in.pixels[(6 * 21 + 10) * 4 + 3]) <=
          8);
    ag_image_fini(&out);
    u.scale = 3;
    CHECK_OK(ag_upscale(engine, &in, &u, &out, &err), &err);
    CHECK(out.width == 63 && out.height == 39 && out.bands == 4);
    ag_image_fini(&out);
    ag_image_fini(&in);
    if (photo(3, 2, 3, &in))
        return 1;
    u.scale = 0;
    CHECK_OK(ag_upscale(engine, &in, &u, &out, &err), &err);
    CHECK(out.width == 6 && out.height == 4);
    ag_image_fini(&out);
    ag_image_fini(&in);
    ag_engine_destroy(engine);
    ag_model_destroy(model);
    return 0;
}

/* The window's bytes are what the budget allows, and a budget too small is refused. */
static int budget_bounds_the_tile(void) {
    ag_model *model = NULL;
    ag_engine *engine = NULL;
    ag_error err = {0};
    if (open_model("models/esrgan-medium-x2.safetensors", &model))
        return 1;
    CHECK_OK(ag_engine_create(model, NULL, &engine, &err), &err);
    ag_upscale_options u;
    ag_upscale_options_init(&u);
    ag_upscale_plan p;
    size_t budgets[] = {(size_t)64 << 20, (size_t)256 << 20};
    for (int i = 0; i < 2; i++) {
        u.max_bytes = budgets[i];
        CHECK_OK(ag_upscale_plan_for(engine, 4000, 3000, &u, &p, &err), &err);
        printf("  esrgan-medium-x2 4000x3000, budget %zu MB: tile %d + pad %d, window %d MB\n",
               budgets[i] >> 20, p.tile_px, p.pad_px, (int)(p.bytes >> 20));
        CHECK(p.bytes <= budgets[i] && p.bytes > budgets[i] / 2);
    }
    /* the budget's tiles evened out: no tile runs mostly over the margin beyond the image
     * (a 1024 px side in two 760 px tiles computed 496 px of nothing on each axis) */
    int sizes[][2] = {{1000, 700}, {1024, 1024}, {333, 901}, {4000, 3000}, {150, 90}};
    for (int i = 0; i < 10; i++) {
        u.max_bytes = budgets[i / 5];
        CHECK_OK(ag_upscale_plan_for(engine, sizes[i % 5][0], sizes[i % 5][1], &u, &p, &err), &err);
        int slack_x = p.tiles_x * p.tile_px - p.padded_w,
            slack_y = p.tiles_y * p.tile_px - p.padded_h;
        slack_x = slack_x < 0 || p.tiles_x == 1 ? 0 : slack_x / p.tiles_x;
        slack_y = slack_y < 0 || p.tiles_y == 1 ? 0 : slack_y / p.tiles_y;
        printf("  %dx%d, %zu MB: %d x %d tiles of %d, %d and %d px per tile beyond the image\n",
               sizes[i % 5][0], sizes[i % 5][1], u.max_bytes >> 20, p.tiles_x, p.tiles_y, p.tile_px,
               slack_x, slack_y);
        CHECK(p.bytes <= u.max_bytes);
        CHECK((slack_x < slack_y ? slack_x : slack_y) <= 1);
    }
    u.max_bytes = (size_t)256 << 10; /* under the smallest tile's window */
    CHECK(ag_upscale_plan_for(engine, 4000, 3000, &u, &p, &err) == AG_E_LIMIT);
    u.max_bytes = 1; /* under the arena's fixed part: refused too, not a wrapped-around side */
    CHECK(ag_upscale_plan_for(engine, 4000, 3000, &u, &p, &err) == AG_E_LIMIT);
    ag_engine_destroy(engine);
    ag_model_destroy(model);
    return 0;
}

/* int8 against fp32 on a photo: at least 38 dB (measured 49-54 on the bundled models). */
static int int8_psnr(void) {
    static const char *const files[] = {"models/esrgan-slim-x2.safetensors",
                                        "tests/fixtures/upscale/animevideov3.pth",
                                        "tests/fixtures/upscale/arch/span-x4.safetensors",
                                        "tests/fixtures/upscale/arch/realplksr-x4.safetensors",
                                        "tests/fixtures/upscale/arch/realplksr-dys-x4.safetensors",
                                        "tests/fixtures/upscale/arch/rrdb-new-x2.safetensors"};
    ag_image in = {0};
    if (photo(48, 40, 3, &in))
        return 1;
    for (int f = 0; f < (int)(sizeof files / sizeof files[0]); f++) {
        ag_model *model = NULL;
        ag_engine *e32 = NULL, *e8 = NULL;
        ag_error err = {0};
        if (open_model(files[f], &model))
            return 1;
        ag_engine_options o = {.precision = AG_PRECISION_FP32, .threads = 2};
        CHECK_OK(ag_engine_create(model, &o, &e32, &err), &err);
        o.precision = AG_PRECISION_INT8;
        CHECK_OK(ag_engine_create(model, &o, &e8, &err), &err);
        ag_image a = {0}, b = {0};
        CHECK_OK(ag_upscale(e32, &in, NULL, &a, &err), &err);
        CHECK_OK(ag_upscale(e8, &in, NULL, &b, &err), &err);
        double se = 0;
        size_t n = (size_t)a.width * a.height * 3;
        for (size_t i = 0; i < n; i++) {
            double d = (double)a.pixels[i] - (double)b.pixels[i];
            se += d * d;
        }
        double psnr = se > 0 ? 10 * log10(255.0 * 255.0 * (double)n / se) : 99;
        printf("  %s int8 vs fp32: PSNR %.1f dB\n", files[f], psnr);
        ag_image_fini(&a);
        ag_image_fini(&b);
        ag_engine_destroy(e8);
        ag_engine_destroy(e32);
        ag_model_destroy(model);
        CHECK(psnr >= 38);
    }
    ag_image_fini(&in);
    return 0;
}

/* The float output of `file` on a w x h photo crop (pixel units), fp32 on `backend`; *wino:
 * how many of its convs ran on oneDNN's Winograd kernel. */
static float *float_upscale(const char *file, ag_backend backend, int w, int h, int *wino,
                            size_t *count) {
    ag_model *model = NULL;
    ag_engine *engine = NULL;
    ag_error err = {0};
    ag_image img = {0};
    if (open_model(file, &model) || photo(w, h, 3, &img))
        return NULL;
    const ag_model_info *info = ag_model_get_info(model);
    ag_engine_options o = {.backend = backend, .precision = AG_PRECISION_FP32, .threads = 2};
    *count = (size_t)w * h * 3 * info->scale * info->scale;
    float *in = ag_malloc(sizeof(float) * (size_t)w * h * 3),
          *out = ag_malloc(sizeof(float) * *count);
    for (size_t i = 0; i < (size_t)w * h * 3; i++)
        in[i] = img.pixels[i] * info->pixel_max / 255.0f;
    float *outs[1] = {out};
    int rc = ag_engine_create(model, &o, &engine, &err);
    if (rc == AG_OK)
        rc = ag_engine_run_raw(engine, in, w, h, outs, &err);
    if (rc != AG_OK)
        fprintf(stderr, "  %s: %s\n", file, err.message);
    *wino = 0;
    for (int gi = 0; rc == AG_OK && backend == AG_BACKEND_ONEDNN && gi < engine->group_count;
         gi++) {
        const ag_group_exec *x = &engine->exec[gi];
        size_t bytes;
        *wino += x->kind && x->kernel && !strcmp(x->kind->name, "conv") &&
                 ag_dnnl_conv_wino_layout(x->kernel, &bytes) != NULL;
    }
    for (size_t i = 0; i < *count; i++)
        out[i] /= info->pixel_max;
    ag_engine_destroy(engine);
    ag_model_destroy(model);
    ag_image_fini(&img);
    ag_free(in);
    if (rc != AG_OK)
        ag_free(out);
    return rc == AG_OK ? out : NULL;
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - (double)b[i]));
    return m;
}

/*
 * An upscaler's fp32 3x3 convs on oneDNN's Winograd (kind_conv.c, onednn.c: output from 32 px
 * wide, channels in sixteens, AVX-512): esrgan-medium x2 (64 features: banded convs reading
 * gathered concats and residual chains) on a 40x32 crop against the reference backend and
 * against the direct conv (AG_WINOGRAD=0), within FP32_TOLERANCE of the [0, 1] range; where
 * the CPU has AVX-512 some convs must have run on it.
 */
static int winograd_convs(void) {
    const char *file = "models/esrgan-medium-x2.safetensors";
    const ag_cpu_info *cpu = ag_cpu_get_info();
    int avx512 = (cpu->flags & cpu->onednn_flags & AG_CPU_AVX512F) != 0, wino, direct_wino, none;
    size_t n;
    float *ref = float_upscale(file, AG_BACKEND_REFERENCE, 40, 32, &none, &n);
    float *fast = float_upscale(file, AG_BACKEND_ONEDNN, 40, 32, &wino, &n);
    setenv("AG_WINOGRAD", "0", 1);
    float *direct = float_upscale(file, AG_BACKEND_ONEDNN, 40, 32, &direct_wino, &n);
    unsetenv("AG_WINOGRAD");
    CHECK(ref && fast && direct);
    double vs_ref = max_abs_diff(fast, ref, n), vs_direct = max_abs_diff(fast, direct, n);
    printf("  %s 40x32: %d Winograd steps (%d with AG_WINOGRAD=0); max float error %.2e against "
           "the reference, %.2e against the direct convs (of 1)\n",
           file, wino, direct_wino, vs_ref, vs_direct);
    ag_free(ref), ag_free(fast), ag_free(direct);
    CHECK(direct_wino == 0 && (wino > 0 || !avx512));
    CHECK(vs_ref <= FP32_TOLERANCE && vs_direct <= FP32_TOLERANCE);
    return 0;
}

/*
 * An upsampler's nearest 2x read by one conv (RRDBNet's conv_up1/2, the bundled RDNs') is
 * absorbed into that conv's band, fp32 and int8: no group runs it, so no map of the
 * upsampled size is planned (RRDBNet x4 int8 at 256 px: arena 326 -> 102 MB). The fixtures
 * check the output.
 */
static int nearest_upsamples_absorbed(void) {
    const struct {
        const char *file;
        int nearest; /* upsamplers in the network */
    } cases[] = {{"tests/fixtures/upscale/arch/rrdb-old-x4.pth", 2},
                 {"models/esrgan-medium-x4.safetensors", 1}};
    ag_precision precisions[] = {AG_PRECISION_FP32, AG_PRECISION_INT8};
    for (int f = 0; f < 2; f++)
        for (int p = 0; p < 2; p++) {
            ag_model *model = NULL;
            ag_engine *e = NULL;
            ag_error err = {0};
            if (open_model(cases[f].file, &model))
                return 1;
            ag_engine_options o = {.precision = precisions[p], .threads = 2};
            CHECK_OK(ag_engine_create(model, &o, &e, &err), &err);
            CHECK_OK(ag_engine_prepare(e, 64, 64, &err), &err);
            const ag_graph *g = &model->graph;
            int run = 0, absorbed = 0;
            for (int gi = 0; gi < e->group_count; gi++) {
                const ag_group *gr = &e->groups[gi];
                run += g->nodes[gr->head].op == AG_OP_NEAREST;
                absorbed += gr->resize >= 0 && g->nodes[gr->resize].op == AG_OP_NEAREST;
            }
            printf("  %s %s: %d nearest steps run, %d absorbed into a conv's band\n", cases[f].file,
                   p ? "int8" : "fp32", run, absorbed);
            ag_engine_destroy(e);
            ag_model_destroy(model);
            CHECK(run == 0 && absorbed == cases[f].nearest);
        }
    return 0;
}

/*
 * The attention gates a conv chain applies in its residual add's place (SPAN's (z + r)
 * (sigmoid(z) - 1/2), RealPLKSR's r sigmoid(z)), through norm_act_pad with 35 channels (two
 * vectors and a scalar tail): every ISA variant the same bits, within 1e-6 relative (+ 1e-7)
 * of the double formula over z in [-100, 100]. The fixtures check them inside the networks.
 */
static int attention_gates_across_isas(void) {
    enum { H = 5, W = 23, C = 35, N = H * W * C };
    float *x = ag_malloc(N * 4), *r = ag_malloc(N * 4), *base = ag_malloc(N * 4),
          *out = ag_malloc(N * 4);
    float scale[C], shift[C];
    for (int i = 0; i < N; i++)
        x[i] = -100.0f + 200.0f * (float)i / (float)(N - 1), r[i] = (float)(i % 97) / 8 - 6;
    for (int c = 0; c < C; c++)
        scale[c] = 1.0f - 0.01f * (float)c, shift[c] = 0.05f * (float)c;
    ag_pad none = {0, 0, 0, 0};
    int failed = 0;
    for (ag_gate gate = AG_GATE_SPAN_ATTENTION; gate <= AG_GATE_SCALE_RESIDUAL; gate++) {
        ag_norm_affine a = {scale, shift, NULL, gate};
        int variants = 0;
        for (int isa = AG_ISA_GENERIC; isa <= AG_ISA_AVX512; isa++) {
            const ag_fused_ops *ops = ag_fused_ops_for((ag_isa)isa);
            if (!ops)
                continue;
            ops->norm_act_pad(variants ? out : base, x, r, 0, a, 1.0f, 1.0f, H, W, C, none, 2);
            if (variants++ && memcmp(out, base, N * 4)) {
                printf("  %s differs from generic\n", ops->isa);
                failed = 1;
            }
        }
        double worst = 0.0;
        for (int i = 0; i < N; i++) {
            double z = (double)(x[i] * scale[i % C] + shift[i % C]), s = 1 / (1 + exp(-z));
            double ri = (double)r[i], got = (double)base[i];
            double want = gate == AG_GATE_SPAN_ATTENTION ? (z + ri) * (s - 0.5) : ri * s;
            double e = isnan(got) ? 1e30 : fabs(got - want) / (1e-6 * fabs(want) + 1e-7);
            worst = e > worst ? e : worst;
        }
        printf("  %s: %d variants, worst error %.2f of the bound\n",
               gate == AG_GATE_SPAN_ATTENTION ? "span attention" : "scaled residual", variants,
               worst);
        failed |= worst > 1.0;
    }
    ag_free(x), ag_free(r), ag_free(base), ag_free(out);
    return failed;
}

/*
 * The int8 engines' whole-map gates (ag_fused_gate_map, kind_gate.c) over 4103 values (two
 * blocks of vectors and a scalar tail): Mish of x, SiLU (g = x), SPAN's attention (shift 1/2,
 * with its residual added first as int8 engines run it, and without) and RealPLKSR's (shift
 * 0): every ISA variant the same bits, within 1e-6 relative + 1e-7 (|x + r| + 1) of the
 * double formula over x in [-100, 100] (sigmoid(g) - 1/2 cancels in float near g = 0, as it
 * does in PyTorch's fp32).
 */
static int gate_map_across_isas(void) {
    enum { N = 4096 + 7 };
    float *x = ag_malloc(N * 4), *g = ag_malloc(N * 4), *r = ag_malloc(N * 4),
          *base = ag_malloc(N * 4), *out = ag_malloc(N * 4);
    for (int i = 0; i < N; i++) {
        x[i] = -100.0f + 200.0f * (float)i / (float)(N - 1), g[i] = (float)(i % 97) / 8 - 6;
        r[i] = (float)(i % 89) / 4 - 11;
    }
    static const struct {
        const char *name;
        int mish, silu, residual;
        float shift;
    } cases[] = {{"mish", 1, 0, 0, 0.0f},
                 {"silu", 0, 1, 0, 0.0f},
                 {"attention 1/2", 0, 0, 0, 0.5f},
                 {"SPAN's attention (x + r) (sigmoid(x) - 1/2)", 0, 1, 1, 0.5f},
                 {"attention 0", 0, 0, 0, 0.0f}};
    int failed = 0;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const float *gk = cases[k].mish ? NULL : cases[k].silu ? x : g;
        const float *rk = cases[k].residual ? r : NULL;
        int variants = 0;
        for (int isa = AG_ISA_GENERIC; isa <= AG_ISA_AVX512; isa++) {
            const ag_fused_ops *ops = ag_fused_ops_for((ag_isa)isa);
            if (!ops)
                continue;
            ops->gate_map(variants ? out : base, x, rk, gk, cases[k].shift, N, 2);
            if (variants++ && memcmp(out, base, N * 4)) {
                printf("  %s: %s differs from generic\n", cases[k].name, ops->isa);
                failed = 1;
            }
        }
        double worst = 0.0;
        for (int i = 0; i < N; i++) {
            double v = (double)x[i] + (rk ? (double)rk[i] : 0.0), want;
            if (cases[k].mish)
                want = v * tanh(log1p(exp(v < 20 ? v : 20)));
            else
                want = v * (1 / (1 + exp(-(double)gk[i])) - (double)cases[k].shift);
            double got = (double)base[i], bound = 1e-6 * fabs(want) + 1e-7 * (fabs(v) + 1);
            double e = isnan(got) ? 1e30 : fabs(got - want) / bound;
            worst = e > worst ? e : worst;
        }
        printf("  %s: %d variants, worst error %.2f of the bound\n", cases[k].name, variants,
               worst);
        failed |= worst > 1.0;
    }
    ag_free(x), ag_free(g), ag_free(r), ag_free(base), ag_free(out);
    return failed;
}

int main(int argc, char **argv) {
    ag_error err = {0};
    if (ag_image_startup(argv[0], &err) != 0) {
        fprintf(stderr, "ag_image_startup: %s\n", err.message);
        return 1;
    }
    static const test_case tests[] = {
        TEST(animevideov3),
        TEST(general_x4v3),
        TEST(x4plus),
        TEST(anime_6b),
        TEST(x2plus),
        TEST(esrgan_slim_x2),
        TEST(esrgan_slim_x3),
        TEST(esrgan_medium_x2),
        TEST(esrgan_medium_x4),
        TEST(rrdb_old_x4),
        TEST(rrdb_old_x1),
        TEST(rrdb_old_x2),
        TEST(rrdb_old_x8),
        TEST(rrdb_bsrgan_x4),
        TEST(rrdb_new_x2),
        TEST(rrdb_new_x1),
        TEST(rrdb_new_x4),
        TEST(compact_x1),
        TEST(compact_x2),
        TEST(span_x4),
        TEST(span_x2),
        TEST(realplksr_x4),
        TEST(realplksr_x2),
        TEST(realplksr_ln_x4),
        TEST(realplksr_dys_x4),
        TEST(realplksr_dys_x3),
        TEST(realplksr_dys_x1),
        TEST(inferred),
        TEST(refuses_other_networks),
        TEST(family_scales),
        TEST(safetensors_equals_pth),
        TEST(wrong_shape_refused),
        TEST(safetensors_equals_pth_each_arch),
        TEST(dysample_init_pos_checked),
        TEST(tiled_equals_untiled),
        TEST(tiled_group_norm_psnr),
        TEST(alpha_scale_and_small),
        TEST(budget_bounds_the_tile),
        TEST(int8_psnr),
        TEST(attention_gates_across_isas),
        TEST(gate_map_across_isas),
        TEST(winograd_convs),
        TEST(nearest_upsamples_absorbed),
    };
    int rc = test_run_all(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
    ag_image_shutdown();
    return rc;
}
