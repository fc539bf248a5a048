/*
 * model_internal.h - the in-memory model and the contract between the file loaders
 * (safetensors.c, pytorch.c, onnx_pb.c + onnx_import.c) and the model builder (model.c).
 *
 * A loader parses a file into an ag_tensor_set: named tensors (PyTorch layout) plus string
 * metadata; an ONNX file also gives the graph. model.c then takes the graph (the ONNX one,
 * the "graph" metadata, or AnimeGANv2's from bryandlee's state_dict names: v2.c), checks
 * every weight's shape against the node that reads it and copies the weights, dequantized
 * to fp32, into one allocation that the nodes point into.
 */
#ifndef AG_MODEL_INTERNAL_H
#define AG_MODEL_INTERNAL_H

#include "../util/util_internal.h"

typedef enum ag_dtype {
    AG_DTYPE_F32 = 0,
    AG_DTYPE_F16,
    AG_DTYPE_BF16,
    AG_DTYPE_F64,
    AG_DTYPE_I8,
} ag_dtype;

#define AG_TENSOR_NAME_BYTES 96
#define AG_TENSOR_MAX_DIMS 4

/* A tensor inside a parsed file. `data` is row-major, little-endian, possibly unaligned (read
 * it with memcpy); it points into the file buffer or a blob of the set. A PyTorch view that
 * is not contiguous (transposed, or expanded with stride 0) is `strided`: `data` is its first
 * element and `stride` its element strides, checked against its storage by the parser but
 * gathered only by ag_tensor_ref_elements, once the architecture has checked its shape (an
 * expanded view of a few bytes in the file may declare a gigabyte). */
typedef struct ag_tensor_ref {
    char name[AG_TENSOR_NAME_BYTES];
    ag_dtype dtype;
    int ndim;
    int64_t shape[AG_TENSOR_MAX_DIMS];
    const void *data;
    size_t nbytes; /* of its elements, contiguous: numel x the dtype's size */
    bool strided;
    int64_t stride[AG_TENSOR_MAX_DIMS];
} ag_tensor_ref;

/* The elements of `ref`, contiguous: `ref->data` itself, or for a strided view a copy
 * gathered into *tmp (ag_malloc'ed, NULL otherwise; the caller frees it). Call it only after
 * checking the shape against the architecture. AG_E_NOMEM on failure. */
int ag_tensor_ref_elements(const ag_tensor_ref *ref, const void **out, void **tmp, ag_error *err);

#define AG_META_MAX 32

typedef struct ag_tensor_set {
    ag_tensor_ref *tensors; /* ag_malloc'ed array */
    int count, capacity;
    void **blobs; /* buffers the set owns (e.g. storages copied out of a zip) */
    int blob_count, blob_capacity;
    char *meta_keys[AG_META_MAX]; /* ag_malloc'ed strings */
    char *meta_values[AG_META_MAX];
    int meta_count;
} ag_tensor_set;

void ag_tensor_set_fini(ag_tensor_set *set);
/* Append a tensor (copied by value); AG_E_NOMEM on failure. Refuses more than 4096. */
int ag_tensor_set_add(ag_tensor_set *set, const ag_tensor_ref *ref, ag_error *err);
/* Take ownership of an ag_malloc'ed blob (freed with the set; freed now on failure). */
int ag_tensor_set_own(ag_tensor_set *set, void *blob, ag_error *err);
int ag_tensor_set_meta(ag_tensor_set *set, const char *key, const char *value, ag_error *err);
const ag_tensor_ref *ag_tensor_set_find(const ag_tensor_set *set, const char *name);
const char *ag_tensor_set_meta_get(const ag_tensor_set *set, const char *key);
size_t ag_dtype_size(ag_dtype dtype);

/* File parsers: fill `out` (initialised by the caller with {0}) from a whole file in memory.
 * The set may point into `data`, which must outlive it. */
int ag_safetensors_parse(const uint8_t *data, size_t size, const char *label, ag_tensor_set *out,
                         ag_error *err);
int ag_pytorch_parse(const uint8_t *data, size_t size, const char *label, ag_tensor_set *out,
                     ag_error *err);

/* ONNX files (src/model/onnx_pb.c, onnx_import.c) carry the network as well: `graph` gets
 * its nodes, whose tensor[] fields index `tensors` (weights pointing into `data` where they
 * can, derived ones as blobs of the set); in_c, out_c and k are left for the model builder
 * to derive from the weights. Any op or pattern outside the supported set is refused with
 * one line naming the node and its op type. */
struct ag_graph;
int ag_onnx_parse(const uint8_t *data, size_t size, const char *label, ag_tensor_set *tensors,
                  struct ag_graph *graph, ag_error *err);

/* ---- the model ------------------------------------------------------------------------- */

#include "../graph/graph.h"

struct ag_model {
    ag_model_info info;
    char *strings;    /* one allocation holding info's strings */
    float *weights;   /* one allocation holding every parameter, fp32 */
    ag_graph graph;   /* weights bound, checked */
    int upscaler;     /* a Real-ESRGAN checkpoint (its kind is not in the file) */
    char detail[128]; /* info.detail */
    /* bf16 copies of the modulated convs' packed weights and their demodulation sums
     * (over the taps, weight² per (IC, OC)), made once by the first bf16 engine
     * (ag_model_bf16_weights) and shared by all: one block, pointers per node. */
    void *bf16_block;
    const uint16_t **bf16_of;
    const float **demod_sq_of;
    int fp32_dropped; /* ag_model_prepare_precision kept only those: bf16 engines only */
    /* Per node (made at first use): its weights in a layout of an engine's kernels, shared
     * by every engine asking for that layout (ag_model_shared_weights). */
    struct ag_shared_weights *shared_of;
};

/* The AnimeGANv2 generator (bryandlee's state_dict names) as a graph whose nodes name
 * their tensors by index into `set` (src/model/v2.c). */
int ag_v2_graph(const ag_tensor_set *set, const char *path, float eps, ag_resize_mode mode,
                ag_graph *g, ag_error *err);

/* Users' Real-ESRGAN checkpoints (src/model/realesrgan.c): the architecture inferred from
 * the state_dict, then its graph (nodes naming tensors of `set` by index). */
typedef enum ag_realesrgan_kind {
    AG_REALESRGAN_SRVGG = 1,
    AG_REALESRGAN_RRDB,
    AG_REALESRGAN_SPAN,
    AG_REALESRGAN_PLKSR,
} ag_realesrgan_kind;
/* The architecture's name in ag_model_info ("rrdbnet", "srvggnet-compact", "span", ...). */
const char *ag_realesrgan_name(ag_realesrgan_kind kind);
/* RRDBNet key layouts: Real-ESRGAN/BasicSR (conv_first, body.N.rdbJ), BSRGAN/RealSR
 * (RRDB_trunk.N.RDBJ, trunk_conv, upconvK, HRconv), the original ESRGAN (model.0, model.1.sub.N).
 */
typedef enum ag_rrdb_layout { AG_RRDB_NEW = 1, AG_RRDB_BSRGAN, AG_RRDB_OLD } ag_rrdb_layout;
#define AG_RRDB_MAX_BLOCKS 64
#define AG_PLKSR_MAX_BLOCKS 64
typedef struct ag_realesrgan_arch {
    ag_realesrgan_kind kind;
    int feat;         /* num_feat */
    int grow;         /* RRDB: num_grow_ch */
    int blocks;       /* SRVGG: num_conv; RRDB: num_block */
    int scale;        /* output side / input side */
    int unshuffle;    /* RRDB: pixel-unshuffle factor of the input (1: none) */
    int layout;       /* RRDB: ag_rrdb_layout */
    int ups;          /* RRDB: nearest x2 + conv steps (scale * unshuffle = 2^ups) */
    int kernel;       /* RealPLKSR: the partial large kernel's side */
    int partial;      /* RealPLKSR: the channels it convolves (pdim) */
    int attention;    /* RealPLKSR: element-wise attention present */
    int layer_norm;   /* RealPLKSR: LayerNorm first instead of GroupNorm last */
    int dysample;     /* RealPLKSR: DySample's channel groups (0: a pixel shuffle instead) */
    char detail[128]; /* the layout and sizes found, for ag_model_info.detail */
} ag_realesrgan_arch;
/* Whether the set names tensors the way either network does (then it is one or refused). */
int ag_realesrgan_detect(const ag_tensor_set *set);
int ag_realesrgan_infer(const ag_tensor_set *set, const char *path, ag_realesrgan_arch *arch,
                        ag_error *err);
/* Add the weights the graph derives (see realesrgan.c) to a detected set, before the build. */
int ag_realesrgan_prepare(ag_tensor_set *set, const char *path, ag_error *err);
int ag_realesrgan_graph(const ag_tensor_set *set, const char *path, ag_realesrgan_arch *arch,
                        ag_graph *g, ag_error *err);

/* The graph of a file's "graph" metadata (docs/graph.md) (src/model/graph_json.c). */
int ag_graph_from_json(const char *json, const ag_tensor_set *set, const char *path, ag_graph *g,
                       ag_error *err);

/* Make the model's bf16 weights (ag_model.bf16_block) if not yet made: thread-safe, once
 * per model; the model stays const for its readers. AG_E_NOMEM leaves none made. */
int ag_model_bf16_weights(const ag_model *model, ag_error *err);
/* Bytes those copies take (0 before they are made). */
size_t ag_model_bf16_bytes(const ag_model *model);

/*
 * A node's weights in a layout of an engine's kernels (oneDNN's Winograd weights), kept once
 * per model and shared by every engine asking for the same layout, as the bf16 copies are:
 * the first asker makes them (fill(ctx, dst) into `bytes`, 64-byte aligned, under a lock);
 * they live until the model is destroyed. `layout` (layout_bytes, copied) describes the
 * layout and `same` compares two. *out is NULL when the node already holds another layout
 * (an engine at another size): that engine prepares its own copy.
 */
typedef struct ag_layout_request {
    const void *layout;
    size_t layout_bytes;
    int (*same)(const void *a, const void *b);
    size_t bytes;
    int (*fill)(void *ctx, void *dst, ag_error *err);
    void *ctx;
} ag_layout_request;
int ag_model_shared_weights(const ag_model *model, int node, const ag_layout_request *r,
                            const void **out, ag_error *err);
/* Bytes the shared weights take (0 before any is made). */
size_t ag_model_shared_bytes(const ag_model *model);

/* Build the model from a parsed set: the graph is `graph` when given (ONNX), else the
 * file's "graph" metadata, else AnimeGANv2's; `format` is "safetensors", "pytorch" or
 * "onnx". */
int ag_model_build(const ag_tensor_set *set, const ag_graph *graph, const char *path,
                   const char *format, ag_model **out, ag_error *err);

#endif
