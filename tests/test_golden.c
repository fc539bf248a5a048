/*
 * test_golden.c - the whole generator against PyTorch. Fixtures (tests/fixtures/NAME.agfx,
 * written by tools/make_fixtures.py with Debian's PyTorch 1.13) hold an 8-bit input, the
 * reference's [-1, 1] output and its 8-bit image. Both backends must match:
 *   fp32 output: max |ours - torch| <= 1e-3;   8-bit output: at most 1 level apart.
 * Each check prints the error it actually reached.
 */
#include "test.h"

#include "../src/engine_internal.h"

#include <dirent.h>
#include <stdint.h>

#define FP32_TOLERANCE 1e-3f

typedef struct fixture {
    char name[128];
    int width, height;
    char model[65], resize[17];
    float eps;
    uint8_t *input;   /* (H, W, 3) */
    float *output;    /* (H, W, 3) */
    uint8_t *output8; /* (H, W, 3) */
    uint8_t *file;
} fixture;

static uint32_t read_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int fixture_load(fixture *f, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/tests/fixtures/%s", AG_SOURCE_DIR, name);
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    size_t size;
    ag_error err;
    CHECK_OK(ag_read_file(path, 64u << 20, &f->file, &size, &err), &err);
    const uint8_t *p = f->file;
    CHECK_MSG(size >= 100 && !memcmp(p, "AGFX", 4) && read_u32(p + 4) == 1, "%s: bad header", path);
    f->width = (int)read_u32(p + 8), f->height = (int)read_u32(p + 12);
    memcpy(f->model, p + 16, 64), memcpy(f->resize, p + 80, 16);
    memcpy(&f->eps, p + 96, 4);
    size_t n = (size_t)f->width * f->height * 3;
    CHECK_MSG(size == 100 + n * 6, "%s: size %zu, expected %zu", path, size, 100 + n * 6);
    f->input = f->file + 100;
    f->output = ag_malloc(n * sizeof(float)); /* copied: the file offset is unaligned */
    memcpy(f->output, f->file + 100 + n, n * sizeof(float));
    f->output8 = f->file + 100 + 5 * n;
    return 0;
}

static void fixture_fini(fixture *f) {
    ag_free(f->file);
    ag_free(f->output);
}

static int load_model(const char *relative, ag_model **model) {
    char path[512];
    ag_error err;
    snprintf(path, sizeof path, "%s/%s", AG_SOURCE_DIR, relative);
    CHECK_OK(ag_model_load(path, model, &err), &err);
    return 0;
}

/* Run one fixture on one backend: fp32 path and 8-bit path. */
static int check_fixture(const fixture *f, const ag_model *model, ag_backend backend) {
    ag_error err;
    ag_engine_options opt = {.backend = backend,
                             .threads = 2,
                             .resize = (ag_resize_mode)ag_resize_mode_parse(f->resize)};
    CHECK_MSG((int)opt.resize > 0, "%s: resize '%s'", f->name, f->resize);
    CHECK_MSG(fabsf(model->info.norm_eps - f->eps) <= 1e-3f * f->eps, "%s: eps %g vs model %g",
              f->name, (double)f->eps, (double)model->info.norm_eps);
    ag_engine *engine;
    CHECK_OK(ag_engine_create(model, &opt, &engine, &err), &err);
    size_t n = (size_t)f->width * f->height * 3;
    float *in = ag_malloc(n * sizeof(float)), *out = ag_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        in[i] = (float)f->input[i] / 127.5f - 1.0f;
    int rc = ag_engine_run_f32(engine, in, f->width, f->height, out, &err);
    float max_err = 0.0f;
    for (size_t i = 0; rc == AG_OK && i < n; i++) {
        float e = fabsf(out[i] - f->output[i]);
        max_err = e > max_err || isnan(e) ? (isnan(e) ? INFINITY : e) : max_err;
    }
    ag_image img = {f->width, f->height, 3, f->input}, styled = {0};
    if (rc == AG_OK)
        rc = ag_stylize(engine, &img, 0, &styled, &err);
    int max_levels = 0;
    for (size_t i = 0; rc == AG_OK && i < n; i++) {
        int d = abs((int)styled.pixels[i] - (int)f->output8[i]);
        max_levels = d > max_levels ? d : max_levels;
    }
    printf("  %-22s %-9s max abs error %.2e (tolerance %.0e), 8-bit max diff %d\n", f->name,
           backend == AG_BACKEND_REFERENCE ? "reference" : "onednn", (double)max_err,
           (double)FP32_TOLERANCE, max_levels);
    ag_image_fini(&styled);
    ag_free(in), ag_free(out);
    ag_engine_destroy(engine);
    CHECK_MSG(rc == AG_OK, "%s", err.message);
    CHECK(max_err <= FP32_TOLERANCE);
    CHECK(max_levels <= 1);
    return 0;
}

/* Every fixture in tests/fixtures/<subdir> whose name starts with `prefix`, on both
 * backends, with the model the fixture names or, when given, `model_path` (the same
 * network in another file format). */
static int check_fixtures_with(const char *subdir, const char *prefix, const char *model_path,
                               int min_count) {
    char dir_path[512];
    snprintf(dir_path, sizeof dir_path, "%s/tests/fixtures/%s", AG_SOURCE_DIR, subdir);
    DIR *dir = opendir(dir_path);
    CHECK(dir);
    struct dirent *e;
    int count = 0, failed = 0;
    ag_model *model = NULL;
    char loaded[65] = "";
    while ((e = readdir(dir)) != NULL) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, prefix, strlen(prefix)) || len < 5 ||
            strcmp(e->d_name + len - 5, ".agfx"))
            continue;
        fixture f;
        char name[120];
        snprintf(name, sizeof name, "%.8s%s%.100s", subdir, *subdir ? "/" : "", e->d_name);
        failed |= fixture_load(&f, name);
        const char *want = model_path ? model_path : f.model;
        if (strcmp(loaded, want)) {
            ag_model_destroy(model);
            model = NULL;
            failed |= load_model(want, &model);
            snprintf(loaded, sizeof loaded, "%s", want);
        }
        if (model) {
            failed |= check_fixture(&f, model, AG_BACKEND_ONEDNN);
            failed |= check_fixture(&f, model, AG_BACKEND_REFERENCE);
        }
        fixture_fini(&f);
        count++;
    }
    closedir(dir);
    ag_model_destroy(model);
    CHECK_MSG(count >= min_count, "only %d fixtures named %s*", count, prefix);
    CHECK(!failed);
    return 0;
}

static int check_fixtures_in(const char *subdir, const char *prefix, int min_count) {
    return check_fixtures_with(subdir, prefix, NULL, min_count);
}

static int check_fixtures(const char *prefix, int min_count) {
    return check_fixtures_in("", prefix, min_count);
}

/* AnimeGANv3 against the original files' interpreters, ONNX Runtime on the original .onnx,
 * and the hand-written PyTorch generator at sizes the originals cannot run (including
 * 1-pixel maps at H/8 and H/16); see tests/fixtures/README.md. */
static int test_golden_hayao_v3(void) {
    return check_fixtures_in("v3", "hayao-v3_", 4) || check_fixtures_in("v3/1px", "hayao-v3_", 1);
}

static int test_golden_shinkai_v3(void) {
    return check_fixtures_in("v3", "shinkai-v3_", 4) ||
           check_fixtures_in("v3/1px", "shinkai-v3_", 1);
}

static int test_golden_cute_v3(void) {
    return check_fixtures_in("v3", "cute-v3_", 4) || check_fixtures_in("v3/1px", "cute-v3_", 1);
}

/* AnimeGANv3 .onnx files loaded directly: the author's tiny Cute file on the cute-v3
 * fixtures (ONNX Runtime on that very file at 64x64 and 48x32), its weight-perturbed
 * variants against ONNX Runtime on each, and the full-v3 .onnx built from the Shinkai .pb
 * (tools/make_v3_onnx.py) on the shinkai fixtures. build/v3/ is written by
 * tools/make_v3_test_models.sh, which `make test` runs first. */
static int test_golden_onnx_cute(void) {
    const char *file = "tests/fixtures/onnx/AnimeGANv3_tiny_Cute.onnx";
    return check_fixtures_with("v3", "cute-v3_", file, 4) ||
           check_fixtures_with("v3/1px", "cute-v3_", file, 1) ||
           check_fixtures_in("v3", "cute-onnx_", 1);
}

/* Sides under the tiny network's own minimum (16): ag_stylize reflect-pads to it and crops
 * back; the reference pads with numpy and runs PyTorch (tools/make_pad_fixtures.py). Only
 * the 8-bit path takes these sides (the engine itself refuses them). */
static int check_padded(const fixture *f, const ag_model *model, ag_backend backend) {
    ag_error err;
    ag_engine_options opt = {.backend = backend, .threads = 2};
    ag_engine *engine;
    CHECK_OK(ag_engine_create(model, &opt, &engine, &err), &err);
    CHECK(f->width < model->info.min_side || f->height < model->info.min_side);
    ag_image img = {f->width, f->height, 3, f->input}, styled = {0};
    int rc = ag_stylize(engine, &img, 0, &styled, &err);
    int max_levels = rc == AG_OK ? 0 : 256;
    for (size_t i = 0; rc == AG_OK && i < (size_t)f->width * f->height * 3; i++) {
        int d = abs((int)styled.pixels[i] - (int)f->output8[i]);
        max_levels = d > max_levels ? d : max_levels;
    }
    printf("  %-22s %-9s padded to %d: 8-bit max diff %d (tolerance 1)\n", f->name,
           backend == AG_BACKEND_REFERENCE ? "reference" : "onednn", model->info.min_side,
           max_levels);
    int same_size = rc != AG_OK || (styled.width == f->width && styled.height == f->height);
    ag_image_fini(&styled);
    ag_engine_destroy(engine);
    CHECK_MSG(rc == AG_OK, "%s", err.message);
    CHECK(same_size);
    CHECK(max_levels <= 1);
    return 0;
}

static int test_golden_cute_v3_padded(void) {
    const char *names[] = {"v3/pad/cute-v3_8x8.agfx", "v3/pad/cute-v3_13x9.agfx",
                           "v3/pad/cute-v3_40x8.agfx"};
    ag_model *model = NULL;
    CHECK(load_model("models/cute-v3.safetensors", &model) == 0);
    int failed = 0;
    for (int i = 0; i < 3; i++) {
        fixture f;
        if (fixture_load(&f, names[i])) {
            failed = 1;
            continue;
        }
        failed |= check_padded(&f, model, AG_BACKEND_ONEDNN);
        failed |= check_padded(&f, model, AG_BACKEND_REFERENCE);
        fixture_fini(&f);
    }
    ag_model_destroy(model);
    CHECK(!failed);
    return 0;
}

static int test_golden_onnx_perturbed(void) {
    return check_fixtures_with("v3", "cute-p", NULL, 3);
}

static int test_golden_onnx_full_v3(void) {
    return check_fixtures_with("v3", "shinkai-v3", "build/v3/AnimeGANv3_Shinkai_37.onnx", 5);
}

static int test_golden_hayao(void) {
    return check_fixtures("hayao_", 6);
}
static int test_golden_hayao_upsample_override(void) {
    return check_fixtures("hayao_ac_", 1) | check_fixtures("hayao_hp_", 1);
}
static int test_golden_pytorch_checkpoint(void) {
    return check_fixtures("random_", 3);
}

/* The legacy (non-zip) checkpoint holds the same weights as the zip one. */
static int test_pytorch_legacy_equals_zip(void) {
    ag_model *zip = NULL, *legacy = NULL;
    int failed = load_model("tests/fixtures/random_zip.pt", &zip) |
                 load_model("tests/fixtures/random_legacy.pt", &legacy);
    if (!failed) {
        CHECK(zip->info.param_count == legacy->info.param_count);
        CHECK(!memcmp(zip->weights, legacy->weights, zip->info.weight_bytes));
        CHECK(zip->info.norm_eps == 1e-5f && zip->info.resize == AG_RESIZE_ALIGN_CORNERS);
        CHECK(!strcmp(zip->info.format, "pytorch"));
    }
    ag_model_destroy(zip);
    ag_model_destroy(legacy);
    CHECK(!failed);
    return 0;
}

/* The arena is planned once per size and a run allocates nothing of ours. */
static int test_arena_reused_no_allocation(void) {
    ag_model *model;
    ag_error err;
    CHECK(load_model("models/hayao.safetensors", &model) == 0);
    ag_engine_options opt = {.threads = 2};
    ag_engine *engine;
    CHECK_OK(ag_engine_create(model, &opt, &engine, &err), &err);
    int w = 48, h = 40;
    float *in = ag_calloc((size_t)w * h * 3, sizeof(float));
    float *out = ag_malloc((size_t)w * h * 3 * sizeof(float));
    CHECK_OK(ag_engine_run_f32(engine, in, w, h, out, &err), &err);
    uint8_t *arena = engine->arena;
    size_t before = ag_allocated_bytes(), arena_bytes = ag_engine_arena_bytes(engine);
    CHECK_OK(ag_engine_run_f32(engine, in, w, h, out, &err), &err);
    CHECK(engine->arena == arena && ag_allocated_bytes() == before);
    CHECK(arena_bytes == ag_engine_arena_bytes_for(model, &opt, w, h));
    /* A new size replans; going back replans again, to the same size. */
    CHECK_OK(ag_engine_run_f32(engine, in, 32, 32, out, &err), &err);
    CHECK(ag_engine_arena_bytes(engine) < arena_bytes);
    CHECK_OK(ag_engine_run_f32(engine, in, w, h, out, &err), &err);
    CHECK(ag_engine_arena_bytes(engine) == arena_bytes);
    printf("  arena for 512x512 (fp32, onednn): %.1f MB\n",
           (double)ag_engine_arena_bytes_for(model, &opt, 512, 512) / (1 << 20));
    ag_free(in), ag_free(out);
    ag_engine_destroy(engine);
    ag_model_destroy(model);
    return 0;
}

static int test_flop_count(void) {
    ag_model *model;
    CHECK(load_model("models/hayao.safetensors", &model) == 0);
    double gflop = ag_model_flop(model, 512, 512) / 1e9;
    printf("  %.1f GFLOP per 512x512 image\n", gflop);
    ag_model_destroy(model);
    CHECK(fabs(gflop - 210.3) < 0.5);
    return 0;
}

static int test_too_small_refused(void) {
    ag_model *model;
    ag_error err = {0};
    CHECK(load_model("models/hayao.safetensors", &model) == 0);
    ag_engine *engine;
    CHECK_OK(ag_engine_create(model, NULL, &engine, &err), &err);
    float in[7 * 7 * 3] = {0}, out[7 * 7 * 3];
    CHECK(ag_engine_run_f32(engine, in, 7, 7, out, &err) == AG_E_ARG);
    CHECK(strstr(err.message, "7x7"));
    ag_engine_destroy(engine);
    ag_model_destroy(model);
    return 0;
}

/*
 * Many small bands (the last one moved up to overlap), and layers overwriting their input
 * as they go (top-down, and bottom-up for the upsampling convs), give the same result as the
 * reference, for each kind of generator.
 */
static int banded_equals_reference(const char *path, int min_in_place, int min_bottom_up) {
    ag_model *model;
    ag_error err;
    CHECK(load_model(path, &model) == 0);
    int w = 61, h = 45;
    size_t n = (size_t)w * h * 3;
    float *in = ag_malloc(n * sizeof(float)), *ref = ag_malloc(n * sizeof(float));
    float *out = ag_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        in[i] = (float)((i * 7919) % 255) / 127.5f - 1.0f;
    ag_engine_options ref_opt = {.backend = AG_BACKEND_REFERENCE, .threads = 2};
    ag_engine_options opt = {.backend = AG_BACKEND_ONEDNN, .threads = 2};
    ag_engine *reference, *banded;
    CHECK_OK(ag_engine_create(model, &ref_opt, &reference, &err), &err);
    CHECK_OK(ag_engine_create(model, &opt, &banded, &err), &err);
    banded->band_bytes_target = 16 << 10;
    CHECK_OK(ag_engine_run_f32(reference, in, w, h, ref, &err), &err);
    CHECK_OK(ag_engine_run_f32(banded, in, w, h, out, &err), &err);
    int max_bands = 0, in_place = 0, bottom_up = 0;
    for (int i = 0; i < banded->group_count; i++) {
        max_bands = banded->exec[i].bands > max_bands ? banded->exec[i].bands : max_bands;
        in_place += i > 0 && banded->exec[i].buffer == banded->exec[i - 1].buffer;
        bottom_up += i > 0 && banded->exec[i].buffer == banded->exec[i - 1].buffer &&
                     banded->exec[i].bottom_up;
    }
    float max_err = 0.0f;
    for (size_t i = 0; i < n; i++)
        max_err = fmaxf(max_err, fabsf(out[i] - ref[i]));
    printf("  %s: %d bands at most, %d layers overwriting their input (%d bottom-up), max abs "
           "error vs reference %.2e\n",
           path, max_bands, in_place, bottom_up, (double)max_err);
    ag_engine_destroy(reference), ag_engine_destroy(banded);
    ag_model_destroy(model);
    ag_free(in), ag_free(ref), ag_free(out);
    CHECK(max_bands >= 8 && in_place >= min_in_place && bottom_up >= min_bottom_up);
    CHECK(max_err <= 1e-4f);
    return 0;
}

static int test_banded_equals_reference(void) {
    CHECK(banded_equals_reference("models/hayao.safetensors", 8, 1) == 0);
    CHECK(banded_equals_reference("models/hayao-v3.safetensors", 4, 1) == 0);
    CHECK(banded_equals_reference("models/cute-v3.safetensors", 8, 0) == 0);
    return 0;
}

/* Runs last: every test released what it allocated through ag_malloc. */
static int test_no_leak(void) {
    CHECK_MSG(ag_allocated_bytes() == 0, "%zu bytes still allocated", ag_allocated_bytes());
    return 0;
}

TEST_MAIN(TEST(test_golden_hayao), TEST(test_golden_hayao_v3), TEST(test_golden_shinkai_v3),
          TEST(test_golden_cute_v3), TEST(test_golden_cute_v3_padded), TEST(test_golden_onnx_cute),
          TEST(test_golden_onnx_perturbed), TEST(test_golden_onnx_full_v3),
          TEST(test_golden_hayao_upsample_override), TEST(test_golden_pytorch_checkpoint),
          TEST(test_pytorch_legacy_equals_zip), TEST(test_arena_reused_no_allocation),
          TEST(test_flop_count), TEST(test_too_small_refused), TEST(test_banded_equals_reference),
          TEST(test_no_leak))
