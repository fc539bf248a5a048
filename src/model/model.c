/*
 * model.c - a model built from a parsed file: its graph (given by the ONNX importer, carried
 * in the file's "graph" metadata, or AnimeGANv2's built from its weights' names by v2.c),
 * every weight bound and checked against the node that reads it, and the search path of
 * the bundled models.
 *
 * Every parameter is dequantized to fp32 into one allocation that the nodes point into.
 * Semantics that differ between model sources (norm eps, upsampling mode, minimum side)
 * come from the file's metadata, never from code. A "generator" (a style) must map an image
 * to one of the same size with 3 channels; that is checked at load (check_style_shape).
 */
#include "model_internal.h"

#include "../graph/ops.h"
#include "../util/util_internal.h"

#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define AG_MODEL_MAX_FILE_BYTES ((size_t)1 << 30)
#ifndef AG_DATADIR
#define AG_DATADIR "/usr/local/share/animegan/models"
#endif

/* ---- weights --------------------------------------------------------------------------- */

static float bf16_to_f32(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* Convert `n` elements of `ref` to fp32. I8 weights are scaled per output channel (the
 * first dimension) by the companion tensor "<conv>.scale", exactly as float(q) * scale. */
static int elements_to_f32(const ag_tensor_set *set, const ag_tensor_ref *ref, const uint8_t *src,
                           float *dst, size_t n, const char *path, ag_error *err) {
    if (ref->dtype == AG_DTYPE_F32) {
        memcpy(dst, src, n * sizeof(float));
    } else if (ref->dtype == AG_DTYPE_F16 || ref->dtype == AG_DTYPE_BF16) {
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            dst[i] = ref->dtype == AG_DTYPE_F16 ? ag_f16_to_f32(h) : bf16_to_f32(h);
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
        const void *scales;
        void *tmp;
        int rc = ag_tensor_ref_elements(scale, &scales, &tmp, err);
        if (rc != AG_OK)
            return ag_error_prefix(rc, path, err);
        size_t per_oc = n / (size_t)oc;
        for (size_t i = 0; i < n; i++) {
            float s;
            memcpy(&s, (const uint8_t *)scales + 4 * (i / per_oc), 4);
            dst[i] = (float)((const int8_t *)src)[i] * s;
        }
        ag_free(tmp);
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

/* Its shape checked, a (possibly strided) tensor gathered and converted. */
static int tensor_to_f32(const ag_tensor_set *set, const ag_tensor_ref *ref, float *dst, size_t n,
                         const char *path, ag_error *err) {
    const void *src;
    void *tmp;
    int rc = ag_tensor_ref_elements(ref, &src, &tmp, err);
    if (rc != AG_OK)
        return ag_error_prefix(rc, path, err);
    rc = elements_to_f32(set, ref, src, dst, n, path, err);
    ag_free(tmp);
    return rc;
}

static size_t ref_count(const ag_tensor_ref *ref) {
    size_t n = 1;
    for (int i = 0; i < ref->ndim; i++)
        n *= (size_t)ref->shape[i];
    return n;
}

typedef struct binder {
    const ag_tensor_set *set;
    const char *path;
    float *cursor, *end; /* the model's weight block, filled in node order */
} binder;

/* Point *dst at tensor `index` of the set, converted to fp32 and scaled (the op's bind
 * function has checked its shape). */
static int bind_tensor(binder *b, int index, float scale, const float **dst, ag_error *err) {
    if (index < 0) {
        *dst = NULL;
        return AG_OK;
    }
    const ag_tensor_ref *ref = &b->set->tensors[index];
    size_t count = ref_count(ref);
    AG_ASSERT(count <= (size_t)(b->end - b->cursor));
    int rc = tensor_to_f32(b->set, ref, b->cursor, count, b->path, err);
    if (rc)
        return rc;
    if (scale != 1.0f)
        for (size_t i = 0; i < count; i++)
            b->cursor[i] *= scale;
    *dst = b->cursor;
    b->cursor += count;
    return AG_OK;
}

/* The op's kernel layout of n's weight, which this binder wrote (so it may be rewritten),
 * through a temporary copy: loading is not a hot path. */
static int pack_weight(binder *b, ag_node *n, const ag_op_desc *d, ag_error *err) {
    size_t count = ref_count(&b->set->tensors[n->tensor[AG_T_WEIGHT]]);
    float *tmp = ag_malloc(count * sizeof(float));
    if (!tmp)
        return ag_error_set(err, AG_E_NOMEM, "%s: out of memory for %zu weights", b->path, count);
    d->pack(n, (float *)n->weight, tmp);
    ag_free(tmp);
    return AG_OK;
}

/* Check node n's tensors' shapes through its op's bind function; its inputs' channels are
 * known (nodes are checked in order). Nothing is read from the tensors yet. */
static int check_node(const ag_tensor_set *set, const char *path, ag_graph *g, ag_node *n,
                      ag_error *err) {
    const ag_op_desc *d = ag_op_desc_of(n->op);
    int c[AG_NODE_MAX_SRC] = {0};
    ag_dims dims[AG_NODE_TENSORS];
    for (int j = 0; j < AG_NODE_MAX_SRC && n->src[j] >= 0; j++)
        c[j] = g->nodes[n->src[j]].out_c;
    for (int t = 0; t < AG_NODE_TENSORS; t++) {
        const ag_tensor_ref *ref = n->tensor[t] >= 0 ? &set->tensors[n->tensor[t]] : NULL;
        dims[t].ndim = ref ? (ref->ndim > 4 ? 5 : ref->ndim) : 0;
        for (int k = 0; ref && k < ref->ndim && k < 4; k++)
            dims[t].d[k] = ref->shape[k];
        if (ref && ref->ndim == 0) /* a scalar: one value */
            dims[t].ndim = 1, dims[t].d[0] = 1;
    }
    char why[AG_OP_WHY];
    int bad = d->bind ? d->bind(n, c, dims, why) : ag_bind_per_channel(n, c[0], dims, why);
    if (bad)
        return ag_error_set(err, AG_E_FORMAT, "%s: node \"%s\" (%s): %s", path, n->name, d->name,
                            why);
    n->out_c = ag_node_channels(g, n);
    return AG_OK;
}

/* Copy node n's checked tensors into the weight block, in its op's layout. */
static int bind_node(binder *b, ag_node *n, ag_error *err) {
    const ag_op_desc *d = ag_op_desc_of(n->op);
    for (int t = 0; t < AG_NODE_TENSORS; t++) {
        float scale = t == AG_T_WEIGHT ? n->weight_scale : t == AG_T_BIAS ? n->bias_scale : 1.0f;
        int rc = bind_tensor(b, n->tensor[t], scale, &n->t[t], err);
        if (rc)
            return rc;
    }
    return d->pack && n->weight ? pack_weight(b, n, d, err) : AG_OK;
}

/* Check every node's order and tensor shapes, then copy every tensor the graph names into
 * the model's one weight block and point the nodes at it; then check the whole graph. The
 * shapes come first, so a tensor the architecture has no place for is never read. */
static int bind_graph(ag_model *m, const ag_tensor_set *set, const char *path, ag_error *err) {
    ag_graph *g = &m->graph;
    size_t total = 0;
    for (int i = 0; i < g->count; i++)
        for (int t = 0; t < AG_NODE_TENSORS; t++) {
            int index = g->nodes[i].tensor[t];
            if (index >= set->count)
                return ag_error_set(err, AG_E_FORMAT, "%s: node \"%s\" names tensor %d of %d", path,
                                    g->nodes[i].name, index, set->count);
        }
    for (int i = 0; i < g->count; i++) {
        ag_node *n = &g->nodes[i];
        int bad = (i == 0) != (n->op == AG_OP_INPUT) || n->op < 0 || n->op >= AG_OP_COUNT;
        for (int j = 0; j < AG_NODE_MAX_SRC; j++)
            bad |= n->src[j] >= i || n->src[j] < -1;
        if (bad)
            return ag_error_set(err, AG_E_FORMAT, "%s: node \"%s\" reads a node not before it",
                                path, n->name);
        int rc = check_node(set, path, g, n, err);
        if (rc)
            return rc;
        for (int t = 0; t < AG_NODE_TENSORS; t++)
            if (n->tensor[t] >= 0)
                total += ref_count(&set->tensors[n->tensor[t]]);
    }
    m->weights = ag_malloc((total ? total : 1) * sizeof(float));
    if (!m->weights)
        return ag_error_set(err, AG_E_NOMEM, "%s: out of memory for %zu weights", path, total);
    ag_advise_huge_pages(m->weights, total * sizeof(float)); /* read whole on every run */
    m->info.weight_bytes = total * sizeof(float);
    /* Parameters count each tensor once, however many nodes read it (attention's matrix). */
    for (int t = 0; t < set->count; t++) {
        int used = 0;
        for (int i = 0; i < g->count && !used; i++)
            for (int j = 0; j < AG_NODE_TENSORS; j++)
                used |= g->nodes[i].tensor[j] == t;
        if (used)
            m->info.param_count += ref_count(&set->tensors[t]);
    }
    binder b = {set, path, m->weights, m->weights + total};
    for (int i = 0; i < g->count; i++) {
        int rc = bind_node(&b, &g->nodes[i], err);
        if (rc)
            return rc;
    }
    return ag_graph_check(g, path, err);
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
static int read_semantics(ag_model *m, const ag_tensor_set *set, const char *path, ag_error *err) {
    const char *eps = ag_tensor_set_meta_get(set, "norm_eps");
    const char *resize = ag_tensor_set_meta_get(set, "resize");
    const char *multiple = ag_tensor_set_meta_get(set, "side_multiple");
    const char *min_side = ag_tensor_set_meta_get(set, "min_side");
    m->info.norm_eps = 1e-5f;
    m->info.resize = AG_RESIZE_ALIGN_CORNERS;
    m->info.side_multiple = 4;
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
    if (multiple) {
        char *end;
        long v = strtol(multiple, &end, 10);
        if (*end || v < 1 || v > 64)
            return ag_error_set(err, AG_E_FORMAT, "%s: metadata side_multiple '%s' is not 1-64",
                                path, multiple);
        m->info.side_multiple = (int)v;
    }
    m->info.scale = 1;
    m->info.pixel_max = 1.0f;
    const char *scale = ag_tensor_set_meta_get(set, "scale");
    const char *pixel_max = ag_tensor_set_meta_get(set, "pixel_max");
    if (scale) {
        char *end;
        long v = strtol(scale, &end, 10);
        if (*end || v < 1 || v > AG_UPSCALE_MAX_SCALE)
            return ag_error_set(err, AG_E_FORMAT, "%s: metadata scale '%s' is not 1-%d", path,
                                scale, AG_UPSCALE_MAX_SCALE);
        m->info.scale = (int)v;
    }
    if (pixel_max) {
        char *end;
        double v = strtod(pixel_max, &end);
        if (*end || (v != 1.0 && v != 255.0))
            return ag_error_set(err, AG_E_FORMAT, "%s: metadata pixel_max '%s' is not 1 or 255",
                                path, pixel_max);
        m->info.pixel_max = (float)v;
    }
    m->info.min_side = AG_MIN_SIDE;
    if (min_side) {
        char *end;
        long v = strtol(min_side, &end, 10);
        if (*end || v < AG_MIN_SIDE || v > 256)
            return ag_error_set(err, AG_E_FORMAT, "%s: metadata min_side '%s' is not %d-256", path,
                                min_side, AG_MIN_SIDE);
        m->info.min_side = (int)v;
    }
    return AG_OK;
}

/* The kind strings code tells apart; any other kind is AG_MODEL_OTHER. */
static const struct {
    const char *name;
    ag_model_kind role;
} model_kinds[] = {
    {"generator", AG_MODEL_GENERATOR},
    {"upscaler", AG_MODEL_UPSCALER},
    {"restorer", AG_MODEL_RESTORER},
};

static ag_model_kind kind_role(const char *kind) {
    for (size_t i = 0; i < sizeof model_kinds / sizeof model_kinds[0]; i++)
        if (!strcmp(kind, model_kinds[i].name))
            return model_kinds[i].role;
    return AG_MODEL_OTHER;
}

/* info's strings, in one allocation. */
static int set_strings(ag_model *m, const ag_tensor_set *set, const char *path, const char *format,
                       const char *architecture, ag_error *err) {
    const char *style = ag_tensor_set_meta_get(set, "style");
    const char *license = ag_tensor_set_meta_get(set, "license");
    char name[128];
    snprintf(name, sizeof name, "%s", base_name(path));
    char *dot = strrchr(name, '.');
    if (dot && dot != name)
        *dot = '\0';
    const char *kind = m->upscaler ? "upscaler" : ag_tensor_set_meta_get(set, "kind");
    const char *strs[] = {name,
                          path,
                          format,
                          architecture,
                          style ? style : "",
                          license ? license : "",
                          kind ? kind : "generator"};
    size_t len = 0;
    for (int i = 0; i < 7; i++)
        len += strlen(strs[i]) + 1;
    char *p = m->strings = ag_malloc(len);
    if (!p)
        return ag_error_set(err, AG_E_NOMEM, "%s: out of memory", path);
    const char **fields[] = {&m->info.name,         &m->info.path,  &m->info.format,
                             &m->info.architecture, &m->info.style, &m->info.license,
                             &m->info.kind};
    for (int i = 0; i < 7; i++) {
        size_t n = strlen(strs[i]) + 1;
        memcpy(p, strs[i], n);
        *fields[i] = p;
        p += n;
    }
    m->info.role = kind_role(m->info.kind);
    return AG_OK;
}

/* The graph of the file: given (ONNX), in the metadata, or AnimeGANv2's. */
static int make_graph(ag_model *m, const ag_tensor_set *set, const ag_graph *graph,
                      const char *path, const char **architecture, ag_error *err) {
    const char *arch = ag_tensor_set_meta_get(set, "architecture");
    const char *json = ag_tensor_set_meta_get(set, "graph");
    *architecture = arch ? arch : graph ? "onnx" : "animeganv2";
    if (graph) {
        m->graph = *graph;
        return AG_OK;
    }
    if (json)
        return ag_graph_from_json(json, set, path, &m->graph, err);
    if (!arch && ag_realesrgan_detect(set)) {
        ag_realesrgan_arch a;
        int rc = ag_realesrgan_graph(set, path, &a, &m->graph, err);
        *architecture = ag_realesrgan_name(a.kind);
        m->info.scale = a.scale;
        m->info.side_multiple = a.unshuffle > 1 ? a.unshuffle : 1;
        m->upscaler = 1;
        snprintf(m->detail, sizeof m->detail, "%s", a.detail);
        return rc;
    }
    if (arch && strcmp(arch, "animeganv2"))
        return ag_error_set(err, AG_E_UNSUPPORTED,
                            "%s: architecture '%s' has no graph in the file and is not supported",
                            path, arch);
    return ag_v2_graph(set, path, m->info.norm_eps, m->info.resize, &m->graph, err);
}

/* A style maps an image to an image of the same size: check that at a small size, once, so
 * a file that is something else (a detector, a super-resolution net, 20 chained 2x
 * upsamples) is refused at load with its shapes, not at every request. */
static int check_style_shape(const ag_model *m, const char *path, ag_error *err) {
    const ag_graph *g = &m->graph;
    int side = m->info.min_side > 64 ? m->info.min_side : 64;
    ag_shape *shapes = ag_malloc((size_t)g->count * sizeof *shapes);
    if (!shapes)
        return ag_error_set(err, AG_E_NOMEM, "%s: out of memory", path);
    ag_error shape_err = {0};
    int rc = AG_OK;
    const ag_shape *o = &shapes[g->outputs[0]];
    if (ag_graph_shapes(g, side, side, shapes, &shape_err) != AG_OK)
        rc = ag_error_set(err, AG_E_FORMAT, "%s: not a style: it cannot run a %dx%d image (%s)",
                          path, side, side, shape_err.message);
    else if (o->h != side || o->w != side || o->c != 3)
        rc = ag_error_set(err, AG_E_FORMAT,
                          "%s: not a style: a %dx%d image gives a %dx%dx%d output (a style "
                          "gives an image of the same size, 3 channels)",
                          path, side, side, o->w, o->h, o->c);
    ag_free(shapes);
    return rc;
}

int ag_model_build(const ag_tensor_set *set, const ag_graph *graph, const char *path,
                   const char *format, ag_model **out, ag_error *err) {
    *out = NULL;
    ag_model *m = ag_calloc(1, sizeof *m);
    if (!m)
        return ag_error_set(err, AG_E_NOMEM, "%s: out of memory", path);
    m->info.detail = m->detail;
    const char *arch = "";
    int rc = read_semantics(m, set, path, err);
    if (rc == AG_OK)
        rc = make_graph(m, set, graph, path, &arch, err);
    if (rc == AG_OK)
        rc = set_strings(m, set, path, format, arch, err);
    if (rc == AG_OK)
        rc = bind_graph(m, set, path, err);
    int generator = m->info.role == AG_MODEL_GENERATOR;
    if (rc == AG_OK && generator && m->graph.nodes[m->graph.outputs[0]].out_c != 3)
        rc = ag_error_set(err, AG_E_FORMAT, "%s: the output has %d channels, not 3", path,
                          m->graph.nodes[m->graph.outputs[0]].out_c);
    if (rc == AG_OK && generator)
        rc = check_style_shape(m, path, err);
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

/* An ONNX ModelProto starts with field 1 (ir_version, varint) or, rarely, another
 * low-numbered field; the parser decides. Tried after the formats with magic bytes. */
static int is_onnx(const uint8_t *d, size_t n, const char *label) {
    size_t len = strlen(label);
    return n >= 2 && (d[0] == 0x08 || (len > 5 && !strcasecmp(label + len - 5, ".onnx")));
}

int ag_model_load_memory(const void *data, size_t size, const char *label, ag_model **out,
                         ag_error *err) {
    *out = NULL;
    ag_tensor_set set = {0};
    const char *format = "";
    int rc;
    if (!is_safetensors(data, size) && !is_pytorch(data, size) && is_onnx(data, size, label)) {
        ag_graph *graph = ag_malloc(sizeof *graph);
        rc = graph ? ag_onnx_parse(data, size, label, &set, graph, err)
                   : ag_error_set(err, AG_E_NOMEM, "%s: out of memory", label);
        if (rc == AG_OK)
            rc = ag_model_build(&set, graph, label, "onnx", out, err);
        ag_free(graph);
        ag_tensor_set_fini(&set);
        return rc;
    }
    if (is_safetensors(data, size)) {
        format = "safetensors";
        rc = ag_safetensors_parse(data, size, label, &set, err);
    } else if (is_pytorch(data, size)) {
        format = "pytorch";
        rc = ag_pytorch_parse(data, size, label, &set, err);
    } else {
        rc = ag_error_set(err, AG_E_FORMAT,
                          "%s: not a model file (neither safetensors, a PyTorch checkpoint nor "
                          "ONNX)",
                          label);
    }
    if (rc == AG_OK && !ag_tensor_set_meta_get(&set, "graph") && ag_realesrgan_detect(&set))
        rc = ag_realesrgan_prepare(&set, label, err);
    if (rc == AG_OK)
        rc = ag_model_build(&set, NULL, label, format, out, err);
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
           (n > 12 && !strcasecmp(s + n - 12, ".safetensors")) ||
           (n > 5 && !strcasecmp(s + n - 5, ".onnx"));
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

static int compare_names(const void *a, const void *b) {
    return strcmp(a, b);
}

/* Bundled files listed at most: 14 with the upscalers' eight. */
#define MAX_BUNDLED 48

/* Names live in static storage, sorted: call from one thread (start-up, the CLI). */
int ag_model_list_bundled(const char **names, int max) {
    static char found[MAX_BUNDLED][64];
    char dirs[8][PATH_MAX];
    int n = model_dirs(dirs, 8), count = 0;
    for (int i = 0; i < n; i++) {
        DIR *dir = opendir(dirs[i]);
        struct dirent *e;
        while (dir && (e = readdir(dir)) != NULL && count < MAX_BUNDLED) {
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
    qsort(found, (size_t)count, sizeof found[0], compare_names);
    for (int i = 0; i < count && i < max; i++)
        names[i] = found[i];
    return count;
}

/* ---- bf16 copies ---------------------------------------------------------------------- */

/* Engines are made on many threads over one model: one lock for every model's copies, taken
 * only when an engine is created. */
static pthread_mutex_t bf16_lock = PTHREAD_MUTEX_INITIALIZER;

static int has_bf16_copy(const ag_node *n) {
    return n->op == AG_OP_MODCONV;
}

static size_t bf16_count(const ag_node *n) {
    return (size_t)n->in_c * n->out_c * n->k * n->k;
}

/* Bytes of node n's copy and sums in the block, each a round 64. */
static size_t bf16_bytes(const ag_node *n) {
    size_t w = (sizeof(uint16_t) * bf16_count(n) + 63) & ~(size_t)63;
    return w + ((sizeof(float) * (size_t)n->in_c * n->out_c + 63) & ~(size_t)63);
}

/* fp32 to bf16, rounding to nearest even (weights are finite). */
static uint16_t to_bf16(float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* n's packed weight (IC, K*K, OC) into bf16 at w, and sq[ic * OC + oc] = Σ_t w[ic, t, oc]²
 * (of the fp32 weight, in double) for the demodulation. */
static void make_copy(const ag_node *n, uint16_t *w, float *sq) {
    int IC = n->in_c, OC = n->out_c, KK = n->k * n->k;
    for (size_t j = 0; j < bf16_count(n); j++)
        w[j] = to_bf16(n->weight[j]);
    for (int ic = 0; ic < IC; ic++)
        for (int oc = 0; oc < OC; oc++) {
            double acc = 0.0;
            for (int t = 0; t < KK; t++) {
                double v = (double)n->weight[((size_t)ic * KK + t) * OC + oc];
                acc += v * v;
            }
            sq[(size_t)ic * OC + oc] = (float)acc;
        }
}

static int make_bf16(ag_model *m, ag_error *err) {
    const ag_graph *g = &m->graph;
    size_t total = 64;
    for (int i = 0; i < g->count; i++)
        total += has_bf16_copy(&g->nodes[i]) ? bf16_bytes(&g->nodes[i]) : 0;
    m->bf16_block = ag_malloc(total);
    ag_advise_huge_pages(m->bf16_block, m->bf16_block ? total : 0);
    const uint16_t **of = ag_calloc((size_t)g->count, sizeof *of);
    const float **sq_of = ag_calloc((size_t)g->count, sizeof *sq_of);
    if (!m->bf16_block || !of || !sq_of) {
        ag_free(m->bf16_block);
        m->bf16_block = NULL;
        ag_free((void *)of);
        ag_free((void *)sq_of);
        return ag_error_set(err, AG_E_NOMEM, "out of memory for %zu MB of bf16 weights",
                            total >> 20);
    }
    uint8_t *at = (uint8_t *)(((uintptr_t)m->bf16_block + 63) & ~(uintptr_t)63);
    for (int i = 0; i < g->count; i++) {
        const ag_node *n = &g->nodes[i];
        if (!has_bf16_copy(n))
            continue;
        size_t w = (sizeof(uint16_t) * bf16_count(n) + 63) & ~(size_t)63;
        make_copy(n, (uint16_t *)at, (float *)(at + w));
        of[i] = (const uint16_t *)at;
        sq_of[i] = (const float *)(at + w);
        at += bf16_bytes(n);
    }
    m->demod_sq_of = sq_of;
    m->bf16_of = of;
    return AG_OK;
}

int ag_model_bf16_weights(const ag_model *model, ag_error *err) {
    ag_model *m = (ag_model *)model; /* the copies are made once, under the lock */
    pthread_mutex_lock(&bf16_lock);
    int rc = m->bf16_of ? AG_OK : make_bf16(m, err);
    pthread_mutex_unlock(&bf16_lock);
    return rc;
}

/*
 * The weight block without the modulated convs' fp32 weights (the bf16 copies replace
 * them): the nodes' tensors were bound in node and slot order, each right after the one
 * before, so a tensor runs from its pointer to the next one bound (or the block's end).
 */
static int drop_fp32(ag_model *m, ag_error *err) {
    ag_graph *g = &m->graph;
    float *end = m->weights + m->info.weight_bytes / sizeof(float);
    size_t keep = 0;
    const float *next = end;
    for (int i = g->count - 1; i >= 0; i--) /* backwards: each tensor's end is known */
        for (int t = AG_NODE_TENSORS - 1; t >= 0; t--) {
            const float *p = g->nodes[i].t[t];
            if (!p)
                continue;
            if (!(has_bf16_copy(&g->nodes[i]) && t == AG_T_WEIGHT))
                keep += (size_t)(next - p);
            next = p;
        }
    float *block = ag_malloc((keep ? keep : 1) * sizeof(float));
    if (!block)
        return ag_error_set(err, AG_E_NOMEM, "out of memory for %zu MB of weights",
                            (keep * sizeof(float)) >> 20);
    ag_advise_huge_pages(block, keep * sizeof(float));
    float *at = block + keep;
    next = end;
    for (int i = g->count - 1; i >= 0; i--)
        for (int t = AG_NODE_TENSORS - 1; t >= 0; t--) {
            const float *p = g->nodes[i].t[t];
            if (!p)
                continue;
            size_t count = (size_t)(next - p);
            next = p;
            if (has_bf16_copy(&g->nodes[i]) && t == AG_T_WEIGHT) {
                g->nodes[i].t[t] = NULL;
                continue;
            }
            at -= count;
            memcpy(at, p, count * sizeof(float));
            g->nodes[i].t[t] = at;
        }
    ag_free(m->weights);
    m->weights = block;
    m->info.weight_bytes = keep * sizeof(float) + ag_model_bf16_bytes(m);
    m->fp32_dropped = 1;
    return AG_OK;
}

int ag_model_prepare_precision(const ag_model *model, ag_precision precision, int only,
                               ag_error *err) {
    ag_model *m = (ag_model *)model;
    int any = 0;
    for (int i = 0; i < m->graph.count; i++)
        any |= has_bf16_copy(&m->graph.nodes[i]);
    if (precision != AG_PRECISION_BF16 || !any)
        return AG_OK;
    int rc = ag_model_bf16_weights(model, err);
    pthread_mutex_lock(&bf16_lock);
    if (rc == AG_OK && only && !m->fp32_dropped)
        rc = drop_fp32(m, err);
    pthread_mutex_unlock(&bf16_lock);
    return rc;
}

size_t ag_model_bf16_bytes(const ag_model *model) {
    size_t total = 0;
    for (int i = 0; model->bf16_of && i < model->graph.count; i++)
        if (model->bf16_of[i])
            total += bf16_bytes(&model->graph.nodes[i]);
    return total;
}

/* ---- weights in an engine's layout, shared ---------------------------------------------- */

typedef struct ag_shared_weights {
    void *layout; /* ag_malloc'ed copy of the request's */
    void *block;  /* the weights, at `data` within */
    void *data;
    size_t bytes;
} ag_shared_weights;

static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;

static int make_shared(ag_shared_weights *s, const ag_layout_request *r, ag_error *err) {
    s->layout = ag_malloc(r->layout_bytes);
    s->block = ag_malloc(r->bytes + 64);
    if (!s->layout || !s->block) {
        ag_free(s->layout);
        ag_free(s->block);
        *s = (ag_shared_weights){0};
        return ag_error_set(err, AG_E_NOMEM, "out of memory for %zu MB of prepared weights",
                            r->bytes >> 20);
    }
    ag_advise_huge_pages(s->block, r->bytes + 64);
    memcpy(s->layout, r->layout, r->layout_bytes);
    s->data = (void *)(((uintptr_t)s->block + 63) & ~(uintptr_t)63);
    s->bytes = r->bytes;
    int rc = r->fill(r->ctx, s->data, err);
    if (rc) {
        ag_free(s->layout);
        ag_free(s->block);
        *s = (ag_shared_weights){0};
    }
    return rc;
}

int ag_model_shared_weights(const ag_model *model, int node, const ag_layout_request *r,
                            const void **out, ag_error *err) {
    ag_model *m = (ag_model *)model; /* made once per node, under the lock */
    *out = NULL;
    int rc = AG_OK;
    pthread_mutex_lock(&shared_lock);
    if (!m->shared_of)
        m->shared_of = ag_calloc((size_t)m->graph.count, sizeof *m->shared_of);
    if (!m->shared_of)
        rc = ag_error_set(err, AG_E_NOMEM, "out of memory");
    ag_shared_weights *s = rc == AG_OK ? &m->shared_of[node] : NULL;
    if (s && !s->data)
        rc = make_shared(s, r, err);
    if (rc == AG_OK && s->bytes == r->bytes && r->same(s->layout, r->layout))
        *out = s->data;
    pthread_mutex_unlock(&shared_lock);
    return rc;
}

size_t ag_model_shared_bytes(const ag_model *model) {
    size_t total = 0;
    for (int i = 0; model->shared_of && i < model->graph.count; i++)
        total += model->shared_of[i].bytes;
    return total;
}

void ag_model_destroy(ag_model *model) {
    if (!model)
        return;
    for (int i = 0; model->shared_of && i < model->graph.count; i++) {
        ag_free(model->shared_of[i].layout);
        ag_free(model->shared_of[i].block);
    }
    ag_free(model->shared_of);
    ag_free(model->bf16_block);
    ag_free((void *)model->bf16_of);
    ag_free((void *)model->demod_sq_of);
    ag_free(model->weights);
    ag_free(model->strings);
    ag_free(model);
}

const ag_model_info *ag_model_get_info(const ag_model *model) {
    return &model->info;
}
