/*
 * graph_json.c - the graph of a project model file, from the JSON in its "graph" metadata
 * (docs/graph.md). The text comes from an untrusted file: cJSON parses it (bounded by the
 * safetensors header limit), every field is type- and range-checked here, and tensors are
 * looked up by name in the file's own set.
 */
#include "model_internal.h"

#include "../graph/ops.h"

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

/* A number in attribute a's range. */
static int get_number(json_ctx *c, const cJSON *v, const char *node, const ag_attr *a,
                      double *out) {
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || !ag_attr_fits(a, v->valuedouble)) {
        char why[128];
        snprintf(why, sizeof why, "'%s' is not %s in [%g, %g]", a->key,
                 a->kind == AG_ATTR_FLOAT || a->kind == AG_ATTR_FLOATS ? "a number" : "an integer",
                 a->lo, a->hi);
        return fail(c, node, why);
    }
    *out = v->valuedouble;
    return AG_OK;
}

/* A list of `want` numbers (want 0: 1 to a's count) into a field. */
static int get_list(json_ctx *c, const cJSON *v, const char *node, const ag_attr *a, int want,
                    int max, void *field, int *count) {
    int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (want ? n != want : n < 1 || n > max) {
        char why[96];
        snprintf(why, sizeof why, "'%s' is not a list of %s%d numbers", a->key,
                 want ? "" : "at most ", want ? want : max);
        return fail(c, node, why);
    }
    for (int j = 0; j < n; j++) {
        double x;
        int rc = get_number(c, cJSON_GetArrayItem(v, j), node, a, &x);
        if (rc)
            return rc;
        if (a->kind == AG_ATTR_FLOATS)
            ((float *)field)[j] = (float)x;
        else
            ((int *)field)[j] = (int)x;
    }
    *count = n;
    return AG_OK;
}

/* An enumerated string: its index in a's names. */
static int get_enum(json_ctx *c, const cJSON *v, const char *node, const ag_attr *a, int *out) {
    for (int i = 0; cJSON_IsString(v) && a->names[i]; i++)
        if (!strcmp(v->valuestring, a->names[i]) && ag_attr_fits(a, i)) {
            *out = i;
            return AG_OK;
        }
    char why[128];
    snprintf(why, sizeof why, "'%s' is not one of its names (%s, ...)", a->key,
             a->names[(int)a->lo]);
    return fail(c, node, why);
}

/* The attributes the op table lists for n's op; absent ones keep their defaults. */
static int get_attrs(json_ctx *c, const cJSON *obj, ag_node *n) {
    const ag_op_desc *d = ag_op_desc_of(n->op);
    for (int i = 0; i < d->attr_count; i++) {
        const ag_attr *a = &d->attrs[i];
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, a->key);
        char *field = (char *)n + a->offset;
        double x;
        int rc = AG_OK, count;
        if (!v)
            continue;
        switch (a->kind) {
        case AG_ATTR_INT:
            if ((rc = get_number(c, v, n->name, a, &x)) == AG_OK)
                *(int *)field = (int)x;
            break;
        case AG_ATTR_FLOAT:
            if ((rc = get_number(c, v, n->name, a, &x)) == AG_OK)
                *(float *)field = (float)x;
            break;
        case AG_ATTR_ENUM: rc = get_enum(c, v, n->name, a, (int *)field); break;
        case AG_ATTR_PAD: rc = get_list(c, v, n->name, a, 4, 4, field, &count); break;
        case AG_ATTR_FLOATS:
            rc = get_list(c, v, n->name, a, 0, AG_FIR_MAX_TAPS, field,
                          (int *)((char *)n + a->count_offset));
            break;
        }
        if (rc)
            return rc;
    }
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
    const ag_op_desc *d = ag_op_desc_of(n->op);
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(obj, "in");
    int count = cJSON_IsArray(in) ? cJSON_GetArraySize(in) : in ? -1 : 0;
    if (count < d->min_src || count > d->max_src) {
        char why[96];
        snprintf(why, sizeof why, "'in' is not a list of %d to %d node names", d->min_src,
                 d->max_src);
        return fail(c, n->name, why);
    }
    for (int j = 0; j < count; j++) {
        const cJSON *v = cJSON_GetArrayItem(in, j);
        int index = cJSON_IsString(v) ? ag_graph_find(c->g, v->valuestring) : -1;
        if (index < 0)
            return fail(c, n->name, "an input is not the name of an earlier node");
        n->src[j] = index;
    }
    return AG_OK;
}

/* The tensors the op table lists for n's op, by their JSON keys. */
static int get_tensors(json_ctx *c, const cJSON *obj, ag_node *n) {
    const ag_op_desc *d = ag_op_desc_of(n->op);
    for (int i = 0; i < d->tensor_count; i++) {
        int rc = get_tensor(c, obj, n, d->tensors[i].key, d->tensors[i].slot);
        if (rc)
            return rc;
    }
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
    if ((rc = get_inputs(c, obj, &n)) || (rc = get_attrs(c, obj, &n)) ||
        (rc = get_tensors(c, obj, &n)))
        return rc;
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
