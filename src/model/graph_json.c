/*
 * graph_json.c - the graph of a project model file, from the JSON in its "graph" metadata
 * (docs/graph.md). The text comes from an untrusted file: cJSON parses it (bounded by the
 * safetensors header limit), every field is type- and range-checked here, and tensors are
 * looked up by name in the file's own set.
 */
#include "model_internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct json_ctx {
    const ag_tensor_set *set;
    const char *path;
    ag_graph *g;
    ag_error *err;
} json_ctx;

static int fail(json_ctx *c, const char *node, const char *why) {
    return ag_error_set(c->err, AG_E_FORMAT, "%s: graph node \"%.64s\": %s", c->path, node, why);
}

/* An integer field in [lo, hi]; `def` when absent. */
static int get_int(json_ctx *c, const cJSON *obj, const char *node, const char *key, int def,
                   int lo, int hi, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) {
        *out = def;
        return AG_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi) {
        char why[96];
        snprintf(why, sizeof why, "'%s' is not an integer in [%d, %d]", key, lo, hi);
        return fail(c, node, why);
    }
    *out = (int)v->valuedouble;
    return AG_OK;
}

static int get_float(json_ctx *c, const cJSON *obj, const char *node, const char *key, float def,
                     float *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) {
        *out = def;
        return AG_OK;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || fabs(v->valuedouble) > 1e6) {
        char why[64];
        snprintf(why, sizeof why, "'%s' is not a number", key);
        return fail(c, node, why);
    }
    *out = (float)v->valuedouble;
    return AG_OK;
}

/* A string field, NULL when absent; AG_E_FORMAT when present but not a string. */
static int get_string(json_ctx *c, const cJSON *obj, const char *node, const char *key,
                      const char **out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out = NULL;
    if (!v)
        return AG_OK;
    if (!cJSON_IsString(v)) {
        char why[64];
        snprintf(why, sizeof why, "'%s' is not a string", key);
        return fail(c, node, why);
    }
    *out = v->valuestring;
    return AG_OK;
}

/* Tensor field `key` into n->tensor[slot]. */
static int get_tensor(json_ctx *c, const cJSON *obj, ag_node *n, const char *key, int slot) {
    const char *name;
    int rc = get_string(c, obj, n->name, key, &name);
    if (rc || !name)
        return rc;
    const ag_tensor_ref *ref = ag_tensor_set_find(c->set, name);
    if (!ref) {
        char why[160];
        snprintf(why, sizeof why, "tensor '%.96s' is not in the file", name);
        return fail(c, n->name, why);
    }
    n->tensor[slot] = (int)(ref - c->set->tensors);
    return AG_OK;
}

static int get_inputs(json_ctx *c, const cJSON *obj, ag_node *n) {
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(obj, "in");
    int count = cJSON_IsArray(in) ? cJSON_GetArraySize(in) : -1;
    if (count < 1 || count > 2)
        return fail(c, n->name, "'in' is not a list of one or two node names");
    for (int j = 0; j < count; j++) {
        const cJSON *v = cJSON_GetArrayItem(in, j);
        int index = cJSON_IsString(v) ? ag_graph_find(c->g, v->valuestring) : -1;
        if (index < 0)
            return fail(c, n->name, "an input is not the name of an earlier node");
        n->in[j] = index;
    }
    return AG_OK;
}

static int get_pad(json_ctx *c, const cJSON *obj, ag_node *n) {
    const cJSON *pad = cJSON_GetObjectItemCaseSensitive(obj, "pad");
    if (!pad)
        return AG_OK;
    if (!cJSON_IsArray(pad) || cJSON_GetArraySize(pad) != 4)
        return fail(c, n->name, "'pad' is not [top, bottom, left, right]");
    for (int j = 0; j < 4; j++) {
        const cJSON *v = cJSON_GetArrayItem(pad, j);
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 10 ||
            v->valuedouble != floor(v->valuedouble))
            return fail(c, n->name, "a padding is not an integer in [0, 10]");
        n->pad[j] = (int)v->valuedouble;
    }
    return AG_OK;
}

/* The enumerated string attributes: pad_mode, mode, axis. */
static int get_enums(json_ctx *c, const cJSON *obj, ag_node *n) {
    const char *pad_mode, *mode, *axis;
    int rc;
    if ((rc = get_string(c, obj, n->name, "pad_mode", &pad_mode)) ||
        (rc = get_string(c, obj, n->name, "mode", &mode)) ||
        (rc = get_string(c, obj, n->name, "axis", &axis)))
        return rc;
    if (pad_mode && strcmp(pad_mode, "reflect") && strcmp(pad_mode, "zero"))
        return fail(c, n->name, "'pad_mode' is neither reflect nor zero");
    n->pad_mode = pad_mode && !strcmp(pad_mode, "zero") ? AG_PAD_ZERO : AG_PAD_REFLECT;
    if (mode) {
        int m = ag_resize_mode_parse(mode);
        if (m < 0)
            return fail(c, n->name, "'mode' is not a resize mode");
        n->mode = (ag_resize_mode)m;
    }
    if (axis && strcmp(axis, "spatial") && strcmp(axis, "channel"))
        return fail(c, n->name, "'axis' is neither spatial nor channel");
    n->axis = axis && !strcmp(axis, "channel") ? AG_AXIS_CHANNEL : AG_AXIS_SPATIAL;
    return AG_OK;
}

static int parse_node(json_ctx *c, const cJSON *obj) {
    const char *op_name, *name;
    int rc;
    if (!cJSON_IsObject(obj))
        return fail(c, "?", "not an object");
    if ((rc = get_string(c, obj, "?", "name", &name)) ||
        (rc = get_string(c, obj, name ? name : "?", "op", &op_name)))
        return rc;
    if (!name || !*name || strlen(name) >= AG_GRAPH_NAME_BYTES || ag_graph_find(c->g, name) >= 0)
        return fail(c, name ? name : "?", "the name is missing, too long or not unique");
    int op = ag_op_parse(op_name);
    if (op <= AG_OP_INPUT) {
        char why[96];
        snprintf(why, sizeof why, "op '%.48s' is not supported", op_name ? op_name : "");
        return fail(c, name, why);
    }
    ag_node n = ag_node_make((ag_op)op, name, -1, -1);
    int transpose = 0, channels = 0;
    if ((rc = get_inputs(c, obj, &n)) || (rc = get_pad(c, obj, &n)) ||
        (rc = get_enums(c, obj, &n)) ||
        (rc = get_int(c, obj, name, "stride", 1, 1, 4, &n.stride)) ||
        (rc = get_int(c, obj, name, "groups", 1, 0, 4096, &n.groups)) ||
        (rc = get_int(c, obj, name, "k", 1, 1, 11, &n.k)) ||
        (rc = get_int(c, obj, name, "transpose", 0, 0, 1, &transpose)) ||
        (rc = get_int(c, obj, name, "channels", 0, 0, 4096, &channels)) ||
        (rc = get_float(c, obj, name, "eps", 1e-5f, &n.eps)) ||
        (rc = get_float(c, obj, name, "alpha", 0.2f, &n.alpha)) ||
        (rc = get_tensor(c, obj, &n, "weight", AG_T_WEIGHT)) ||
        (rc = get_tensor(c, obj, &n, "bias", AG_T_BIAS)) ||
        (rc = get_tensor(c, obj, &n, "gamma", AG_T_GAMMA)) ||
        (rc = get_tensor(c, obj, &n, "beta", AG_T_BETA)) ||
        (rc = get_tensor(c, obj, &n, "scale", AG_T_GAMMA)) ||
        (rc = get_tensor(c, obj, &n, "shift", AG_T_BETA)) ||
        (rc = get_tensor(c, obj, &n, "slope", AG_T_GAMMA)))
        return rc;
    n.transpose = transpose;
    if (op == AG_OP_PAD_CHANNELS)
        n.out_c = channels;
    return ag_graph_add(c->g, &n, c->err) < 0 ? c->err->code : AG_OK;
}

int ag_graph_from_json(const char *json, const ag_tensor_set *set, const char *path, ag_graph *g,
                       ag_error *err) {
    json_ctx c = {set, path, g, err};
    ag_graph_init(g);
    cJSON *root = cJSON_Parse(json);
    const cJSON *nodes = root ? cJSON_GetObjectItemCaseSensitive(root, "nodes") : NULL;
    const cJSON *outputs = root ? cJSON_GetObjectItemCaseSensitive(root, "outputs") : NULL;
    int rc = AG_OK;
    if (!cJSON_IsArray(nodes) || !cJSON_IsArray(outputs) ||
        cJSON_GetArraySize(nodes) >= AG_GRAPH_MAX_NODES ||
        cJSON_GetArraySize(outputs) > AG_GRAPH_MAX_OUTPUTS)
        rc = ag_error_set(err, AG_E_FORMAT,
                          "%s: metadata 'graph' is not {\"nodes\": [...], \"outputs\": [...]} "
                          "with at most %d nodes",
                          path, AG_GRAPH_MAX_NODES - 1);
    const cJSON *item;
    if (rc == AG_OK)
        cJSON_ArrayForEach(item, nodes) {
            if ((rc = parse_node(&c, item)) != AG_OK)
                break;
        }
    if (rc == AG_OK)
        cJSON_ArrayForEach(item, outputs) {
            int index = cJSON_IsString(item) ? ag_graph_find(g, item->valuestring) : -1;
            if (index < 1) {
                rc = ag_error_set(err, AG_E_FORMAT, "%s: graph output \"%.64s\" is not a node",
                                  path, cJSON_IsString(item) ? item->valuestring : "?");
                break;
            }
            if ((rc = ag_graph_add_output(g, index, err)) != AG_OK)
                break;
        }
    cJSON_Delete(root);
    return rc;
}
