/*
 * test_restore.c - the face restoration networks' loaders (issue 19): the architecture of
 * GPEN and GFPGAN state_dicts inferred from tensor names and shapes, on the reduced
 * random-weight checkpoints and the full-size key layouts of the released files that
 * tools/make_restore_fixtures.py writes, and the refusals of files that fit neither.
 */
#include "../src/engine/kind.h"
#include "../src/engine_internal.h"
#include "../src/kernels/onednn.h"
#include "../src/model/restore_internal.h"
#include "test.h"

#define FIXTURES AG_SOURCE_DIR "/tests/fixtures/"
#define RESTORE FIXTURES "restore/"

/* A parsed checkpoint and the file bytes it points into. */
typedef struct loaded {
    uint8_t *data;
    size_t size;
    ag_tensor_set set;
} loaded;

static void loaded_fini(loaded *l) {
    ag_tensor_set_fini(&l->set);
    ag_free(l->data);
    memset(l, 0, sizeof *l);
}

static int load(const char *path, loaded *l, ag_error *err) {
    memset(l, 0, sizeof *l);
    int rc = ag_read_file(path, (size_t)1 << 30, &l->data, &l->size, err);
    if (rc == AG_OK)
        rc = ag_pytorch_parse(l->data, l->size, path, &l->set, err);
    if (rc != AG_OK)
        loaded_fini(l);
    return rc;
}

/* Refused with `code` and a message holding `needle`. */
static int expect_refused(const ag_tensor_set *set, int code, const char *needle) {
    ag_restore_arch a;
    ag_error err = {0};
    int rc = ag_restore_arch_infer(set, "probe.pt", &a, &err);
    CHECK_MSG(rc == code, "returned %d (%s), wanted %d", rc, err.message, code);
    CHECK_MSG(strncmp(err.message, "probe.pt: ", 10) == 0, "message '%s'", err.message);
    CHECK_MSG(strstr(err.message, needle), "message '%s' lacks '%s'", err.message, needle);
    CHECK(!strchr(err.message, '\n'));
    printf("  refused: %s\n", err.message);
    return 0;
}

static int check_channels(const int *have, const int *want, int from, int to) {
    for (int i = from; i <= to; i++)
        CHECK_MSG(have[i] == want[i - from], "channels at 2^%d: %d, want %d", i, have[i],
                  want[i - from]);
    return 0;
}

LEAK_CHECKED(test_gpen_zip_arch) {
    loaded l;
    ag_error err = {0};
    CHECK_OK(load(RESTORE "gpen64_zip.pt", &l, &err), &err);
    ag_restore_arch a;
    int rc = ag_restore_arch_infer(&l.set, "gpen64_zip.pt", &a, &err);
    int count = l.set.count;
    loaded_fini(&l);
    CHECK_OK(rc, &err);
    CHECK(a.kind == AG_RESTORE_GPEN && a.size == 64 && a.log_size == 6);
    CHECK(a.style_dim == 32 && a.n_mlp == 2 && a.n_latent == 1);
    CHECK(check_channels(a.channels, (const int[]){16, 16, 16, 16, 8}, 2, 6) == 0);
    CHECK(count == 94); /* as upstream's FullGenerator(64, 32, 2, 1, narrow=1/32) registers */
    return 0;
}

LEAK_CHECKED(test_gpen_g_ema_legacy_arch) {
    loaded l;
    ag_error err = {0};
    CHECK_OK(load(RESTORE "gpen32_g_ema.pt", &l, &err), &err);
    const char *key = ag_tensor_set_meta_get(&l.set, "state_dict_key");
    ag_restore_arch a;
    int rc = ag_restore_arch_infer(&l.set, "gpen32_g_ema.pt", &a, &err);
    int key_ok = key && strcmp(key, "g_ema") == 0;
    loaded_fini(&l);
    CHECK_OK(rc, &err);
    CHECK(key_ok);
    CHECK(a.kind == AG_RESTORE_GPEN && a.size == 32 && a.style_dim == 16 && a.n_mlp == 3);
    CHECK(check_channels(a.channels, (const int[]){8, 8, 8, 8}, 2, 5) == 0);
    return 0;
}

LEAK_CHECKED(test_gfpgan_params_ema_arch) {
    loaded l;
    ag_error err = {0};
    CHECK_OK(load(RESTORE "gfpgan64_zip.pt", &l, &err), &err);
    const char *key = ag_tensor_set_meta_get(&l.set, "state_dict_key");
    int key_ok = key && strcmp(key, "params_ema") == 0;
    ag_restore_arch a;
    int rc = ag_restore_arch_infer(&l.set, "gfpgan64_zip.pt", &a, &err);
    loaded_fini(&l);
    CHECK_OK(rc, &err);
    CHECK(key_ok);
    CHECK(a.kind == AG_RESTORE_GFPGAN && a.size == 64 && a.style_dim == 16 && a.n_mlp == 2);
    CHECK(a.n_latent == 10 && a.sft_half);
    CHECK(check_channels(a.channels, (const int[]){16, 16, 16, 16, 8}, 2, 6) == 0);
    CHECK(check_channels(a.unet, (const int[]){8, 8, 8, 8, 4}, 2, 6) == 0);
    return 0;
}

/* A set of the shapes in a layout_*.txt file ("name d0 d1 ..."; a 5-D modulated conv weight
 * loses its leading 1 as the loader drops it), every tensor pointing into one zeroed buffer. */
static int layout_set(const char *path, ag_tensor_set *set, void **zeros) {
    FILE *f = fopen(path, "r");
    CHECK_MSG(f, "cannot open %s", path);
    static ag_tensor_ref refs[1024];
    int n = 0;
    size_t largest = 0;
    char line[256];
    while (n < 1024 && fgets(line, sizeof line, f)) {
        ag_tensor_ref *r = &refs[n];
        memset(r, 0, sizeof *r);
        char *tok = strtok(line, " \n");
        snprintf(r->name, sizeof r->name, "%s", tok);
        int64_t dims[5];
        int nd = 0;
        while (nd < 5 && (tok = strtok(NULL, " \n")))
            dims[nd++] = atoll(tok);
        int drop = nd == 5 ? 1 : 0;
        r->ndim = nd - drop;
        r->nbytes = 4;
        for (int i = 0; i < r->ndim; i++)
            r->nbytes *= (size_t)(r->shape[i] = dims[i + drop]);
        largest = r->nbytes > largest ? r->nbytes : largest;
        n++;
    }
    fclose(f);
    *zeros = ag_calloc(1, largest);
    CHECK(*zeros);
    ag_error err = {0};
    for (int i = 0; i < n; i++) {
        refs[i].data = *zeros;
        CHECK_OK(ag_tensor_set_add(set, &refs[i], &err), &err);
    }
    return 0;
}

static int check_layout(const char *file, ag_restore_kind kind, int size, int n_mlp,
                        const int *channels, int64_t min_params, int64_t max_params) {
    ag_tensor_set set = {0};
    void *zeros = NULL;
    char path[512];
    snprintf(path, sizeof path, RESTORE "%s", file);
    int rc = layout_set(path, &set, &zeros);
    ag_restore_arch a;
    ag_error err = {0};
    if (rc == 0)
        rc = ag_restore_arch_infer(&set, file, &a, &err);
    ag_tensor_set_fini(&set);
    ag_free(zeros);
    CHECK_OK(rc, &err);
    CHECK(a.kind == kind && a.size == size && a.style_dim == 512 && a.n_mlp == n_mlp);
    CHECK(check_channels(a.channels, channels, 2, a.log_size) == 0);
    printf("  %s: %s %d, %lld parameters (%.0f MB fp32)\n", file,
           kind == AG_RESTORE_GPEN ? "GPEN" : "GFPGAN", size, (long long)a.params,
           (double)a.params * 4 / 1e6);
    CHECK_MSG(a.params >= min_params && a.params <= max_params, "%lld parameters",
              (long long)a.params);
    return 0;
}

/* The released files' layouts at full size: sizes, channel tables, parameter counts (the
 * issue quotes GPEN-512 at 284 MB and GFPGAN at 350 MB of fp32 files, buffers included). */
LEAK_CHECKED(test_full_size_layouts) {
    const int bfr256[] = {256, 256, 256, 256, 128, 64, 32};
    const int bfr512[] = {512, 512, 512, 512, 512, 256, 128, 64};
    const int g1024[] = {512, 512, 512, 512, 512, 256, 128, 64, 32};
    const int g2048[] = {512, 512, 512, 512, 512, 256, 128, 64, 32, 16};
    CHECK(check_layout("layout_gpen_bfr_256.txt", AG_RESTORE_GPEN, 256, 8, bfr256, 10000000,
                       30000000) == 0);
    CHECK(check_layout("layout_gpen_bfr_512.txt", AG_RESTORE_GPEN, 512, 8, bfr512, 65000000,
                       75000000) == 0);
    CHECK(check_layout("layout_gpen_1024.txt", AG_RESTORE_GPEN, 1024, 8, g1024, 65000000,
                       80000000) == 0);
    CHECK(check_layout("layout_gpen_2048.txt", AG_RESTORE_GPEN, 2048, 8, g2048, 65000000,
                       80000000) == 0);
    CHECK(check_layout("layout_gfpgan_v1.4.txt", AG_RESTORE_GFPGAN, 512, 8, bfr512, 80000000,
                       95000000) == 0);
    return 0;
}

/* A full-size layout builds a whole model (graph, attribute ranges, weights bound and packed)
 * and plans its shapes at the model's size: GFPGANv1.4's style slices reach channel 4608,
 * which a 4096 bound once refused although every reduced checkpoint passed. */
static int check_layout_builds(const char *file) {
    ag_tensor_set set = {0};
    void *zeros = NULL;
    char path[512];
    snprintf(path, sizeof path, RESTORE "%s", file);
    int rc = layout_set(path, &set, &zeros);
    ag_model *m = NULL;
    ag_error err = {0};
    if (rc == 0)
        rc = ag_restore_model_from_set(&set, file, &m, &err);
    ag_tensor_set_fini(&set);
    ag_free(zeros);
    CHECK_OK(rc, &err);
    const ag_model_info *info = ag_model_get_info(m);
    ag_engine_options eo = {.backend = AG_BACKEND_ONEDNN, .precision = AG_PRECISION_FP32};
    size_t arena = ag_engine_arena_bytes_for(m, &eo, info->min_side, info->min_side);
    size_t prepared = ag_engine_prepared_bytes_for(m, &eo, info->min_side, info->min_side);
    printf("  %s builds: %d px, fp32 arena %.0f MB, prepared weights %.0f MB\n", file,
           info->min_side, (double)arena / 1e6, (double)prepared / 1e6);
    ag_model_destroy(m);
    CHECK(arena > 0);
    return 0;
}

LEAK_CHECKED(test_full_size_layouts_build) {
    CHECK(check_layout_builds("layout_gpen_bfr_512.txt") == 0);
    CHECK(check_layout_builds("layout_gfpgan_v1.4.txt") == 0);
    CHECK(check_layout_builds("layout_codeformer.txt") == 0);
    return 0;
}

/* CodeFormer's architecture from the released file's layout and from the reduced fixture. */
static int check_codeformer_arch(const ag_tensor_set *set, const char *file,
                                 const ag_codeformer_arch *want, int64_t min_params,
                                 int64_t max_params) {
    ag_restore_arch a;
    ag_error err = {0};
    CHECK_OK(ag_restore_arch_infer(set, file, &a, &err), &err);
    const ag_codeformer_arch *cf = &a.cf;
    printf("  %s: CodeFormer nf %d, dim %d, %d layers, mlp %d, codebook %d x %d, %lld "
           "parameters\n",
           file, cf->nf, cf->dim, cf->layers, cf->mlp, cf->codebook, cf->emb_dim,
           (long long)a.params);
    CHECK(a.kind == AG_RESTORE_CODEFORMER && a.size == 512);
    CHECK(cf->nf == want->nf && cf->dim == want->dim && cf->layers == want->layers);
    CHECK(cf->mlp == want->mlp && cf->codebook == want->codebook && cf->heads == 8);
    CHECK(cf->emb_dim == want->emb_dim);
    CHECK(memcmp(cf->ch, want->ch, sizeof cf->ch) == 0);
    CHECK(memcmp(cf->fuse, want->fuse, sizeof cf->fuse) == 0);
    CHECK_MSG(a.params >= min_params && a.params <= max_params, "%lld", (long long)a.params);
    return 0;
}

LEAK_CHECKED(test_codeformer_arch) {
    ag_tensor_set set = {0};
    void *zeros = NULL;
    int rc = layout_set(RESTORE "layout_codeformer.txt", &set, &zeros);
    const ag_codeformer_arch full = {.nf = 64,
                                     .ch = {64, 128, 128, 256, 256, 512},
                                     .emb_dim = 256,
                                     .codebook = 1024,
                                     .dim = 512,
                                     .mlp = 1024,
                                     .layers = 9,
                                     .fuse = {false, true, true, true, true, false}};
    if (rc == 0)
        rc = check_codeformer_arch(&set, "layout_codeformer.txt", &full, 94000000, 94200000);
    ag_tensor_set_fini(&set);
    ag_free(zeros);
    CHECK(rc == 0);
    loaded l;
    ag_error err = {0};
    CHECK_OK(load(RESTORE "up_codeformer.pt", &l, &err), &err);
    const ag_codeformer_arch small = {.nf = 32,
                                      .ch = {32, 32, 32, 32, 32, 32},
                                      .emb_dim = 256,
                                      .codebook = 1024,
                                      .dim = 64,
                                      .mlp = 128,
                                      .layers = 2,
                                      .fuse = {false, true, true, true, true, false}};
    rc = check_codeformer_arch(&l.set, "up_codeformer.pt", &small, 1400000, 1600000);
    /* a wrong shape is named */
    ag_tensor_ref *t = (ag_tensor_ref *)ag_tensor_set_find(&l.set, "ft_layers.1.linear2.weight");
    if (rc == 0 && t) {
        t->shape[1] -= 1;
        rc = expect_refused(&l.set, AG_E_FORMAT,
                            "tensor 'ft_layers.1.linear2.weight' is (64, 127) where CodeFormer "
                            "512x512 has (64, 128)");
        t->shape[1] += 1;
    }
    loaded_fini(&l);
    CHECK(rc == 0 && t);
    return 0;
}

/* The first tensor of the wrong shape, an extra one and a missing one are each named. */
LEAK_CHECKED(test_layout_mismatches) {
    loaded l;
    ag_error err = {0};
    CHECK_OK(load(RESTORE "gpen64_zip.pt", &l, &err), &err);
    ag_tensor_ref *t = (ag_tensor_ref *)ag_tensor_set_find(&l.set, "generator.convs.1.conv.weight");
    int rc = t ? 0 : 1;
    if (t) {
        t->shape[1] -= 1;
        rc |= expect_refused(&l.set, AG_E_FORMAT,
                             "tensor 'generator.convs.1.conv.weight' is (16, 31, 3, 3) where GPEN "
                             "64x64 has (16, 32, 3, 3)");
        t->shape[1] += 1;
        snprintf(t->name, sizeof t->name, "generator.convs.1.conv.weight_orig");
        rc |= expect_refused(&l.set, AG_E_FORMAT,
                             "tensor 'generator.convs.1.conv.weight_orig' is not part of GPEN");
    }
    loaded_fini(&l);
    CHECK(rc == 0);
    CHECK_OK(load(RESTORE "gfpgan64_zip.pt", &l, &err), &err);
    t = (ag_tensor_ref *)ag_tensor_set_find(&l.set, "stylegan_decoder.noises.noise3");
    rc = t ? 0 : 1;
    if (t) { /* drop it: the last tensor takes its place */
        *t = l.set.tensors[--l.set.count];
        rc |= expect_refused(&l.set, AG_E_FORMAT,
                             "tensor 'stylegan_decoder.noises.noise3' of GFPGAN 64x64 is missing");
    }
    loaded_fini(&l);
    CHECK(rc == 0);
    return 0;
}

/* Another network's state_dict (AnimeGANv2), a pickled whole module, a truncated file. */
LEAK_CHECKED(test_bad_checkpoints) {
    loaded l;
    ag_error err = {0};
    CHECK_OK(load(FIXTURES "random_zip.pt", &l, &err), &err);
    int rc = expect_refused(&l.set, AG_E_FORMAT,
                            "tensor 'block_a.0.1.weight' fits neither GPEN nor GFPGAN");
    loaded_fini(&l);
    CHECK(rc == 0);
    rc = load(FIXTURES "pt/whole_module_zip.pt", &l, &err);
    CHECK_MSG(rc == AG_E_UNSUPPORTED && strstr(err.message, "whole_module_zip.pt: "), "%d %s", rc,
              err.message);
    printf("  refused: %s\n", err.message);
    uint8_t *data = NULL;
    size_t size = 0;
    CHECK_OK(ag_read_file(RESTORE "gpen64_zip.pt", (size_t)1 << 30, &data, &size, &err), &err);
    ag_tensor_set set = {0};
    rc = ag_pytorch_parse(data, size / 2, "truncated.pt", &set, &err);
    ag_free(data);
    CHECK_MSG(rc == AG_E_FORMAT && strncmp(err.message, "truncated.pt: ", 14) == 0, "%d %s", rc,
              err.message);
    CHECK(set.count == 0);
    printf("  refused: %s\n", err.message);
    return 0;
}

/* ---- golden outputs ---------------------------------------------------------------------- */

/* A .agrf fixture (tools/make_restore_fixtures.py): the input face, the reference's float
 * output and its 8-bit rounding. */
typedef struct golden {
    int size;
    char model[65];
    uint8_t *in_u8, *out_u8; /* (S, S, 3) */
    float *out_f32;          /* (S, S, 3) */
    uint8_t *buf;
} golden;

static int golden_read(const char *name, golden *g) {
    char path[512];
    snprintf(path, sizeof path, RESTORE "%s", name);
    size_t size = 0;
    ag_error err = {0};
    memset(g, 0, sizeof *g);
    CHECK_OK(ag_read_file(path, 1 << 26, &g->buf, &size, &err), &err);
    uint32_t version = 0, side = 0;
    CHECK(size >= 76 && memcmp(g->buf, "AGRF", 4) == 0);
    memcpy(&version, g->buf + 4, 4);
    memcpy(&side, g->buf + 8, 4);
    CHECK(version == 1 && side >= 8 && side <= 1024);
    size_t n = (size_t)side * side * 3;
    CHECK(size == 76 + n + 4 * n + n);
    g->size = (int)side;
    memcpy(g->model, g->buf + 12, 64);
    g->in_u8 = g->buf + 76;
    g->out_f32 = (float *)(g->buf + 76 + n); /* ag_read_file's buffer is malloc-aligned */
    g->out_u8 = g->buf + 76 + 5 * n;
    return 0;
}

/* The model of a golden file on `backend` in `precision`: the float output within `tol` of
 * PyTorch's, the 8-bit one within `levels` of its and at least `min_db` PSNR from it. */
typedef struct golden_bar {
    ag_precision precision;
    float tol;
    int levels;
    double min_db;
} golden_bar;

static int check_golden_at(const char *name, ag_backend backend, golden_bar bar) {
    golden g;
    CHECK(golden_read(name, &g) == 0);
    char path[512];
    snprintf(path, sizeof path, AG_SOURCE_DIR "/%s", g.model);
    ag_model *model = NULL;
    ag_engine *engine = NULL;
    ag_error err = {0};
    size_t n = (size_t)g.size * g.size * 3;
    float *in = ag_malloc(n * sizeof *in), *out = ag_malloc(n * sizeof *out);
    int rc = in && out ? ag_restore_model_load(path, &model, &err) : AG_E_NOMEM;
    ag_engine_options opt = {.backend = backend, .precision = bar.precision, .threads = 2};
    if (rc == AG_OK)
        rc = ag_engine_create(model, &opt, &engine, &err);
    for (size_t i = 0; rc == AG_OK && i < n; i++)
        in[i] = (float)g.in_u8[i] / 127.5f - 1.0f;
    if (rc == AG_OK)
        rc = ag_engine_run_f32(engine, in, g.size, g.size, out, &err);
    double worst = 0.0, peak = 0.0, sq = 0.0;
    int worst8 = 0;
    for (size_t i = 0; rc == AG_OK && i < n; i++) {
        double d = fabs((double)out[i] - (double)g.out_f32[i]);
        worst = d > worst ? d : worst;
        peak = fabs((double)g.out_f32[i]) > peak ? fabs((double)g.out_f32[i]) : peak;
        float y = out[i] < -1.0f ? -1.0f : out[i] > 1.0f ? 1.0f : out[i];
        int v = (int)lrintf((y + 1.0f) * 127.5f), d8 = abs(v - (int)g.out_u8[i]);
        worst8 = d8 > worst8 ? d8 : worst8;
        sq += (double)d8 * d8;
    }
    double db = sq > 0.0 ? 10.0 * log10(255.0 * 255.0 / (sq / (double)n)) : 99.0;
    if (rc == AG_OK)
        printf("  %s, %s %s: max |error| %.2e (output peak %.2f), 8-bit %d level(s), %.1f dB\n",
               name, backend == AG_BACKEND_REFERENCE ? "reference" : "onednn",
               ag_precision_name(bar.precision), worst, peak, worst8, db);
    ag_engine_destroy(engine);
    ag_model_destroy(model);
    ag_free(in);
    ag_free(out);
    ag_free(g.buf);
    CHECK_OK(rc, &err);
    CHECK_MSG(worst <= (double)bar.tol, "max error %.3g over %.3g", worst, (double)bar.tol);
    CHECK_MSG(worst8 <= bar.levels, "%d levels over %d", worst8, bar.levels);
    CHECK_MSG(db >= bar.min_db, "%.1f dB under %.0f", db, bar.min_db);
    return 0;
}

/* fp32: 1e-3 on the float output, 1 level on 8-bit (the tolerance). */
static int check_golden(const char *name, ag_backend backend, float tol) {
    return check_golden_at(name, backend, (golden_bar){AG_PRECISION_FP32, tol, 1, 0.0});
}

LEAK_CHECKED(test_gpen_golden) {
    CHECK(check_golden("gpen64.agrf", AG_BACKEND_REFERENCE, 1e-3f) == 0);
    CHECK(check_golden("gpen64.agrf", AG_BACKEND_ONEDNN, 1e-3f) == 0);
    CHECK(check_golden("gpen32.agrf", AG_BACKEND_REFERENCE, 1e-3f) == 0);
    CHECK(check_golden("gpen32.agrf", AG_BACKEND_ONEDNN, 1e-3f) == 0);
    return 0;
}

LEAK_CHECKED(test_gfpgan_golden) {
    CHECK(check_golden("gfpgan64.agrf", AG_BACKEND_REFERENCE, 1e-3f) == 0);
    CHECK(check_golden("gfpgan64.agrf", AG_BACKEND_ONEDNN, 1e-3f) == 0);
    return 0;
}

/* ---- the upstream code's outputs ---------------------------------------------------------- */

/* A version 2 .agrf (tools/make_restore_upstream_fixtures.py): upstream GPEN or GFPGAN run on
 * its own seeded random-weight checkpoint. The input is the nearest enlargement of an n x n
 * face to S x S; the outputs are kept on an n x n grid that includes the borders. */
typedef struct upstream {
    int size, grid;
    char model[65];
    const uint8_t *in_u8, *out_u8; /* (n, n, 3) */
    const float *out_f32;          /* (n, n, 3) at (grid_px(i), grid_px(j)) */
    uint8_t *buf;
    float w; /* CodeFormer's fidelity the outputs were made at (others: unused) */
} upstream;

static int grid_px(const upstream *u, int i) {
    return (int)((long)i * (u->size - 1) / (u->grid - 1));
}

static int upstream_read(const char *name, upstream *u) {
    char path[512];
    snprintf(path, sizeof path, RESTORE "%s", name);
    size_t size = 0;
    ag_error err = {0};
    memset(u, 0, sizeof *u);
    CHECK_OK(ag_read_file(path, 1 << 24, &u->buf, &size, &err), &err);
    uint32_t head[3] = {0};
    CHECK(size >= 80 && memcmp(u->buf, "AGRF", 4) == 0);
    memcpy(head, u->buf + 4, sizeof head);
    CHECK(head[0] == 2 && head[2] >= 2 && head[1] % head[2] == 0 && head[1] <= 2048);
    size_t n = (size_t)head[2] * head[2] * 3;
    CHECK(size == 80 + 6 * n);
    u->size = (int)head[1], u->grid = (int)head[2];
    memcpy(u->model, u->buf + 16, 64);
    u->in_u8 = u->buf + 80;
    u->out_f32 = (const float *)(u->buf + 80 + n); /* 80 + n is a multiple of 4 */
    u->out_u8 = u->buf + 80 + 5 * n;
    return 0;
}

/* The network's S x S input: the grid face enlarged by nearest neighbour. */
static void upstream_input(const upstream *u, ag_image *img) {
    int k = u->size / u->grid;
    for (int y = 0; y < u->size; y++)
        for (int x = 0; x < u->size; x++)
            memcpy(img->pixels + ((size_t)y * u->size + x) * 3,
                   u->in_u8 + ((size_t)(y / k) * u->grid + x / k) * 3, 3);
}

/* Worst float and 8-bit errors of (S, S, 3) float `out` and u8 `out8` (either NULL) against
 * upstream on its grid, and the 8-bit PSNR. */
typedef struct upstream_error {
    double worst, db, float_db; /* float_db: PSNR of the float output over its [-1, 1] range */
    int worst8;
} upstream_error;

static upstream_error upstream_compare(const upstream *u, const float *out, const uint8_t *out8) {
    upstream_error e = {0};
    double sq = 0.0, sqf = 0.0;
    for (int i = 0; i < u->grid; i++)
        for (int j = 0; j < u->grid; j++)
            for (int c = 0; c < 3; c++) {
                size_t g = ((size_t)i * u->grid + j) * 3 + c;
                size_t p = ((size_t)grid_px(u, i) * u->size + grid_px(u, j)) * 3 + c;
                int v = out8 ? out8[p] : 0;
                if (out) {
                    double d = fabs((double)out[p] - (double)u->out_f32[g]);
                    e.worst = d > e.worst ? d : e.worst;
                    sqf += d * d;
                    float y = out[p] < -1.0f ? -1.0f : out[p] > 1.0f ? 1.0f : out[p];
                    v = (int)lrintf((y + 1.0f) * 127.5f);
                }
                int d8 = abs(v - (int)u->out_u8[g]);
                e.worst8 = d8 > e.worst8 ? d8 : e.worst8;
                sq += (double)d8 * d8;
            }
    double mse = sq / ((double)u->grid * u->grid * 3);
    e.db = mse > 0.0 ? 10.0 * log10(255.0 * 255.0 / mse) : 99.0;
    double msef = sqf / ((double)u->grid * u->grid * 3);
    e.float_db = msef > 0.0 ? 10.0 * log10(4.0 / msef) : 999.0;
    return e;
}

/* The network of an upstream fixture on `backend` in `bar.precision`: in fp32 within 1e-3 of
 * upstream's float output and 1 level of its 8-bit one; bf16 and int8 at their own 38 dB. */
static int check_upstream_engine(const upstream *u, const ag_model *model, ag_backend backend,
                                 golden_bar bar) {
    size_t n = (size_t)u->size * u->size * 3;
    float *in = ag_malloc(n * sizeof *in), *out = ag_malloc(n * sizeof *out);
    uint8_t *in8 = ag_malloc(n);
    ag_engine *engine = NULL;
    ag_error err = {0};
    ag_engine_options opt = {.backend = backend, .precision = bar.precision, .threads = 2};
    int rc = in && out && in8 ? ag_engine_create(model, &opt, &engine, &err) : AG_E_NOMEM;
    if (rc == AG_OK) {
        ag_engine_set_runtime_alpha(engine, u->w);
        ag_image img = {.width = u->size, .height = u->size, .bands = 3, .pixels = in8};
        upstream_input(u, &img);
        for (size_t i = 0; i < n; i++)
            in[i] = (float)in8[i] / 127.5f - 1.0f;
        rc = ag_engine_run_f32(engine, in, u->size, u->size, out, &err);
    }
    upstream_error e = rc == AG_OK ? upstream_compare(u, out, NULL) : (upstream_error){0};
    int skipped = engine ? engine->steps_skipped : 0, steps = engine ? engine->group_count : 0;
    ag_engine_destroy(engine);
    ag_free(in);
    ag_free(out);
    ag_free(in8);
    CHECK_OK(rc, &err);
    printf("  %s, %s %s: max |error| %.2e (%.1f dB), 8-bit %d level(s), %.1f dB; %d of %d "
           "steps skipped\n",
           u->model, backend == AG_BACKEND_REFERENCE ? "reference" : "onednn",
           ag_precision_name(bar.precision), e.worst, e.float_db, e.worst8, e.db, skipped, steps);
    /* CodeFormer at w = 0: the fuse blocks' steps are not run (upstream skips them too); the
     * reference backend (no steps) runs every node, as the oracle */
    CHECK_MSG(!steps || (u->w == 0.0f ? skipped > 0 : skipped == 0), "%d steps skipped at w %g",
              skipped, (double)u->w);
    CHECK_MSG(e.worst <= (double)bar.tol, "max error %.3g over %.3g", e.worst, (double)bar.tol);
    CHECK_MSG(e.worst8 <= bar.levels, "%d levels over %d", e.worst8, bar.levels);
    CHECK_MSG(e.db >= bar.min_db, "%.1f dB under %.0f", e.db, bar.min_db);
    return 0;
}

/* `animegan restore --aligned` on the same input: the network's input as it is, the output
 * pasted 1:1 (no FFHQ warp): 1 level of upstream's 8-bit output. */
static int check_upstream_aligned(const upstream *u, ag_model *model) {
    size_t n = (size_t)u->size * u->size * 3;
    ag_image in = {.width = u->size, .height = u->size, .bands = 3, .pixels = ag_malloc(n)};
    ag_image out = {0};
    ag_engine *engine = NULL;
    ag_error err = {0};
    ag_engine_options opt = {.backend = AG_BACKEND_ONEDNN, .precision = AG_PRECISION_FP32};
    int rc = in.pixels ? ag_engine_create(model, &opt, &engine, &err) : AG_E_NOMEM;
    ag_restore_options o;
    ag_restore_options_init(&o);
    o.aligned = 1;
    o.codeformer_fidelity = u->w;
    if (rc == AG_OK) {
        upstream_input(u, &in);
        rc = ag_restore_faces(engine, NULL, &in, &o, &out, NULL, &err);
    }
    int same_size = rc == AG_OK && out.width == u->size && out.height == u->size;
    upstream_error e = same_size ? upstream_compare(u, NULL, out.pixels) : (upstream_error){0};
    ag_image_fini(&in);
    ag_image_fini(&out);
    ag_engine_destroy(engine);
    CHECK_OK(rc, &err);
    CHECK(same_size);
    printf("  %s, restore --aligned: 8-bit %d level(s), %.1f dB\n", u->model, e.worst8, e.db);
    CHECK_MSG(e.worst8 <= 1, "%d levels over 1", e.worst8);
    return 0;
}

/* bf16 and int8 where this CPU has them, at the 38 dB bar of a faster precision. */
static int check_upstream_precisions(const upstream *u, const ag_model *model) {
    const ag_precision fast[2] = {AG_PRECISION_BF16, AG_PRECISION_INT8};
    for (int i = 0; i < 2; i++) {
        ag_precision_choice choice;
        if (ag_restore_precision_resolve(fast[i], NULL, &choice) != AG_OK) {
            printf("  skipped: %s\n", choice.note);
            continue;
        }
        golden_bar bar = {fast[i], 1.0f, 255, 38.0};
        CHECK(check_upstream_engine(u, model, AG_BACKEND_ONEDNN, bar) == 0);
    }
    return 0;
}

/* One upstream fixture: oneDNN always, the reference backend only up to 512 px (its plain
 * loops take seconds per megapixel), bf16 and int8 if asked (once per network: their
 * preparation is slow), and the aligned restore path. */
static int check_upstream_at(const char *name, int with_precisions, float w) {
    upstream u;
    CHECK(upstream_read(name, &u) == 0);
    u.w = w;
    char path[512];
    snprintf(path, sizeof path, AG_SOURCE_DIR "/%s", u.model);
    ag_model *model = NULL;
    ag_error err = {0};
    int rc = ag_restore_model_load(path, &model, &err), bad = 0;
    if (rc == AG_OK) {
        golden_bar fp32 = {AG_PRECISION_FP32, 1e-3f, 1, 0.0};
        bad |= check_upstream_engine(&u, model, AG_BACKEND_ONEDNN, fp32);
        if (u.size <= 512)
            bad |= check_upstream_engine(&u, model, AG_BACKEND_REFERENCE, fp32);
        if (with_precisions)
            bad |= check_upstream_precisions(&u, model);
        bad |= check_upstream_aligned(&u, model);
    }
    ag_model_destroy(model);
    ag_free(u.buf);
    CHECK_OK(rc, &err);
    CHECK(bad == 0);
    return 0;
}

static int check_upstream(const char *name, int with_precisions) {
    return check_upstream_at(name, with_precisions, 0.5f);
}

LEAK_CHECKED(test_upstream_gpen) {
    CHECK(check_upstream("up_gpen_bfr256.agrf", 1) == 0);
    CHECK(check_upstream("up_gpen_bfr512.agrf", 0) == 0);
    CHECK(check_upstream("up_gpen1024.agrf", 0) == 0);
    return 0;
}

LEAK_CHECKED(test_upstream_gfpgan) {
    CHECK(check_upstream("up_gfpgan512.agrf", 1) == 0);
    return 0;
}

/* CodeFormer at w = 0.5 (tools/make_codeformer_fixtures.py: 78 distinct codes), with bf16
 * and int8; then w = 0 and 1. */
LEAK_CHECKED(test_upstream_codeformer) {
    CHECK(check_upstream_at("up_codeformer_w05.agrf", 1, 0.5f) == 0);
    return 0;
}

LEAK_CHECKED(test_upstream_codeformer_w0_w1) {
    CHECK(check_upstream_at("up_codeformer_w0.agrf", 0, 0.0f) == 0);
    CHECK(check_upstream_at("up_codeformer_w1.agrf", 0, 1.0f) == 0);
    return 0;
}

/* The Winograd plain convs of group gi's engine: 1 when its kernel is a oneDNN conv on
 * Winograd. */
static int wino_conv(const ag_engine *e, int gi) {
    size_t bytes;
    return e->exec[gi].kind && strcmp(e->exec[gi].kind->name, "conv") == 0 && e->exec[gi].kernel &&
           ag_dnnl_conv_wino_layout(e->exec[gi].kernel, &bytes);
}

/* A restorer's fp32 plain 3x3 convs run on Winograd where oneDNN has it (CodeFormer's VQGAN:
 * ResBlocks at 32 px and up); their weights are the model's, shared: a second engine uses
 * the same ones. Planned only (a 512 px run takes minutes under the sanitizers); the
 * Winograd convs' output is test_upstream_codeformer's. */
LEAK_CHECKED(test_restore_plain_convs_winograd_shared) {
    ag_model *model = NULL;
    ag_engine *e[2] = {NULL, NULL};
    ag_error err = {0};
    ag_engine_options opt = {.backend = AG_BACKEND_ONEDNN, .precision = AG_PRECISION_FP32};
    int rc = ag_restore_model_load(RESTORE "up_codeformer.pt", &model, &err);
    for (int k = 0; k < 2 && rc == AG_OK; k++) {
        rc = ag_engine_create(model, &opt, &e[k], &err);
        if (rc == AG_OK)
            rc = ag_engine_prepare(e[k], 512, 512, &err);
    }
    int wino = 0, shared = 0, expected = (ag_cpu_get_info()->onednn_flags & AG_CPU_AVX512F) != 0;
    for (int gi = 0; rc == AG_OK && gi < e[0]->group_count; gi++) {
        wino += wino_conv(e[0], gi);
        shared += wino_conv(e[0], gi) && e[0]->exec[gi].shared_weights &&
                  e[1]->exec[gi].shared_weights == e[0]->exec[gi].shared_weights;
    }
    printf("  %d plain convs on Winograd (oneDNN ISA %s), %d sharing their weights\n", wino,
           ag_cpu_get_info()->onednn_isa, shared);
    for (int k = 0; k < 2; k++)
        ag_engine_destroy(e[k]);
    ag_model_destroy(model);
    CHECK_OK(rc, &err);
    CHECK_MSG(expected ? wino >= 10 && shared == wino : wino == 0, "%d Winograd convs, %d shared",
              wino, shared);
    return 0;
}

/* Asks to stop from its `at`-th question on (never for at = 0). */
typedef struct stop_after {
    int calls, at;
} stop_after;

static int stop_here(void *user) {
    stop_after *s = user;
    return ++s->calls >= s->at && s->at > 0;
}

/* The service's departed client (#35 item 3): a restorer's engine asked to stop between two
 * of its steps or bands stops there with nothing in `out`, and runs again to the same
 * bytes. */
LEAK_CHECKED(test_restore_cancelled_between_bands) {
    upstream u;
    CHECK(upstream_read("up_gpen_bfr256.agrf", &u) == 0);
    char path[512];
    snprintf(path, sizeof path, AG_SOURCE_DIR "/%s", u.model);
    size_t n = (size_t)u.size * u.size * 3;
    ag_image in = {.width = u.size, .height = u.size, .bands = 3, .pixels = ag_malloc(n)};
    ag_image first = {0}, stopped = {0}, again = {0};
    ag_model *model = NULL;
    ag_engine *engine = NULL;
    ag_error err = {0};
    ag_engine_options opt = {.backend = AG_BACKEND_ONEDNN, .precision = AG_PRECISION_FP32};
    int rc = in.pixels ? ag_restore_model_load(path, &model, &err) : AG_E_NOMEM;
    if (rc == AG_OK)
        rc = ag_engine_create(model, &opt, &engine, &err);
    ag_restore_options o;
    ag_restore_options_init(&o);
    o.aligned = 1;
    stop_after count = {0}, half = {0};
    int cancelled = AG_OK, same = 0;
    if (rc == AG_OK) {
        upstream_input(&u, &in);
        ag_engine_set_cancel(engine, stop_here, &count);
        rc = ag_restore_faces(engine, NULL, &in, &o, &first, NULL, &err);
        half.at = count.calls / 2;
        ag_engine_set_cancel(engine, stop_here, &half);
        cancelled = ag_restore_faces(engine, NULL, &in, &o, &stopped, NULL, &err);
        ag_engine_set_cancel(engine, NULL, NULL);
    }
    if (rc == AG_OK)
        rc = ag_restore_faces(engine, NULL, &in, &o, &again, NULL, &err);
    if (rc == AG_OK)
        same = !memcmp(first.pixels, again.pixels, n);
    printf("  the hook asked %d times in a run; stopped at %d\n", count.calls, half.at);
    int left = stopped.pixels != NULL;
    ag_image_fini(&in), ag_image_fini(&first), ag_image_fini(&stopped), ag_image_fini(&again);
    ag_engine_destroy(engine);
    ag_model_destroy(model);
    ag_free(u.buf);
    CHECK_OK(rc, &err);
    CHECK_MSG(count.calls >= 4, "the hook was asked %d times", count.calls);
    CHECK_MSG(cancelled == AG_E_CANCELLED && !left, "rc %d, output left %d", cancelled, left);
    CHECK(same);
    return 0;
}

/* Every fixture in `precision` against PyTorch's fp32 on its real face crop: at least 38 dB
 * (the bar for a faster precision; the 8-bit and float errors are printed).
 * Skipped where this CPU has no such precision. */
static int check_precision_goldens(ag_precision precision) {
    ag_precision_choice choice;
    if (ag_restore_precision_resolve(precision, NULL, &choice) != AG_OK) {
        printf("  skipped: %s\n", choice.note);
        return 0;
    }
    golden_bar bar = {precision, 1.0f, 255, 38.0};
    CHECK(check_golden_at("gpen64.agrf", AG_BACKEND_ONEDNN, bar) == 0);
    CHECK(check_golden_at("gpen32.agrf", AG_BACKEND_ONEDNN, bar) == 0);
    CHECK(check_golden_at("gfpgan64.agrf", AG_BACKEND_ONEDNN, bar) == 0);
    return 0;
}

/* bf16: the modulated convs' products in bf16, fp32 activations. */
LEAK_CHECKED(test_restore_bf16_golden) {
    CHECK(check_precision_goldens(AG_PRECISION_BF16) == 0);
    return 0;
}

/* int8: the 3x3 modulated convs u8 x s8, each band quantised with its own range; every
 * other op fp32. */
LEAK_CHECKED(test_restore_int8_golden) {
    CHECK(check_precision_goldens(AG_PRECISION_INT8) == 0);
    return 0;
}

/* Run `model` in bf16 on the golden input of `g` into out. */
static int run_bf16(const ag_model *model, const golden *g, float *in, float *out, ag_error *err) {
    ag_engine *engine = NULL;
    ag_engine_options opt = {
        .backend = AG_BACKEND_ONEDNN, .precision = AG_PRECISION_BF16, .threads = 2};
    size_t n = (size_t)g->size * g->size * 3;
    for (size_t i = 0; i < n; i++)
        in[i] = (float)g->in_u8[i] / 127.5f - 1.0f;
    int rc = ag_engine_create(model, &opt, &engine, err);
    if (rc == AG_OK)
        rc = ag_engine_run_f32(engine, in, g->size, g->size, out, err);
    ag_engine_destroy(engine);
    return rc;
}

/* A model prepared to keep bf16 weights only: the same output as one that keeps both, less
 * memory, and fp32 engines refused in one line. */
LEAK_CHECKED(test_restore_bf16_only) {
    ag_precision_choice choice;
    if (ag_restore_precision_resolve(AG_PRECISION_BF16, NULL, &choice) != AG_OK) {
        printf("  skipped: %s\n", choice.note);
        return 0;
    }
    golden g;
    CHECK(golden_read("gfpgan64.agrf", &g) == 0);
    size_t n = (size_t)g.size * g.size * 3;
    float *in = ag_malloc(n * sizeof *in), *a = ag_malloc(n * sizeof *a);
    float *b = ag_malloc(n * sizeof *b);
    ag_model *both = NULL, *only = NULL;
    ag_error err = {0};
    int rc = in && a && b ? AG_OK : AG_E_NOMEM;
    if (rc == AG_OK)
        rc = ag_restore_model_load(RESTORE "gfpgan64_zip.pt", &both, &err);
    if (rc == AG_OK)
        rc = ag_restore_model_load(RESTORE "gfpgan64_zip.pt", &only, &err);
    size_t bytes_both = rc == AG_OK ? ag_model_get_info(only)->weight_bytes : 0;
    if (rc == AG_OK)
        rc = ag_model_prepare_precision(only, AG_PRECISION_BF16, 1, &err);
    if (rc == AG_OK)
        rc = run_bf16(both, &g, in, a, &err);
    if (rc == AG_OK)
        rc = run_bf16(only, &g, in, b, &err);
    int same = rc == AG_OK && memcmp(a, b, n * sizeof *a) == 0;
    size_t bytes_only = rc == AG_OK ? ag_model_get_info(only)->weight_bytes : 0;
    ag_engine *engine = NULL;
    ag_error refused = {0};
    ag_engine_options fp32 = {.backend = AG_BACKEND_ONEDNN, .precision = AG_PRECISION_FP32};
    int rc32 = rc == AG_OK ? ag_engine_create(only, &fp32, &engine, &refused) : AG_OK;
    ag_engine_destroy(engine);
    ag_model_destroy(both);
    ag_model_destroy(only);
    ag_free(in);
    ag_free(a);
    ag_free(b);
    ag_free(g.buf);
    CHECK_OK(rc, &err);
    printf("  weights %zu -> %zu bytes; fp32 refused: %s\n", bytes_both, bytes_only,
           refused.message);
    CHECK(same);
    CHECK(bytes_only < bytes_both); /* this small GFPGAN is mostly U-Net: full size, below */
    CHECK(rc32 == AG_E_UNSUPPORTED && strstr(refused.message, "bf16 only"));
    return 0;
}

/* The loader's own refusals, through the public entry point. */
LEAK_CHECKED(test_restore_model_load_refusals) {
    ag_model *m = NULL;
    ag_error err = {0};
    int rc = ag_restore_model_load(FIXTURES "random_zip.pt", &m, &err);
    CHECK_MSG(rc == AG_E_FORMAT && strstr(err.message, "fits neither GPEN nor GFPGAN"), "%d %s", rc,
              err.message);
    rc = ag_restore_model_load(RESTORE "missing.pt", &m, &err);
    CHECK_MSG(rc == AG_E_IO && m == NULL, "%d %s", rc, err.message);
    CHECK_OK(ag_restore_model_load(RESTORE "gpen64_zip.pt", &m, &err), &err);
    const ag_model_info *info = ag_model_get_info(m);
    int ok = !strcmp(info->kind, "restorer") && !strcmp(info->architecture, "gpen") &&
             info->min_side == 64;
    ag_model_destroy(m);
    CHECK(ok);
    return 0;
}

TEST_MAIN(TEST(test_gpen_zip_arch), TEST(test_gpen_g_ema_legacy_arch),
          TEST(test_gfpgan_params_ema_arch), TEST(test_full_size_layouts),
          TEST(test_full_size_layouts_build), TEST(test_codeformer_arch),
          TEST(test_layout_mismatches), TEST(test_bad_checkpoints), TEST(test_gpen_golden),
          TEST(test_gfpgan_golden), TEST(test_upstream_gpen), TEST(test_upstream_gfpgan),
          TEST(test_upstream_codeformer), TEST(test_upstream_codeformer_w0_w1),
          TEST(test_restore_bf16_golden), TEST(test_restore_int8_golden),
          TEST(test_restore_bf16_only), TEST(test_restore_model_load_refusals),
          TEST(test_restore_cancelled_between_bands),
          TEST(test_restore_plain_convs_winograd_shared))
