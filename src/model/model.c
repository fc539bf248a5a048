/*
 * model.c - the AnimeGANv2 generator's architecture, built from a parsed model file.
 *
 * The architecture is fixed (bryandlee/animegan2-pytorch's Generator, which equals the
 * original TensorFlow network); channel counts are read from the weights' shapes and checked
 * to chain. Every parameter is dequantized to fp32 into one allocation that the layers point
 * into. Semantics that differ between model sources (norm eps, upsampling mode) come from the
 * file's metadata, never from code.
 */
#include "model_internal.h"

#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define AG_MODEL_MAX_FILE_BYTES ((size_t)1 << 30)
#ifndef AG_DATADIR
#define AG_DATADIR "/usr/local/share/animegan/models"
#endif

/* ---- architecture ---------------------------------------------------------------------- */

/* One row of the architecture table: where a conv's weights live and what follows it. */
typedef struct layer_spec {
    const char *conv; /* state_dict prefix of the conv */
    const char *norm; /* prefix of the norm after it, NULL for none */
    int k, stride, pad, has_bias;
    int depthwise;
    ag_act act;
    ag_resize_target resize_before;
    ag_residual residual;
    int is_block_a_end;
} layer_spec;

#define CNL(conv, norm, k, stride, pad)                                                            \
    { conv, norm, k, stride, pad, 0, 0, AG_ACT_LRELU, 0, 0, 0 }
#define IRB(p, res_save, res_add)                                                                  \
    {p ".layers.0.1", p ".layers.0.2", 1, 1, 0, 0, 0, AG_ACT_LRELU, 0, res_save, 0},               \
        {p ".layers.1.1", p ".layers.1.2", 3, 1, 1, 1, 1, AG_ACT_LRELU, 0, 0, 0}, {                \
        p ".layers.2", p ".layers.3", 1, 1, 0, 0, 0, AG_ACT_NONE, 0, res_add, 0                    \
    }

/* pad -1 means the stride-2 layers' (0,1,0,1): reflect only the bottom row and right column. */
static const layer_spec generator_spec[] = {
    CNL("block_a.0.1", "block_a.0.2", 7, 1, 3),
    CNL("block_a.1.1", "block_a.1.2", 3, 2, -1),
    {"block_a.2.1", "block_a.2.2", 3, 1, 1, 0, 0, AG_ACT_LRELU, 0, 0, 1},
    CNL("block_b.0.1", "block_b.0.2", 3, 2, -1),
    CNL("block_b.1.1", "block_b.1.2", 3, 1, 1),
    CNL("block_c.0.1", "block_c.0.2", 3, 1, 1),
    IRB("block_c.1", 0, 0),
    IRB("block_c.2", AG_RESIDUAL_SAVE, AG_RESIDUAL_ADD),
    IRB("block_c.3", AG_RESIDUAL_SAVE, AG_RESIDUAL_ADD),
    IRB("block_c.4", AG_RESIDUAL_SAVE, AG_RESIDUAL_ADD),
    CNL("block_c.5.1", "block_c.5.2", 3, 1, 1),
    {"block_d.0.1", "block_d.0.2", 3, 1, 1, 0, 0, AG_ACT_LRELU, AG_RESIZE_TO_HALF, 0, 0},
    CNL("block_d.1.1", "block_d.1.2", 3, 1, 1),
    {"block_e.0.1", "block_e.0.2", 3, 1, 1, 0, 0, AG_ACT_LRELU, AG_RESIZE_TO_INPUT, 0, 0},
    CNL("block_e.1.1", "block_e.1.2", 3, 1, 1),
    CNL("block_e.2.1", "block_e.2.2", 7, 1, 3),
    {"out_layer.0", NULL, 1, 1, 0, 0, 0, AG_ACT_TANH, 0, 0, 0},
};
#define GENERATOR_LAYERS ((int)(sizeof generator_spec / sizeof generator_spec[0]))

/* ---- weights --------------------------------------------------------------------------- */

static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    float v;
    if (exp == 0)
        v = ldexpf((float)mant, -24);
    else if (exp == 31)
        v = mant ? NAN : INFINITY;
    else
        v = ldexpf((float)(mant | 0x400), (int)exp - 25);
    return sign ? -v : v;
}

static float bf16_to_f32(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* Convert `n` elements of `ref` to fp32. I8 weights are scaled per output channel (the
 * first dimension) by the companion tensor "<conv>.scale", exactly as float(q) * scale. */
static int tensor_to_f32(const ag_tensor_set *set, const ag_tensor_ref *ref, float *dst, size_t n,
                         const char *path, ag_error *err) {
    const uint8_t *src = ref->data;
    if (ref->dtype == AG_DTYPE_F32) {
        memcpy(dst, src, n * sizeof(float));
    } else if (ref->dtype == AG_DTYPE_F16 || ref->dtype == AG_DTYPE_BF16) {
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            dst[i] = ref->dtype == AG_DTYPE_F16 ? f16_to_f32(h) : bf16_to_f32(h);
        }
    } else if (ref->dtype == AG_DTYPE_F64) {
        for (size_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, src + 8 * i, 8);
            dst[i] = (float)d;
        }
    } else if (ref->dtype == AG_DTYPE_I8) {
        /* "<conv>.weight" is scaled by "<conv>.scale". */
        char scale_name[AG_TENSOR_NAME_BYTES + 8];
        size_t len = strlen(ref->name);
        if (len > 7 && !strcmp(ref->name + len - 7, ".weight"))
            len -= 7;
        snprintf(scale_name, sizeof scale_name, "%.*s.scale", (int)len, ref->name);
        const ag_tensor_ref *scale = ag_tensor_set_find(set, scale_name);
        int64_t oc = ref->shape[0];
        if (!scale || scale->dtype != AG_DTYPE_F32 || scale->ndim != 1 || scale->shape[0] != oc)
            return ag_error_set(err, AG_E_FORMAT,
                                "%s: int8 tensor '%s' needs an F32 '%s' of [%lld]", path, ref->name,
                                scale_name, (long long)oc);
        size_t per_oc = n / (size_t)oc;
        for (size_t i = 0; i < n; i++) {
            float s;
            memcpy(&s, (const uint8_t *)scale->data + 4 * (i / per_oc), 4);
            dst[i] = (float)((const int8_t *)src)[i] * s;
        }
    } else {
        return ag_error_set(err, AG_E_UNSUPPORTED, "%s: tensor '%s' has an unsupported dtype", path,
                            ref->name);
    }
    for (size_t i = 0; i < n; i++)
        if (!isfinite(dst[i]))
            return ag_error_set(err, AG_E_FORMAT, "%s: tensor '%s' holds a NaN or infinity", path,
                                ref->name);
    return AG_OK;
}

/* Find "<prefix>.<suffix>" and check its shape equals dims[0..ndim). A dim of -1 is read
 * from the file (and returned through dims). */
static int find_tensor(const ag_tensor_set *set, const char *prefix, const char *suffix, int ndim,
                       int64_t *dims, const char *path, const ag_tensor_ref **out, ag_error *err) {
    char name[AG_TENSOR_NAME_BYTES];
    snprintf(name, sizeof name, "%s.%s", prefix, suffix);
    const ag_tensor_ref *ref = ag_tensor_set_find(set, name);
    if (!ref)
        return ag_error_set(err, AG_E_FORMAT,
                            "%s: tensor '%s' is missing (not an AnimeGANv2 generator?)", path,
                            name);
    int ok = ref->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) {
        if (dims[i] < 0)
            dims[i] = ref->shape[i];
        ok = ref->shape[i] == dims[i] && dims[i] > 0 && dims[i] <= 4096;
    }
    if (!ok)
        return ag_error_set(err, AG_E_FORMAT, "%s: tensor '%s' has an unexpected shape", path,
                            name);
    *out = ref;
    return AG_OK;
}

/* The parameters a layer needs, located in the set. */
typedef struct layer_refs {
    const ag_tensor_ref *weight, *bias, *gamma, *beta;
} layer_refs;

static int locate_layer(const ag_tensor_set *set, const layer_spec *spec, int in_c, ag_layer *layer,
                        layer_refs *refs, const char *path, ag_error *err) {
    int64_t w_dims[4] = {-1, spec->depthwise ? 1 : in_c, spec->k, spec->k};
    int rc = find_tensor(set, spec->conv, "weight", 4, w_dims, path, &refs->weight, err);
    if (rc)
        return rc;
    int out_c = (int)w_dims[0];
    if (spec->depthwise && out_c != in_c)
        return ag_error_set(err, AG_E_FORMAT, "%s: depthwise '%s' has %d outputs for %d inputs",
                            path, spec->conv, out_c, in_c);
    int64_t c_dims[1] = {out_c};
    if (spec->has_bias &&
        (rc = find_tensor(set, spec->conv, "bias", 1, c_dims, path, &refs->bias, err)))
        return rc;
    if (spec->norm &&
        ((rc = find_tensor(set, spec->norm, "weight", 1, c_dims, path, &refs->gamma, err)) ||
         (rc = find_tensor(set, spec->norm, "bias", 1, c_dims, path, &refs->beta, err))))
        return rc;
    snprintf(layer->name, sizeof layer->name, "%s", spec->conv);
    layer->in_c = in_c;
    layer->out_c = out_c;
    layer->k = spec->k;
    layer->stride = spec->stride;
    layer->groups = spec->depthwise ? in_c : 1;
    int p = spec->pad < 0 ? 0 : spec->pad;
    layer->pad_top = layer->pad_left = p;
    layer->pad_bottom = layer->pad_right = spec->pad < 0 ? 1 : p;
    layer->act = spec->act;
    layer->resize_before = spec->resize_before;
    layer->residual = spec->residual;
    layer->is_block_a_end = spec->is_block_a_end;
    return AG_OK;
}

static size_t ref_count(const ag_tensor_ref *ref) {
    size_t n = 1;
    for (int i = 0; ref && i < ref->ndim; i++)
        n *= (size_t)ref->shape[i];
    return ref ? n : 0;
}

/* Copy the located tensors into the model's single weight allocation. */
static int load_weights(ag_model *m, const ag_tensor_set *set, layer_refs *refs, const char *path,
                        ag_error *err) {
    size_t total = 0;
    for (int i = 0; i < m->layer_count; i++)
        total += ref_count(refs[i].weight) + ref_count(refs[i].bias) + ref_count(refs[i].gamma) +
                 ref_count(refs[i].beta);
    m->weights = ag_malloc(total * sizeof(float));
    if (!m->weights)
        return ag_error_set(err, AG_E_NOMEM, "%s: out of memory for %zu weights", path, total);
    m->info.param_count = total;
    m->info.weight_bytes = total * sizeof(float);
    float *cursor = m->weights;
    for (int i = 0; i < m->layer_count; i++) {
        const ag_tensor_ref *srcs[4] = {refs[i].weight, refs[i].bias, refs[i].gamma, refs[i].beta};
        const float **dsts[4] = {&m->layers[i].weight, &m->layers[i].bias, &m->layers[i].gamma,
                                 &m->layers[i].beta};
        for (int j = 0; j < 4; j++) {
            if (!srcs[j])
                continue;
            size_t n = ref_count(srcs[j]);
            int rc = tensor_to_f32(set, srcs[j], cursor, n, path, err);
            if (rc)
                return rc;
            *dsts[j] = cursor;
            cursor += n;
        }
    }
    return AG_OK;
}

/* ---- metadata -------------------------------------------------------------------------- */

int ag_resize_mode_parse(const char *text) {
    if (!text)
        return -1;
    if (!strcmp(text, "asymmetric"))
        return AG_RESIZE_ASYMMETRIC;
    if (!strcmp(text, "align-corners"))
        return AG_RESIZE_ALIGN_CORNERS;
    if (!strcmp(text, "half-pixel"))
        return AG_RESIZE_HALF_PIXEL;
    return -1;
}

const char *ag_resize_mode_name(ag_resize_mode mode) {
    switch (mode) {
    case AG_RESIZE_ASYMMETRIC: return "asymmetric";
    case AG_RESIZE_ALIGN_CORNERS: return "align-corners";
    case AG_RESIZE_HALF_PIXEL: return "half-pixel";
    default: return "default";
    }
}

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* Semantics: safetensors files carry them; PyTorch checkpoints are bryandlee's, whose
 * torch.hub / face2paint path uses GroupNorm eps 1e-5 and align_corners=True. */
static int read_semantics(ag_model *m, const ag_tensor_set *set, const char *path,
                          const char *format, ag_error *err) {
    const char *eps = ag_tensor_set_meta_get(set, "norm_eps");
    const char *resize = ag_tensor_set_meta_get(set, "resize");
    m->info.norm_eps = 1e-5f;
    m->info.resize = AG_RESIZE_ALIGN_CORNERS;
    if (eps) {
        char *end;
        double v = strtod(eps, &end);
        if (*end || !(v > 0 && v < 1))
            return ag_error_set(err, AG_E_FORMAT, "%s: metadata norm_eps '%s' is not in (0, 1)",
                                path, eps);
        m->info.norm_eps = (float)v;
    }
    if (resize) {
        int mode = ag_resize_mode_parse(resize);
        if (mode < 0)
            return ag_error_set(err, AG_E_FORMAT, "%s: metadata resize '%s' is unknown", path,
                                resize);
        m->info.resize = (ag_resize_mode)mode;
    }
    const char *arch = ag_tensor_set_meta_get(set, "architecture");
    if (arch && strcmp(arch, "animeganv2"))
        return ag_error_set(err, AG_E_UNSUPPORTED, "%s: architecture '%s' is not supported", path,
                            arch);
    const char *style = ag_tensor_set_meta_get(set, "style");
    const char *license = ag_tensor_set_meta_get(set, "license");
    char name[128];
    snprintf(name, sizeof name, "%s", base_name(path));
    char *dot = strrchr(name, '.');
    if (dot && dot != name)
        *dot = '\0';
    const char *strs[] = {
        name, path, format, "animeganv2", style ? style : "", license ? license : ""};
    size_t len = 0;
    for (int i = 0; i < 6; i++)
        len += strlen(strs[i]) + 1;
    char *p = m->strings = ag_malloc(len);
    if (!p)
        return ag_error_set(err, AG_E_NOMEM, "%s: out of memory", path);
    const char **fields[] = {&m->info.name,         &m->info.path,  &m->info.format,
                             &m->info.architecture, &m->info.style, &m->info.license};
    for (int i = 0; i < 6; i++) {
        size_t n = strlen(strs[i]) + 1;
        memcpy(p, strs[i], n);
        *fields[i] = p;
        p += n;
    }
    return AG_OK;
}

int ag_model_build(const ag_tensor_set *set, const char *path, const char *format, ag_model **out,
                   ag_error *err) {
    *out = NULL;
    ag_model *m = ag_calloc(1, sizeof *m);
    layer_refs refs[AG_MAX_LAYERS] = {0};
    if (!m)
        return ag_error_set(err, AG_E_NOMEM, "%s: out of memory", path);
    int rc = read_semantics(m, set, path, format, err);
    int in_c = 3;
    for (int i = 0; rc == AG_OK && i < GENERATOR_LAYERS; i++) {
        rc = locate_layer(set, &generator_spec[i], in_c, &m->layers[i], &refs[i], path, err);
        in_c = m->layers[i].out_c;
        m->layer_count = i + 1;
    }
    if (rc == AG_OK && in_c != 3)
        rc = ag_error_set(err, AG_E_FORMAT, "%s: output layer has %d channels, not 3", path, in_c);
    for (int i = 0; rc == AG_OK && i < m->layer_count; i++)
        if (m->layers[i].residual == AG_RESIDUAL_ADD && m->layers[i].out_c != m->layers[i - 2].in_c)
            rc = ag_error_set(err, AG_E_FORMAT, "%s: residual block '%s' changes channels", path,
                              m->layers[i].name);
    if (rc == AG_OK)
        rc = load_weights(m, set, refs, path, err);
    if (rc) {
        ag_model_destroy(m);
        return rc;
    }
    *out = m;
    return AG_OK;
}

/* ---- loading --------------------------------------------------------------------------- */

static int is_pytorch(const uint8_t *d, size_t n) {
    return (n >= 4 && !memcmp(d, "PK\x03\x04", 4)) || (n >= 2 && d[0] == 0x80 && d[1] <= 5);
}

static int is_safetensors(const uint8_t *d, size_t n) {
    if (n < 10)
        return 0;
    uint64_t header_len;
    memcpy(&header_len, d, 8);
    return header_len >= 2 && header_len <= n - 8 && d[8] == '{';
}

int ag_model_load_memory(const void *data, size_t size, const char *label, ag_model **out,
                         ag_error *err) {
    *out = NULL;
    ag_tensor_set set = {0};
    const char *format = "";
    int rc;
    if (is_safetensors(data, size)) {
        format = "safetensors";
        rc = ag_safetensors_parse(data, size, label, &set, err);
    } else if (is_pytorch(data, size)) {
        format = "pytorch";
        rc = ag_pytorch_parse(data, size, label, &set, err);
    } else {
        rc = ag_error_set(err, AG_E_FORMAT,
                          "%s: not a model file (neither safetensors nor a PyTorch checkpoint)",
                          label);
    }
    if (rc == AG_OK)
        rc = ag_model_build(&set, label, format, out, err);
    ag_tensor_set_fini(&set);
    return rc;
}

static int load_path(const char *path, ag_model **out, ag_error *err) {
    uint8_t *data;
    size_t size;
    int rc = ag_read_file(path, AG_MODEL_MAX_FILE_BYTES, &data, &size, err);
    if (rc)
        return rc;
    rc = ag_model_load_memory(data, size, path, out, err);
    ag_free(data);
    return rc;
}

/* The directories bundled models are looked up in, in order; returns the count. */
static int model_dirs(char dirs[][PATH_MAX], int max) {
    int n = 0;
    const char *env = getenv("ANIMEGAN_MODEL_PATH");
    while (env && *env && n < max) {
        size_t len = strcspn(env, ":");
        if (len > 0 && len < PATH_MAX)
            snprintf(dirs[n++], PATH_MAX, "%.*s", (int)len, env);
        env += len + (env[len] == ':');
    }
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0 && n + 2 <= max) {
        exe[len] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = '\0';
        snprintf(dirs[n++], PATH_MAX, "%.*s/../models", PATH_MAX - 16, exe);
        snprintf(dirs[n++], PATH_MAX, "%.*s/../share/animegan/models", PATH_MAX - 32, exe);
    }
    if (n < max)
        snprintf(dirs[n++], PATH_MAX, "%s", AG_DATADIR);
    return n;
}

static int looks_like_path(const char *s) {
    size_t n = strlen(s);
    return strchr(s, '/') || (n > 3 && !strcasecmp(s + n - 3, ".pt")) ||
           (n > 4 && !strcasecmp(s + n - 4, ".pth")) ||
           (n > 12 && !strcasecmp(s + n - 12, ".safetensors"));
}

int ag_model_load(const char *name_or_path, ag_model **out, ag_error *err) {
    *out = NULL;
    if (!name_or_path || !*name_or_path)
        return ag_error_set(err, AG_E_ARG, "empty model name");
    if (looks_like_path(name_or_path))
        return load_path(name_or_path, out, err);
    if (strlen(name_or_path) > 64 ||
        strspn(name_or_path, "abcdefghijklmnopqrstuvwxyz"
                             "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != strlen(name_or_path))
        return ag_error_set(err, AG_E_NOTFOUND, "unknown model '%.64s'", name_or_path);
    char dirs[8][PATH_MAX];
    int n = model_dirs(dirs, 8);
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX + 80];
        snprintf(path, sizeof path, "%.*s/%s.safetensors", PATH_MAX - 1, dirs[i], name_or_path);
        if (access(path, R_OK) == 0)
            return load_path(path, out, err);
    }
    return ag_error_set(err, AG_E_NOTFOUND,
                        "unknown model '%s' (not found in the model path; see `animegan models`)",
                        name_or_path);
}

/* Names live in static storage: call from one thread (start-up, the CLI). */
int ag_model_list_bundled(const char **names, int max) {
    static char found[16][64];
    char dirs[8][PATH_MAX];
    int n = model_dirs(dirs, 8), count = 0;
    for (int i = 0; i < n; i++) {
        DIR *dir = opendir(dirs[i]);
        struct dirent *e;
        while (dir && (e = readdir(dir)) != NULL && count < 16) {
            size_t len = strlen(e->d_name);
            if (len <= 12 || len - 12 >= 64 || strcmp(e->d_name + len - 12, ".safetensors"))
                continue;
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)(len - 12), e->d_name);
            int dup = 0;
            for (int j = 0; j < count; j++)
                dup |= !strcmp(found[j], name);
            if (!dup)
                snprintf(found[count++], sizeof found[0], "%s", name);
        }
        if (dir)
            closedir(dir);
    }
    for (int i = 0; i < count && i < max; i++)
        names[i] = found[i];
    return count;
}

void ag_model_destroy(ag_model *model) {
    if (!model)
        return;
    ag_free(model->weights);
    ag_free(model->strings);
    ag_free(model);
}

const ag_model_info *ag_model_get_info(const ag_model *model) {
    return &model->info;
}
