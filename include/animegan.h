/*
 * animegan.h - the public API of libanimegan.
 *
 * The data path: encoded image bytes -> ag_image (8-bit sRGB) -> tensor -> AnimeGANv2
 * generator -> tensor -> ag_image -> encoded bytes. The CLI (cli/) and the HTTP service
 * (server/) are thin front ends over this header and include nothing else of the library.
 *
 * Objects and threads:
 *   ag_model   immutable weights, loaded once; shared read-only by any number of engines.
 *   ag_engine  one worker: an activation arena planned per image size, the compute backend's
 *              prepared state and a thread count. Use one engine from one thread at a time.
 *
 * Errors: every call that can fail returns 0 or a negative AG_E_* code and fills the
 * caller's ag_error (code + one line naming the file or field and the reason).
 * Destroy functions accept NULL.
 */
#ifndef ANIMEGAN_H
#define ANIMEGAN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AG_VERSION "0.1.0"

/* ---- errors ---------------------------------------------------------------------------- */

enum {
    AG_OK = 0,
    AG_E_ARG = -1,         /* invalid argument or option value */
    AG_E_IO = -2,          /* file not found, unreadable or unwritable */
    AG_E_FORMAT = -3,      /* corrupt or wrong file (model or image) */
    AG_E_UNSUPPORTED = -4, /* valid file of a kind we do not handle */
    AG_E_NOMEM = -5,       /* allocation failed */
    AG_E_LIMIT = -6,       /* input exceeds a configured limit (pixels, bytes) */
    AG_E_NOTFOUND = -7,    /* unknown model name */
    AG_E_INTERNAL = -8,    /* a backend failure that is our bug, not the input's */
    AG_E_CANCELLED = -9,   /* stopped on request (a progress callback asked to stop) */
};

#define AG_ERROR_MESSAGE_BYTES 256

typedef struct ag_error {
    int code;                             /* AG_OK or AG_E_* */
    char message[AG_ERROR_MESSAGE_BYTES]; /* one line, no trailing newline */
} ag_error;

/* Short stable name of a code ("io", "format", ...), for JSON error bodies. */
const char *ag_error_name(int code);

/* ---- models ---------------------------------------------------------------------------- */

typedef struct ag_model ag_model;

/* How the generator upsamples in blocks D and E (bilinear). */
typedef enum ag_resize_mode {
    AG_RESIZE_DEFAULT = 0,   /* whatever the model file says */
    AG_RESIZE_ASYMMETRIC,    /* TF legacy: src = dst * in / out */
    AG_RESIZE_ALIGN_CORNERS, /* src = dst * (in - 1) / (out - 1) */
    AG_RESIZE_HALF_PIXEL,    /* src = (dst + 0.5) * in / out - 0.5 */
} ag_resize_mode;

/* What a model is for, from its "kind" metadata (info.kind keeps the string). */
typedef enum ag_model_kind {
    AG_MODEL_OTHER = 0, /* e.g. "detector", "landmarks": used by a step, never on its own */
    AG_MODEL_GENERATOR, /* "generator": a style, the default when the file names none */
    AG_MODEL_UPSCALER,  /* "upscaler" */
    AG_MODEL_RESTORER,  /* "restorer": a face restorer (GPEN, GFPGAN) */
} ag_model_kind;

typedef struct ag_model_info {
    const char *name;         /* "hayao", or the file's base name */
    const char *path;         /* file it was loaded from */
    const char *format;       /* "safetensors", "pytorch" or "onnx" */
    const char *architecture; /* "animeganv2", "animeganv3", "animeganv3-tiny", "onnx", ... */
    const char *style;        /* e.g. "Hayao"; "" when unknown */
    const char *kind;         /* "generator" (a style), or e.g. "detector", "landmarks" */
    ag_model_kind role;       /* kind as an enum: what code compares */
    const char *license;      /* licence terms of the weights; "" when unknown */
    float norm_eps;           /* LayerNorm / GroupNorm(1) epsilon */
    ag_resize_mode resize;    /* default upsampling mode of this model */
    size_t param_count;       /* number of weights */
    size_t weight_bytes;      /* bytes of fp32 weights in memory */
    int side_multiple;        /* the originals need sides that are multiples of this (we don't) */
    int min_side;             /* the network's smallest side (AG_MIN_SIDE or more); ag_stylize
                                 reflect-pads smaller images up to it, so every model
                                 takes any side from AG_MIN_SIDE */
    int scale;                /* kind "upscaler": output side / input side; 1 otherwise */
    float pixel_max;          /* upscalers: RGB goes in and out as [0, pixel_max] (1 or 255) */
    const char *detail;       /* what was inferred from the tensors ("old ESRGAN keys, 64
                                 features, 23 blocks, growth 32"); "" when nothing was */
} ag_model_info;

/*
 * Load a model by bundled name ("hayao") or by path (.safetensors, or a PyTorch .pt
 * state_dict of bryandlee/animegan2-pytorch). Names are looked up in $ANIMEGAN_MODEL_PATH
 * (colon-separated), then <directory of the executable>/../models, then the install data
 * directory. On success *out owns the weights; free with ag_model_destroy.
 */
int ag_model_load(const char *name_or_path, ag_model **out, ag_error *err);

/* Load from bytes already in memory (e.g. for fuzzing); `label` names it in messages. */
int ag_model_load_memory(const void *data, size_t size, const char *label, ag_model **out,
                         ag_error *err);

void ag_model_destroy(ag_model *model);
const ag_model_info *ag_model_get_info(const ag_model *model);

/* Bundled models found on the search path: fills up to `max` names, returns the count. */
int ag_model_list_bundled(const char **names, int max);

/* Parse "asymmetric", "align-corners", "half-pixel"; returns -1 when unknown. */
int ag_resize_mode_parse(const char *text);
const char *ag_resize_mode_name(ag_resize_mode mode);

/* ---- engines --------------------------------------------------------------------------- */

typedef struct ag_engine ag_engine;

typedef enum ag_backend {
    AG_BACKEND_ONEDNN = 0, /* oneDNN convolutions + fused C passes (default) */
    AG_BACKEND_REFERENCE,  /* plain C loops, one op at a time: the test oracle */
} ag_backend;

typedef enum ag_precision {
    AG_PRECISION_FP32 = 0,
    AG_PRECISION_BF16,
    AG_PRECISION_INT8,
    AG_PRECISION_AUTO, /* resolve with ag_precision_resolve before ag_engine_create */
} ag_precision;

typedef struct ag_engine_options {
    ag_backend backend;
    ag_precision precision;
    int threads;           /* <= 0: all cores */
    ag_resize_mode resize; /* AG_RESIZE_DEFAULT: the model's own */
} ag_engine_options;

/* Minimum image side the generator accepts. */
#define AG_MIN_SIDE 8

/*
 * Create an engine over `model` (which must outlive it). Nothing is planned until the first
 * image; the arena is then planned for that size and reused while the size stays the same.
 */
int ag_engine_create(const ag_model *model, const ag_engine_options *options, ag_engine **out,
                     ag_error *err);
void ag_engine_destroy(ag_engine *engine);

/*
 * Plan (or keep) the arena for an image of width x height. Called by the run functions;
 * callable up front so a server can reserve before admitting work.
 */
int ag_engine_prepare(ag_engine *engine, int width, int height, ag_error *err);

/*
 * Run the generator on a float image: `in` and `out` are (height, width, 3) RGB in [-1, 1],
 * both owned by the caller. `out` may not alias `in`.
 */
int ag_engine_run_f32(ag_engine *engine, const float *in, int width, int height, float *out,
                      ag_error *err);

/*
 * Give back what ag_engine_prepare made (the arena, the prepared weights and primitives):
 * the engine is as created and plans again at its next image. A server whose worker holds
 * one engine per model releases the ones it is not running, so one worker's arenas never
 * exceed the largest model's.
 */
void ag_engine_release(ag_engine *engine);

/*
 * Ask `cancelled(user)` before each step of every run (and between the bands of a step):
 * when it returns nonzero, the run stops there and returns AG_E_CANCELLED. The engine stays
 * usable: its next run starts afresh. NULL removes the hook. A server stops an abandoned
 * request's image this way without waiting for its last layer.
 */
void ag_engine_set_cancel(ag_engine *engine, int (*cancelled)(void *user), void *user);

/*
 * Tell `progress(user, done, total)` after each step of every run (its return value is not
 * asked: ag_engine_set_cancel stops a run): the steps of one network run, for a progress
 * figure within one long image (one face, one tile). NULL removes the hook.
 */
void ag_engine_set_progress(ag_engine *engine, int (*progress)(void *user, int done, int total),
                            void *user);

/* Bytes of the arena currently planned (0 before the first image). */
size_t ag_engine_arena_bytes(const ag_engine *engine);

/* Bytes of the arena an engine with `options` would plan for width x height. */
size_t ag_engine_arena_bytes_for(const ag_model *model, const ag_engine_options *options, int width,
                                 int height);

/* Bytes of the weights such an engine would prepare beside the model's for that size
 * (oneDNN's layouts of its convs: fp32 Winograd weights for a StyleGAN graph's big maps). */
size_t ag_engine_prepared_bytes_for(const ag_model *model, const ag_engine_options *options,
                                    int width, int height);

/* Floating-point operations (multiply-add = 2) of one generator pass at width x height. */
double ag_model_flop(const ag_model *model, int width, int height);

/* ---- images ---------------------------------------------------------------------------- */

/* An 8-bit interleaved image: bands 3 (RGB) or 4 (RGBA). Owns `pixels` (ag_image_fini). */
typedef struct ag_image {
    int width, height, bands;
    uint8_t *pixels; /* (height, width, bands) */
} ag_image;

void ag_image_fini(ag_image *image);

/* Must be called once before any image function (starts libvips); 0 on success. */
int ag_image_startup(const char *argv0, ag_error *err);
void ag_image_shutdown(void);

/*
 * Send the messages libvips and GLib would print on stderr (warnings about a corrupt tile,
 * an ignored profile, ...) to fn instead: called on the thread that logged, with the domain
 * ("VIPS", "GLib", ...), a level ("error", "warn", "info", "debug") and the text without
 * a trailing newline. fn must be thread-safe; NULL restores GLib's default. Call after
 * ag_image_startup.
 */
typedef void (*ag_library_log_fn)(void *ctx, const char *domain, const char *level,
                                  const char *message);
void ag_image_set_log_handler(ag_library_log_fn fn, void *ctx);

/* Width and height from the header only, without decoding pixels. */
int ag_image_probe(const void *data, size_t size, int *width, int *height, ag_error *err);

typedef struct ag_decode_options {
    int max_side;      /* downscale (Lanczos) when the long side exceeds this; 0 = never */
    int portrait;      /* face2paint: centre square crop, resized to portrait_size */
    int portrait_size; /* default 512 */
    size_t max_pixels; /* refuse images whose header has more pixels; 0 = no limit */
} ag_decode_options;

/*
 * Decode JPEG, PNG, WebP, TIFF, GIF (first frame), HEIF: EXIF orientation applied, converted
 * to 8-bit sRGB; alpha kept as a 4th band. `label` names the input in messages.
 */
int ag_image_decode(const void *data, size_t size, const char *label,
                    const ag_decode_options *options, ag_image *out, ag_error *err);
int ag_image_decode_file(const char *path, const ag_decode_options *options, ag_image *out,
                         ag_error *err);

/*
 * What ag_image_decode does after decoding, on an image already in memory (RGB or RGBA, e.g.
 * an array of the Python package): the portrait crop or the max_side downscale of `options`
 * (max_pixels and the minimum side checked as for a file), with the same resampling, so the
 * pixels equal those of decoding a lossless file of `in`. `out` is a new image (a copy even
 * when nothing changes), owned by the caller; `in` is only read.
 */
int ag_image_shape(const ag_image *in, const ag_decode_options *options, const char *label,
                   ag_image *out, ag_error *err);

typedef enum ag_format {
    AG_FORMAT_PNG = 0,
    AG_FORMAT_JPEG,
    AG_FORMAT_WEBP,
} ag_format;

/* "png", "jpg"/"jpeg", "webp" (case-insensitive); -1 when unknown. */
int ag_format_parse(const char *text);
/* Format from a file name's extension; -1 when unknown. */
int ag_format_from_path(const char *path);
const char *ag_format_mime(ag_format format);
const char *ag_format_extension(ag_format format);

/* Encode to a buffer the caller frees with ag_free. quality 1..100 (JPEG, WebP). */
int ag_image_encode(const ag_image *image, ag_format format, int quality, void **data, size_t *size,
                    ag_error *err);

/*
 * Write `image` to `path` (format from `format`): written to a temporary file in the same
 * directory, then renamed, so a failure never leaves a partial file.
 */
int ag_image_save_file(const ag_image *image, const char *path, ag_format format, int quality,
                       ag_error *err);

/* ---- the whole conversion -------------------------------------------------------------- */

/*
 * Stylise an 8-bit image: RGB(A) in, same size and bands out (alpha copied back). With
 * side_by_side the output is the input and the result next to each other (2*width).
 * `out` is initialised by the call and owned by the caller.
 */
int ag_stylize(ag_engine *engine, const ag_image *in, int side_by_side, ag_image *out,
               ag_error *err);

/* ---- upscaling (src/upscale.c) -------------------------------------------------------- */

/*
 * Upscalers are models of kind "upscaler": the bundled esrgan-slim and esrgan-medium
 * (UpscalerJS, MIT; files esrgan-<size>-x<N>.safetensors for N = 2, 3, 4, 8) and users'
 * Real-ESRGAN checkpoints (SRVGGNetCompact, RRDBNet; .pth with params_ema or params), whose
 * architecture and scale are read from the tensors. An image is upscaled tile by tile: each
 * tile runs with `pad` pixels of context on every side in a window of one fixed size, so
 * memory is bounded by the window (ag_upscale_plan.bytes) and not by the image.
 */
#define AG_UPSCALE_MAX_SCALE 16
#define AG_UPSCALE_MAX_PAD 32                          /* input pixels of context, by default */
#define AG_UPSCALE_DEFAULT_MAX_BYTES ((size_t)1 << 30) /* the tile's budget: 1 GiB */

/* Called after each step of a long operation (a face restored, a tile upscaled) with the
 * steps done and their total, on the caller's thread; a non-zero return stops it with
 * AG_E_CANCELLED. */
typedef int (*ag_step_progress_fn)(void *user, int done, int total);

typedef struct ag_upscale_options {
    int scale;        /* output side / input side; 0: the model's own. Another one resizes the
                         network's result with Lanczos3 (as Real-ESRGAN's outscale) */
    int tile_px;      /* tile side in input pixels; 0: the largest whose window fits max_bytes */
    int tile_pad_px;  /* context on each side; < 0: the network's reach, at most MAX_PAD */
    size_t max_bytes; /* budget of one window (engine arena + its float input and output) */
    ag_step_progress_fn progress; /* NULL: none; steps are tiles */
    void *progress_user;
} ag_upscale_options;

void ag_upscale_options_init(ag_upscale_options *options);

/* How an image of width x height is cut. */
typedef struct ag_upscale_plan {
    int tile_px, pad_px;    /* tile side and context, input pixels */
    int window_w, window_h; /* the network's input size, the same for every tile */
    int tiles_x, tiles_y;   /* tiles across and down */
    int padded_w, padded_h; /* the image reflected out to the network's side multiple */
    size_t bytes;           /* memory of one window: the arena and its buffers */
} ag_upscale_plan;

/* The plan `engine` (over an upscaler) would follow for width x height. AG_E_ARG when the
 * model is not an upscaler, AG_E_LIMIT when max_bytes fits no tile. */
int ag_upscale_plan_for(const ag_engine *engine, int width, int height,
                        const ag_upscale_options *options, ag_upscale_plan *plan, ag_error *err);

/* Receptive radius of the model's output, in input pixels (the pad that makes tiles exact). */
int ag_upscale_reach(const ag_model *model);

/*
 * The most ag_upscale allocates beyond the tile window (ag_upscale_plan.bytes) for a result
 * of `output_pixels` pixels of `bands` (3 or 4) at `scale` (0: the model's own): the network
 * runs at its own scale first, so a x4 model asked for x2 makes a result 4 times larger, then
 * resizes it (both held at once), plus the enlarged alpha. Saturates at SIZE_MAX.
 */
size_t ag_upscale_image_bytes(const ag_model *upscaler, int scale, size_t output_pixels, int bands);

/*
 * Upscale `in` (RGB or RGBA, any size) by options->scale (NULL: defaults) into a new image
 * `out` (free with ag_image_fini); alpha is enlarged separately with Lanczos3. Runs on the
 * engine's threads; the engine is replanned for the window size when it changes.
 */
int ag_upscale(ag_engine *engine, const ag_image *in, const ag_upscale_options *options,
               ag_image *out, ag_error *err);

/*
 * Load the upscaler `name_or_path` for `scale` (0: the file's own; bundled families: 4):
 * a bundled family name ("esrgan-slim") picks its file of that scale, else of the smallest
 * larger scale, else of the largest; any other name or path loads as ag_model_load does.
 * AG_E_ARG when the model is not an upscaler.
 */
int ag_upscaler_load(const char *name_or_path, int scale, ag_model **out, ag_error *err);

/* ---- faces (src/face/) -------------------------------------------------------------------- */

/*
 * Faces are found by two bundled networks that run on the engine like any model: the
 * BlazeFace full-range detector ("face-detect": boxes, 6 keypoints, on a 192x192 letterboxed
 * downscaled copy) and FaceMesh ("face-mesh": 468 landmarks in a 192x192 crop rotated to the
 * eyes). Every coordinate is in pixels of the image passed in (x right, y down, pixel centres
 * at +0.5).
 */
#define AG_FACE_LANDMARKS 468
#define AG_FACE_MAX 64 /* faces one call reports at most */

typedef struct ag_face {
    float score;           /* detector confidence, [0, 1] */
    float box[4];          /* x0, y0, x1, y1 */
    float keypoints[6][2]; /* the subject's right eye, left eye, nose tip, mouth centre, right
                              ear, left ear */
    float quad[4][2];      /* FFHQ crop: top-left, bottom-left, bottom-right, top-right */
    float presence;        /* FaceMesh's face probability; 0 when it did not run */
    int has_landmarks;     /* landmarks valid (presence >= 0.5); else the quad is from keypoints */
    float landmarks[AG_FACE_LANDMARKS][2];
} ag_face;

typedef struct ag_face_options {
    float min_score;  /* detection threshold; <= 0: 0.6 */
    int max_faces;    /* faces kept, largest box first; <= 0: 8 (at most AG_FACE_MAX) */
    float expand;     /* FFHQ crop size factor; <= 0: 1.3 */
    int no_landmarks; /* 1: skip FaceMesh (quads from the detector's keypoints) */
    int single_pass;  /* 1: only the whole-image pass (misses faces under ~1/16 of the long
                         side; up to 7x faster on photos of 768 px and more) */
} ag_face_options;

typedef struct ag_face_detector ag_face_detector;

/* Load the bundled "face-detect" and "face-mesh" models (the model search path of
 * ag_model_load); both must be freed with ag_model_destroy. */
int ag_face_models_load(ag_model **detect, ag_model **mesh, ag_error *err);

/*
 * A detector over the two models (which must outlive it; `mesh` may be NULL: keypoints
 * only), with its own engines and fixed buffers (about 2 MB): one per thread, like an
 * engine. `options` as for ag_engine_create (NULL: defaults).
 */
int ag_face_detector_create(const ag_model *detect, const ag_model *mesh,
                            const ag_engine_options *options, ag_face_detector **out,
                            ag_error *err);
void ag_face_detector_destroy(ag_face_detector *detector);

/*
 * Find the faces of `image` (RGB or RGBA; any size from 1x1): fills faces[0..*count), largest
 * box first, at most min(capacity, max_faces); *found (may be NULL) is how many there were
 * before the cap. The detector sees the image letterboxed to 192x192, then (photos of 768
 * px and more) a copy downscaled to a long side of 384 in up to 3x3 overlapping 192x192
 * tiles for the faces under 1/16 of the long side; the candidates of every pass go through
 * one weighted NMS. The cost is bounded whatever the photo's size: at most 10 detector runs
 * and one mesh run per face kept.
 */
int ag_faces_detect(ag_face_detector *detector, const ag_image *image,
                    const ag_face_options *options, ag_face *faces, int capacity, int *count,
                    int *found, ag_error *err);

/* Wall time of the last ag_faces_detect call (detection + landmarks), in ms. */
double ag_face_detector_last_ms(const ag_face_detector *detector);

/* The stages of the last ag_faces_detect call, wall time in ms (`animegan faces --bench`). */
typedef struct ag_face_timing {
    double total_ms;
    double detect_warp_ms; /* the letterbox and tiles: image -> 192x192 network input */
    double detect_net_ms;  /* the detector network, every pass */
    double decode_ms;      /* anchors, score threshold, weighted NMS, sorting */
    double mesh_warp_ms;   /* the rotated face crops: image -> 192x192 */
    double mesh_net_ms;    /* FaceMesh, every face */
    int passes;            /* detector runs (1 + tiles) */
    int meshes;            /* FaceMesh runs */
} ag_face_timing;
void ag_face_detector_last_timing(const ag_face_detector *detector, ag_face_timing *out);

/*
 * The FFHQ-aligned crop of `face` (its quad) as a size x size image with the bands of
 * `image`: shrunk by an integer box filter first when the quad is 2x or more the output, then
 * a cubic filter widened by the remaining factor; where the quad leaves the image, FFHQ's
 * fill: the image reflected, blurred and blended towards its median colour at the outer
 * edge (src/face/fill.c). `out` is the caller's (ag_image_fini).
 */
int ag_face_align(const ag_image *image, const ag_face *face, int size, ag_image *out,
                  ag_error *err);

/*
 * Paste a stylised aligned crop (from ag_face_align of the same face, then stylised) back
 * into `image` in place, through the inverse of the crop's warp, blended by a feathered mask
 * of the face-oval landmarks (the quad's inscribed ellipse without landmarks). Pixels outside
 * the mask are left exactly as they were.
 */
int ag_face_paste(ag_image *image, const ag_face *face, const ag_image *crop, ag_error *err);

/*
 * The full-photo mode: `engine` stylises the whole of `in`, then each face (one at a time)
 * is aligned at `size` (<= 0: 512), stylised by `face_engine` (NULL: `engine`) and pasted
 * back. `out` as for ag_stylize.
 */
int ag_stylize_paste_faces(ag_engine *engine, ag_engine *face_engine, const ag_image *in,
                           const ag_face *faces, int count, int size, ag_image *out, ag_error *err);

/* ---- face identity (src/face/identify.c) ------------------------------------------------- */

/*
 * Who a face is: dlib's face recognition ResNet (the bundled "face-recognition", CC0 weights)
 * maps a face to a 128-d descriptor; two faces of one person lie within AG_FACE_SAME_PERSON
 * (euclidean; dlib's 0.6, 99.38% on LFW), different people beyond it.
 */
#define AG_FACE_DESCRIPTOR 128
#define AG_FACE_SAME_PERSON 0.6f

typedef struct ag_face_embedder ag_face_embedder;

/* Load the bundled "face-recognition" model (the model search path); ag_model_destroy it. */
int ag_face_embed_model_load(ag_model **out, ag_error *err);

/*
 * An embedder over `model` (which must outlive it): its engine planned once for the 150x150
 * crop and its fixed buffers (the crop and the descriptor, 0.3 MB, plus the engine's arena,
 * about 3 MB). One per thread, like an engine. `options` as for ag_engine_create.
 */
int ag_face_embedder_create(const ag_model *model, const ag_engine_options *options,
                            ag_face_embedder **out, ag_error *err);
void ag_face_embedder_destroy(ag_face_embedder *embedder);

/*
 * The descriptor of `face` (from ag_faces_detect on `image`) into descriptor[0..128): the face
 * turned upright, cropped as face-api crops it (a square from its eye and mouth centres) to
 * 150x150, run through the network. No allocation beyond the crop's resampling scratch.
 */
int ag_face_embed(ag_face_embedder *embedder, const ag_image *image, const ag_face *face,
                  float *descriptor, ag_error *err);

/*
 * The descriptor of the largest face of `photo`, found by `detector`: AG_E_ARG "LABEL: no
 * face found to compare faces with" when it has none (`label` names the photo or its field).
 */
int ag_face_describe(ag_face_detector *detector, ag_face_embedder *embedder, const ag_image *photo,
                     const char *label, float *descriptor, ag_error *err);

/* Euclidean distance of two descriptors. */
float ag_face_distance(const float *a, const float *b);

/*
 * Which of faces[0..count) in `image` is most like `reference` (a descriptor): returns its
 * index (>= 0) and its distance in *distance (may be NULL), or a negative AG_E_* (AG_E_ARG
 * when count is 0). Every face is embedded once.
 */
int ag_face_most_like(ag_face_embedder *embedder, const ag_image *image, const ag_face *faces,
                      int count, const float *reference, float *distance, ag_error *err);

/* ---- face fusion (src/face/fuse*.c) ------------------------------------------------------- */

/*
 * A source face fused into a target photo (the classical landmark way): the source's 468
 * landmarks similarity-aligned (Procrustes) onto the target's and interpolated with them by
 * shape_ratio; both images warped piecewise-affinely onto that geometry over a Delaunay
 * triangulation of the landmarks plus a ring round the face; the source's colours moved to
 * the target's (mean and spread in CIE Lab over the skin); textures mixed by texture_ratio
 * (the eyes and the mouth's inside taken whole from one face, so nothing doubles or
 * smears); adjustments; then blended in by mode. Only the pixels inside the ring (the hull
 * of the target's and the fused oval plus a feather of ~6% of the face) can change.
 */
typedef enum ag_fuse_mode {
    AG_FUSE_NORMAL = 0, /* Poisson (seamless) blending over the face, feathered edge */
    AG_FUSE_BLEND,      /* no Poisson: the colour-matched face over a wider feather */
    AG_FUSE_OVERLAY,    /* the fused face's lightness over the target's chroma, seamless */
} ag_fuse_mode;

/* How a source face smaller than the target's is sharpened before fusing. */
typedef enum ag_fuse_enhance {
    AG_FUSE_ENHANCE_AUTO = 0, /* the restorer when there is one, else the upscaler, else none */
    AG_FUSE_ENHANCE_NONE,     /* fused as it is */
    AG_FUSE_ENHANCE_RESTORE,  /* options.restorer on its aligned crop (AG_E_ARG without one) */
    AG_FUSE_ENHANCE_UPSCALE,  /* options.upscaler on its window (AG_E_ARG without one) */
} ag_fuse_enhance;

typedef struct ag_fuse_options {
    float shape_ratio;   /* 0-1: 0 the target's geometry, 1 the source's */
    float texture_ratio; /* 0-1: how much of the source's skin and features replaces the target's */
    ag_fuse_mode mode;
    float smooth;            /* skin smoothing, 0-1 */
    float brightness;        /* -1..1, on the fused face (lightness +-25) */
    float contrast;          /* -1..1: lightness spread about the face's mean, x(1 + c) */
    float saturation;        /* -1..1: chroma x(1 + s) */
    int size;                /* output long side in px (the target resized first, Keys cubic with
                                a box prefilter); 0: the target's own size; else 64-4096 */
    int keep_occluders;      /* 1: what covers the target's face (hair, a hand) stays the target's
                                (a skin model of its face, src/face/fuse_visible.c); 0: off */
    int relight;             /* 1: the fused face takes the target's low-frequency shading (its
                                light), the source's detail (src/face/fuse_light.c); 0: the
                                source's shading, its mean moved to the target's */
    int pose;                /* 1: where the source is foreshortened (a turned head's far side)
                                less of its texture is taken (the target's, relit, instead),
                                so nothing is stretched; 0: off */
    ag_fuse_enhance enhance; /* a source face under 0.8 of the target's: sharpened first */
    ag_engine *restorer;     /* a restorer's engine (ag_restore_model_load), NULL: none */
    ag_engine *upscaler;     /* an upscaler's engine (ag_upscaler_load), NULL: none */
    long max_window_pixels;  /* the fusion's work window (the face and its margin) over this is
                                fused at the scale that brings it to this, its change enlarged
                                onto the target; 0: AG_FUSE_WINDOW_PIXELS */
} ag_fuse_options;

/* The default bound of a fusion's work window: 2048 x 2048 (a face of about 1300 px). */
#define AG_FUSE_WINDOW_PIXELS 4194304L

/* The defaults: both ratios 0.7, normal mode, no adjustments, occluders kept, relit, pose-limited,
 * small sources enhanced (auto), the window bounded by AG_FUSE_WINDOW_PIXELS. */
void ag_fuse_options_init(ag_fuse_options *options);

/* Whether ag_face_fuse would sharpen this source face first (enhance not none, the source's
 * face under 0.8 of the target's, whatever engines are set): a caller loads an engine for
 * it only then. The factor that brings it to the target's size in *factor (may be NULL). */
int ag_face_fuse_wants_enhance(const ag_face *source_face, const ag_face *target_face,
                               const ag_fuse_options *options, double *factor);

/* The stages of one fusion, wall time in ms. */
typedef struct ag_fuse_timing {
    double geometry_ms; /* alignment, interpolation, triangulation */
    double warp_ms;     /* both images onto the fused geometry */
    double color_ms;    /* Lab, transfer, mixing, adjustments */
    double blend_ms;    /* Poisson solve and compositing */
    double total_ms;
    int region_px;       /* pixels of the ring's window */
    int face_px;         /* pixels of the Poisson region */
    int cycles;          /* multigrid V-cycles of the solve */
    float residual;      /* its final max residual (grey levels) */
    float source_shrink; /* the source's face window was shrunk by this first (1: it was not) */
    int enhanced;        /* the source was sharpened first: AG_FUSE_ENHANCE_RESTORE or _UPSCALE
                            (0: it was not) */
    double enhance_ms;   /* that sharpening */
} ag_fuse_timing;

/*
 * *out <- a copy of `target` (RGB or RGBA; alpha is kept; resized to options->size) with
 * `source_face` of `source` fused into `target_face` (coordinates of `target` as given). Both faces
 * need landmarks (has_landmarks) and a box of at least 64 px (AG_E_ARG naming which face
 * otherwise); options NULL: the defaults; option values out of range are AG_E_ARG. Both ratios 0
 * (and no resize): out is target bit for bit. timing may be NULL. `out` is the caller's
 * (ag_image_fini). Thread-safe (no shared state).
 */
int ag_face_fuse(const ag_image *source, const ag_face *source_face, const ag_image *target,
                 const ag_face *target_face, const ag_fuse_options *options, ag_image *out,
                 ag_fuse_timing *timing, ag_error *err);

/*
 * The most ag_face_fuse allocates (ag_malloc) in one call, its output included, when the
 * source has at most source_pixels, the target (and, with options->size, the resized target)
 * at most target_pixels, and no image a side over longest_side: the resized target, the
 * shrunk source, the output, and the larger of a warp's buffers and the work over the face's
 * window (48 bytes a pixel, at most the target's and at most window_pixels, the options'
 * max_window_pixels: a larger window is fused shrunk to it, with its two copies) with the
 * Poisson grids (~9.3 more). The
 * inputs are the caller's. A memory budget's term (the server's ag_budget_fuse_bytes).
 */
size_t ag_face_fuse_bytes(size_t source_pixels, size_t target_pixels, size_t longest_side,
                          size_t window_pixels);

/*
 * What sharpening a small source (options.enhance with an engine) adds to ag_face_fuse_bytes
 * at most, beyond the engine's own arena: an upscale's result (at most the target's pixels
 * and window_pixels, 4 bands), its input crop, its unsharp mask's copy and the upscaler's
 * result buffer; or a restorer's aligned crop of restorer_side^2, its result and the
 * restorer's two copies; the result is held through the fusion (within these).
 */
size_t ag_face_fuse_enhance_bytes(size_t target_pixels, size_t window_pixels, size_t restorer_side);

/* ---- face restoration (GPEN, GFPGAN) ------------------------------------------------------ */

/*
 * Load a face restoration network from the user's PyTorch checkpoint (zip or legacy):
 * GPEN's FullGenerator (GPEN-BFR-256/512, the 1024 and 2048 files; a plain state_dict or a
 * trainer's {"g_ema": ...}), GFPGANv1Clean (GFPGANv1.3 / v1.4: {"params_ema": ...}) or
 * CodeFormer (codeformer.pth: {"params_ema": ...}, 512 px). The architecture (size,
 * channels, style width, mapping depth, SFT; CodeFormer's widths, layers, fuse sizes) is
 * read from the tensors' names and shapes, never the file name; a file of another network is
 * refused naming the first tensor that fits none, a tensor of the wrong shape or a missing
 * one by its name. The model's info.kind is "restorer", info.architecture "gpen", "gfpgan"
 * or "codeformer"; it maps an aligned face of info.min_side x info.min_side (its only size)
 * in [-1, 1] to the restored face. Free with ag_model_destroy; engines over it share its
 * weights.
 */
int ag_restore_model_load(const char *path, ag_model **out, ag_error *err);
int ag_restore_model_load_memory(const void *data, size_t size, const char *label, ag_model **out,
                                 ag_error *err);

/*
 * Make now what engines of `precision` over `model` share and would otherwise make at their
 * creation (a restorer's bf16 weights), so a server takes that memory at load, before it
 * measures its base. With `only`, keep the weights in that precision only (a bf16
 * restorer's fp32 modulated-conv weights are freed: GPEN-512 holds 150 MB instead of 284),
 * after which engines of another precision over the model are refused. Once per model;
 * thread-safe, but not while engines of another precision exist; a no-op for models
 * without such weights.
 */
int ag_model_prepare_precision(const ag_model *model, ag_precision precision, int only,
                               ag_error *err);

/* How ag_restore_faces works on one photo. */
typedef struct ag_restore_options {
    float fidelity; /* 0-1: weight of the restored face against the original (GPEN's alpha);
                       1 = restored only */
    int max_faces;  /* faces restored, largest first, 1..AG_FACE_MAX (default 8) */
    int aligned;    /* the input is already an aligned face crop: resized to the model's
                       size and restored whole; the output is that size */
    /* CodeFormer's w, 0-1: 0 the codebook's face (most restored), 1 closest to the input
     * (default 0.5); other restorers ignore it */
    float codeformer_fidelity;
    ag_step_progress_fn progress; /* NULL: none; steps are faces */
    void *progress_user;
} ag_restore_options;

/* Defaults: fidelity 1, max_faces 8, not aligned, codeformer_fidelity 0.5. */
void ag_restore_options_init(ag_restore_options *options);

typedef struct ag_restore_result {
    int found;    /* faces the detector found */
    int restored; /* faces restored (at most max_faces); 0: `out` equals the input */
} ag_restore_result;

/*
 * Restore the faces of `in` (RGB or RGBA) with `engine`, an engine over a model of
 * ag_restore_model_load: each face detected by `detector` (unused with `aligned`; may then
 * be NULL) is cropped FFHQ-aligned at the model's size, restored, blended by the fidelity
 * and pasted back through the feathered face mask; pixels outside the masks are the input's.
 * A photo without faces comes back unchanged (result->restored 0). `out` is initialised by
 * the call and owned by the caller; `options` NULL: defaults; `result` may be NULL. One
 * face at a time: the memory is the engine's arena plus two crops.
 */
int ag_restore_faces(ag_engine *engine, ag_face_detector *detector, const ag_image *in,
                     const ag_restore_options *options, ag_image *out, ag_restore_result *result,
                     ag_error *err);

/* ---- one face followed over a clip (src/face/track.c) ------------------------------------ */

/*
 * The face a clip's fusion goes into, frame after frame: chosen in the first frame that has
 * it (the `face`-th, largest first), then followed by overlap with where it was (ties by the
 * landmarks' geometry). When it left the picture or after a cut it is found again by
 * identity with the caller's `embed` (a face-recognition network: the most alike over
 * min_similarity); without one, near where it was last seen, else after a cut the face-th. Its
 * landmarks are smoothed over time by One-Euro filters on the face's pose (centroid, size, angle)
 * and on its shape with the pose taken off (speeds in face sizes, so the same at any resolution),
 * restarted at a cut (the frame's thumbnail changed by more than cut_threshold) or when the face
 * was lost. The state is a fixed ~20 KiB whatever the clip's length.
 */
#define AG_FACE_EMBED_MAX 512 /* floats of an embedding */

/* The embedding of `face` in `frame` into vec[0..*dim) (at most AG_FACE_EMBED_MAX); 0 or an
 * AG_E_* code. Compared by cosine similarity. */
typedef int (*ag_face_embed_fn)(void *user, const ag_image *frame, const ag_face *face, float *vec,
                                int *dim);

typedef struct ag_face_track_options {
    int face;               /* 1-based: which face starts the track (default 1, the largest) */
    float min_cutoff;       /* One-Euro on the pose (centroid, size, angle): the cutoff at rest,
                               cycles a frame (default 0.05) */
    float beta;             /* its rise with speed, per face radius a frame (default 80) */
    float shape_cutoff;     /* the same on the shape, the pose taken off (default 0.02) */
    float shape_beta;       /* (default 20) */
    float cut_threshold;    /* mean grey change of the 16x16 thumbnail that is a cut (default 28) */
    float min_overlap;      /* IoU with the last box that follows the face (default 0.3) */
    float min_similarity;   /* `embed`'s cosine that finds it again (default 0.5; 0.9 for
                               ag_face_embed's descriptors: dlib's 0.6 at their norm ~1.4) */
    ag_face_embed_fn embed; /* NULL: none (ties are decided by the landmarks' geometry) */
    void *embed_user;
    /* With `embed`: the identity to follow from the start (e.g. --target-like's descriptor,
     * reference_dim floats) in place of the first frame's face-th; NULL: none. */
    const float *reference;
    int reference_dim;
} ag_face_track_options;

typedef struct ag_face_track ag_face_track;

void ag_face_track_options_init(ag_face_track_options *options);
int ag_face_track_create(const ag_face_track_options *options, ag_face_track **out, ag_error *err);
void ag_face_track_destroy(ag_face_track *track);
/* Forget everything (a new clip, or a segment that starts elsewhere). */
void ag_face_track_reset(ag_face_track *track);

/*
 * The tracked face among faces[0..count) of `frame` (ag_faces_detect's, largest first):
 * *index, with *smoothed that face with its landmarks (and box, quad) smoothed; *index -1
 * when it is not in this frame (*smoothed untouched). Frames in order, one clip. AG_OK, or
 * the embedding's error.
 */
int ag_face_track_update(ag_face_track *track, const ag_image *frame, const ag_face *faces,
                         int count, int *index, ag_face *smoothed, ag_error *err);

/* 1 with the box (x0, y0, x1, y1) where the face was in the last frame, 0 when it was not
 * there: a caller may then detect more cheaply (the whole-image pass only, when the face is
 * large). */
int ag_face_track_last_box(const ag_face_track *track, float box[4]);

/* Counters of a track's decisions (tests, reports). */
typedef struct ag_face_track_stats {
    int64_t frames, found, cuts, lost, reacquired;
} ag_face_track_stats;
void ag_face_track_get_stats(const ag_face_track *track, ag_face_track_stats *out);

/* ---- the pipeline (src/pipeline/) ------------------------------------------------------ */

/*
 * One request on one image, as every front end describes it (the CLI's convert, restore and
 * upscale, the server's worker, the Python module, each video frame): which steps run, in
 * this order, over which engines and with which options. A step whose engine is NULL is
 * skipped. The front ends only parse their input into this and call ag_pipeline_run.
 */
typedef enum ag_pipeline_step {
    AG_STEP_FUSE,    /* a source face fused into a face of the image (ag_face_fuse) */
    AG_STEP_RESTORE, /* restore faces (GPEN, GFPGAN) */
    AG_STEP_STYLIZE, /* the style (or the caller's face-aware variant) */
    AG_STEP_UPSCALE, /* tiled upscaling */
    AG_STEP_COUNT
} ag_pipeline_step;

/* A stylisation in place of ag_stylize (face crops, pasted faces): `out` initialised by it. */
typedef int (*ag_stylize_fn)(void *user, const ag_image *in, ag_image *out, ag_error *err);

typedef struct ag_pipeline {
    /* AG_STEP_FUSE: fuse_source_face of fuse_source (analysed once by the caller) fused into
     * one face of the image: fuse_target when given (the caller chose it), else the one
     * fuse_track follows over a clip's frames (its landmarks smoothed; a frame without it
     * passes through unchanged), else the fuse_target_face-th of the image (1-based, largest
     * first; none: AG_E_ARG). fuse_source NULL: no fusing. */
    const ag_image *fuse_source;
    const ag_face *fuse_source_face;
    const ag_face *fuse_target;
    int fuse_target_face;
    ag_face_track *fuse_track;
    ag_fuse_options fuse;
    ag_engine *restorer;        /* AG_STEP_RESTORE: a restorer's engine, NULL: no restoring */
    ag_face_detector *detector; /* the faces of restoring and fusing (NULL only with
                                   restore.aligned, or fuse_target given) */
    ag_restore_options restore;
    ag_engine *style;      /* AG_STEP_STYLIZE: a generator's engine, NULL: none */
    int side_by_side;      /* the input and the result next to each other */
    ag_stylize_fn stylize; /* non-NULL: runs the step instead of ag_stylize(style) */
    void *stylize_user;
    ag_engine *upscaler; /* AG_STEP_UPSCALE: an upscaler's engine, NULL: no upscaling */
    ag_upscale_options upscale;
    /* Non-NULL: the progress of every step (faces, then tiles) goes here instead of the
     * steps' own options' callbacks; non-zero from it cancels (AG_E_CANCELLED). */
    ag_step_progress_fn progress;
    void *progress_user;
    /* Non-NULL: called as each step starts (a progress bar's stage). */
    void (*step_started)(void *user, ag_pipeline_step step);
} ag_pipeline;

/* What a run did, for the front ends' reports and metrics. */
typedef struct ag_pipeline_result {
    ag_pipeline_step failed; /* the step that failed (AG_STEP_COUNT: none) */
    ag_restore_result faces; /* AG_STEP_RESTORE's counts (zeros when it did not run) */
    int fused;               /* AG_STEP_FUSE: 1 when the face was there and fused */
    int fused_face;          /* its index among the image's faces (largest first), -1: none */
} ag_pipeline_result;

/* The pipeline with no step: fill in what the request asks for. */
void ag_pipeline_init(ag_pipeline *p);

/* "fuse", "restore", "stylize" or "upscale". */
const char *ag_pipeline_step_name(ag_pipeline_step step);

/*
 * Run p's steps on `image`, which the call takes: on return it is empty and `out` (owned by
 * the caller, initialised by the call) holds the result, also when no step ran. On failure
 * `out` is empty and result->failed names the step. Same threads rule as the engines:
 * each engine is used by one thread at a time.
 */
int ag_pipeline_run(const ag_pipeline *p, ag_image *image, ag_image *out,
                    ag_pipeline_result *result, ag_error *err);

/* The same on an image the caller keeps (video frames): `in` is left as it is; with no step
 * `out` is a copy. */
int ag_pipeline_apply(const ag_pipeline *p, const ag_image *in, ag_image *out,
                      ag_pipeline_result *result, ag_error *err);

/*
 * The options of the steps, declared once (src/pipeline/options.c): each row names the
 * option as every front end spells it, with its type, range or choices, default and help.
 * The CLI's parsers, the API's query/form parser and Python's keywords take their ranges and
 * choices from here, and the CLI's --help prints its step options from the rows; test_cli,
 * test_server_parsers and tests/python/test_options.py check the front ends and docs/api.md
 * against it.
 */
typedef enum ag_option_type {
    AG_OPTION_FLAG,  /* no value (CLI), 0/1 (API), bool (Python) */
    AG_OPTION_INT,   /* in [min, max] */
    AG_OPTION_FLOAT, /* in [min, max] */
    AG_OPTION_TEXT,  /* a name, a file or a choice */
} ag_option_type;

/* Which CLI commands take an option (bits of ag_step_option.commands). */
enum { AG_CMD_CONVERT = 1, AG_CMD_RESTORE = 2, AG_CMD_UPSCALE = 4, AG_CMD_FUSE = 8 };

typedef struct ag_step_option {
    ag_pipeline_step step;
    const char *name;    /* the CLI's long option: "fidelity" for --fidelity */
    int commands;        /* AG_CMD_* bits: the commands whose tables hold it */
    const char *query;   /* the API's query parameter; NULL: not on the API */
    const char *keyword; /* Python's keyword argument; NULL: not in Python */
    ag_option_type type;
    double min, max, def;       /* with choices: def is the default's index, or -1 for none */
    const char *arg;            /* the value in --help ("N", "PATH"); NULL for a flag */
    const char *const *choices; /* a fixed set of values, NULL-terminated; NULL: any */
    const char *help; /* what it does, for --help (which adds the range, default and choices) */
} ag_step_option;

/* The table: *count rows, in step order. */
const ag_step_option *ag_step_options(int *count);

/* The row of CLI option `name`; NULL when no step has it. */
const ag_step_option *ag_step_option_find(const char *name);

/* The row of CLI option `name` that one of the AG_CMD_* `commands` takes ("size" is both
 * convert's portrait size and fuse's output side); NULL when none. */
const ag_step_option *ag_step_option_of(int commands, const char *name);

/* The row of API query parameter `query`; NULL when no step has it. */
const ag_step_option *ag_step_option_query(const char *query);

/* The index of `value` among the row's choices; -1 when it is none of them (or the row has
 * no choices, or `value` is NULL). */
int ag_step_option_choice(const ag_step_option *o, const char *value);

/* The row's choices as a list, then `extra` (NULL-terminated values a front end also takes,
 * or NULL): "normal, blend or overlay". Returns `buf` (truncated to `cap`). */
const char *ag_step_option_choices(const ag_step_option *o, const char *const *extra, char *buf,
                                   size_t cap);

/* The one refusal of a value not among the row's choices, as every front end words it:
 * "<spelled> must be normal, blend or overlay, not '<value>'" (spelled: "--mode", "mode";
 * value as the caller quotes it). Returns `buf`. */
const char *ag_step_option_refusal(const ag_step_option *o, const char *spelled,
                                   const char *const *extra, const char *value, char *buf,
                                   size_t cap);

/* ---- video and animated images --------------------------------------------------------- */

/*
 * Video is converted as a stream, frame by frame, with FFmpeg's libraries: one thread demuxes
 * and decodes, the caller's thread stylises, one thread encodes and muxes. Between them sit
 * two queues of `queue_frames` frames each, so at most 2 x queue_frames + 3 decoded frames
 * (plus the encoder's own look-ahead, capped at AG_VIDEO_LOOKAHEAD) exist at any time,
 * whatever the length of the clip. Timestamps are copied frame by frame (a variable frame
 * rate stays variable), rotation metadata is applied to the pixels, colour range and matrix
 * are kept, audio is copied when the output container takes its codec and re-encoded
 * otherwise. The output is written to a temporary file in the target directory and renamed
 * at the end: an error or a cancel leaves no file.
 */

#define AG_VIDEO_LOOKAHEAD 8 /* frames the H.264 / VP9 encoder may hold for rate control */

typedef struct ag_video_info {
    char container[32];   /* demuxer name, e.g. "mov,mp4,m4a,3gp,3g2,mj2" -> "mov" */
    char video_codec[32]; /* e.g. "h264" */
    char audio_codec[32]; /* first audio stream's codec, "" when none */
    int width, height;    /* as displayed: rotation applied */
    int rotation;         /* degrees clockwise applied to the coded frames: 0, 90, 180, 270 */
    double fps;           /* average frame rate (0 when unknown) */
    double duration_s;    /* container duration (0 when unknown) */
    int64_t frames;       /* frame count from the header, or duration x fps; 0 when unknown */
    int audio_streams;
} ag_video_info;

typedef struct ag_video_limits {
    size_t max_pixels;  /* refuse frames whose header has more; 0 = 16.7 M */
    double max_seconds; /* refuse containers that declare longer; 0 = no limit */
    int64_t max_frames; /* refuse inputs that declare (or reach) more frames; 0 = no limit */
} ag_video_limits;

/*
 * Open the container at `path` (or the bytes in memory) and read its header only: refuses
 * a still image (AG_E_UNSUPPORTED, naming its format), no video stream, an unknown codec,
 * frames or a duration beyond `limits` (AG_E_LIMIT), all before decoding a frame. Nested
 * files (playlists, references) are never opened. `limits` may be NULL.
 */
int ag_video_probe(const char *path, const ag_video_limits *limits, ag_video_info *info,
                   ag_error *err);
int ag_video_probe_memory(const void *data, size_t size, const ag_video_limits *limits,
                          ag_video_info *info, ag_error *err);

/* 1 when `path` names a container we write (.mp4, .mov, .mkv, .webm, or .webp: an
 * animated WebP, frames only), else 0. */
int ag_video_output_supported(const char *path);

/* Called on the converting thread after each frame; return nonzero to cancel. */
typedef int (*ag_video_progress_fn)(void *user, int64_t frames_done, int64_t frames_total);
/* Stylise one frame (RGB, 3 bands) into `out` (initialised by the call), as ag_stylize does. */
typedef int (*ag_video_stylize_fn)(void *user, const ag_image *in, int side_by_side, ag_image *out,
                                   ag_error *err);

typedef struct ag_video_options {
    ag_video_limits limits;
    int max_side;       /* downscale frames whose long side exceeds this; 0 = never */
    int side_by_side;   /* input and result next to each other */
    int crf;            /* quality, lower is better: H.264 0-51 (18), VP9 0-63 (31); -1 default */
    const char *preset; /* x264 preset (NULL: "medium"); ignored for VP9 */
    double start_s;     /* convert from this time */
    double duration_s;  /* and this long; 0 = to the end */
    int queue_frames;   /* frames between the threads, each way; 0 = 2 */
    ag_video_progress_fn progress;
    void *progress_user;
    ag_video_stylize_fn stylize; /* NULL: ag_stylize with the engine passed to the call */
    void *stylize_user;
    /* stylize's frames are this many times the frame's sides (an upscaler after the style);
     * 0 or 1: the frame's size. Frames beyond 16384 px a side are refused before decoding. */
    int out_scale;
    /* Polled between demuxed packets (the reader thread, so it must be thread-safe), also
     * where no frame is stylised (sound after the last frame): nonzero cancels. NULL: none. */
    int (*cancelled)(void *user);
    void *cancelled_user;
    size_t max_output_bytes; /* fail (AG_E_LIMIT) when the output grows past it; 0 = none */
    int private_output;      /* 1: the result is created 0600 (a spool), else 0644 */
    /* NULL: the whole clip. Else only the segment's frames, encoded as the whole clip's
     * conversion would encode them, without sound, into a segment file for ag_video_join. */
    const struct ag_video_segment *segment;
} ag_video_options;

void ag_video_options_init(ag_video_options *options);

typedef struct ag_video_result {
    int64_t frames;                                 /* frames written */
    int width, height;                              /* of the output frames */
    double duration_s;                              /* of the output video stream */
    int audio_copied, audio_encoded, audio_dropped; /* streams */
    char audio_note[160]; /* one line saying what happened to the sound, "" without audio */
} ag_video_result;

/*
 * Convert the video at `in_path` into `out_path` (container from its extension: .mp4, .mov,
 * .mkv take H.264, .webm VP9, .webp becomes an animated WebP without sound). `engine` is used from
 * the calling thread only (unless options->stylize replaces it). Returns 0, AG_E_CANCELLED when the
 * progress callback asked, or another AG_E_* code; on any failure no output file exists.
 */
int ag_video_convert(ag_engine *engine, const char *in_path, const char *out_path,
                     const ag_video_options *options, ag_video_result *result, ag_error *err);

/* ---- one clip over several workers: segments cut at keyframes, then joined ---------------- */

#define AG_VIDEO_MAX_SEGMENTS 64

/* The frames with from_pts <= pts < to_pts (the input video stream's time base; INT64_MIN
 * and INT64_MAX leave an end open), for the output named `container` (its extension picks
 * the encoder, as ag_video_convert's out_path does). */
typedef struct ag_video_segment {
    int64_t from_pts, to_pts;
    const char *container;
} ag_video_segment;

/*
 * Cut the clip at `path` at keyframes at least `seconds` apart (a demux of the video
 * packets, nothing decoded): cuts[0..*count] are the segments' boundaries (cuts[0] is
 * INT64_MIN, cuts[*count] INT64_MAX). *count is 1 when the clip is no longer than `seconds`,
 * has no keyframe to cut at, or is not in MP4/MOV or Matroska/WebM (whose indexes let each
 * segment seek to its keyframe exactly); at most AG_VIDEO_MAX_SEGMENTS (the last segment is
 * then longer). A last piece shorter than seconds / 2 joins the one before.
 */
int ag_video_plan_segments(const char *path, double seconds, const ag_video_limits *limits,
                           int64_t cuts[AG_VIDEO_MAX_SEGMENTS + 1], int *count, ag_error *err);

/*
 * Join the segment files (ag_video_convert with options->segment, in order) into out_path,
 * with the sound of `in_path` copied or re-encoded once, as ag_video_convert(in_path,
 * out_path, options) would write it: the same frames, timestamps and durations, the audio
 * packets the same bytes. options->segment is ignored. AG_E_FORMAT when a segment file is
 * damaged or does not follow the one before it.
 */
int ag_video_join(const char *in_path, const char *const *segments, int count, const char *out_path,
                  const ag_video_options *options, ag_video_result *result, ag_error *err);

/* Bytes of frame buffers a conversion of frames of width x height (after max_side) holds
 * at most, excluding the engines' arenas (out_scale included): what a memory budget adds
 * for the video path. */
size_t ag_video_frame_bytes(int width, int height, const ag_video_options *options);

/* ---- memory accounting ----------------------------------------------------------------- */

/* Every heap allocation of the library goes through these; counts feed metrics. */
void *ag_malloc(size_t size); /* NULL on failure */
void *ag_calloc(size_t count, size_t size);
void *ag_realloc(void *ptr, size_t size);
void ag_free(void *ptr);
size_t ag_allocated_bytes(void); /* live bytes allocated through ag_malloc */
size_t ag_allocated_peak_bytes(void);

/* CPUs this process may run on (its affinity mask): the default thread count. */
int ag_cpu_count(void);

/*
 * The one integer parser of every front end (command-line options of every subcommand, the
 * server's options, query parameters): "0", or an optional '-' and digits without a
 * leading zero, and nothing else (no '+', space, suffix, "0x"). Returns AG_OK and sets *out,
 * AG_E_ARG when `text` is not such a number, AG_E_LIMIT when it is outside [min, max].
 */
int ag_parse_int64(const char *text, long long min, long long max, long long *out);

/* ---- the clock (src/util/clock.c) ------------------------------------------------------- */

/* Microseconds of CLOCK_MONOTONIC: every duration, deadline and TTL of the library and the
 * front ends. Thread-safe. */
uint64_t ag_now_us(void);

/* Replace the clock (tests that step time by hand); NULL restores CLOCK_MONOTONIC. Set it
 * before the threads that read the clock start. */
typedef uint64_t (*ag_clock_fn)(void);
void ag_clock_hook(ag_clock_fn clock);

/* ---- the CPU and the precision it runs best ----------------------------------------------- */

/* Instruction-set features the CPU reports (cpuid) and the OS enables (xgetbv). */
enum {
    AG_CPU_AVX2 = 1u << 0,
    AG_CPU_FMA = 1u << 1,
    AG_CPU_AVX512F = 1u << 2,
    AG_CPU_AVX512BW = 1u << 3,
    AG_CPU_AVX512VL = 1u << 4,
    AG_CPU_AVX512DQ = 1u << 5,
    AG_CPU_AVX512CD = 1u << 6,
    AG_CPU_AVX512_VNNI = 1u << 7,
    AG_CPU_AVX_VNNI = 1u << 8,
    AG_CPU_AVX512_BF16 = 1u << 9,
    AG_CPU_AMX_TILE = 1u << 10,
    AG_CPU_AMX_INT8 = 1u << 11,
    AG_CPU_AMX_BF16 = 1u << 12,
};
#define AG_CPU_FLAG_COUNT 13

/* The variants our fused passes are compiled for, best last. */
typedef enum ag_isa {
    AG_ISA_GENERIC = 0, /* baseline x86-64 (SSE2), or the build's default elsewhere */
    AG_ISA_AVX2,        /* x86-64-v3: AVX2, FMA, F16C, BMI */
    AG_ISA_AVX512,      /* x86-64-v4: AVX-512 F, BW, VL, DQ, CD */
} ag_isa;

typedef struct ag_cpu_info {
    char model[64];       /* cpuid brand string, else /proc/cpuinfo's model name; "unknown" */
    char vendor[16];      /* cpuid vendor: "GenuineIntel", "AuthenticAMD", ...; "" if none */
    unsigned flags;       /* AG_CPU_* bits */
    char flags_text[160]; /* the flags as /proc/cpuinfo names them: "avx2 fma avx512f ..." */
    ag_isa best_isa;      /* the best variant this CPU runs */
    ag_isa isa;           /* the variant in use: best_isa, or lower when ANIMEGAN_ISA says so */
    /* One line for the user when ANIMEGAN_ISA was not honoured as written (unknown value, or
     * above what the CPU runs), else "". */
    char isa_note[160];
    /* oneDNN's effective ISA ("avx512_core_bf16", "avx2", ...: its detection lowered by
     * ONEDNN_MAX_CPU_ISA) and the subset of `flags` it leaves to its convolutions. */
    char onednn_isa[32];
    unsigned onednn_flags;
} ag_cpu_info;

/*
 * This CPU, detected once per process (thread-safe; later calls return the same object).
 * ANIMEGAN_ISA=avx512|avx2|generic (or AG_NOSIMD=1, = generic) lowers `isa`; it never raises
 * it above `best_isa`. oneDNN has its own limit, ONEDNN_MAX_CPU_ISA (e.g. AVX2).
 */
const ag_cpu_info *ag_cpu_get_info(void);

/* "generic", "avx2", "avx512"; ag_isa_parse returns -1 when unknown. */
const char *ag_isa_name(ag_isa isa);
int ag_isa_parse(const char *text);

/* "fp32", "bf16", "int8", "auto"; ag_precision_parse returns -1 when unknown. */
const char *ag_precision_name(ag_precision precision);
int ag_precision_parse(const char *text);

typedef struct ag_precision_choice {
    ag_precision precision; /* never AG_PRECISION_AUTO */
    int emulated;           /* 1: this CPU has no native instructions for it (slower) */
    char note[200];         /* why auto chose it, or the warning for an emulated one */
} ag_precision_choice;

/*
 * The one place that decides which precision runs. AUTO picks the fastest precision that is
 * available in the engine, meets its quality bar (PSNR against fp32; see docs/benchmarks.md)
 * and is native on `cpu` (NULL: this CPU) for `backend`; it never picks an emulated one, nor
 * a native one measured slower than fp32 on such CPUs (bf16 on Intel without AMX). An
 * explicit precision is kept as asked, with `emulated` set (and a warning in `note`) when the
 * CPU, or oneDNN as limited by ONEDNN_MAX_CPU_ISA (`onednn_flags`), lacks its instructions.
 * Returns 0; AG_E_UNSUPPORTED (reason in `note`) when the CPU cannot run it at all (bf16
 * below AVX-512); AG_E_ARG for a value outside the enum.
 */
int ag_precision_resolve(ag_precision requested, ag_backend backend, const ag_cpu_info *cpu,
                         ag_precision_choice *out);

/*
 * The precision a face restorer (ag_restore_model_load) runs in: fp32, or bf16 (its
 * modulated convs' products in bf16, activations fp32). AUTO, and INT8 (restorers have no
 * int8), pick bf16 where it is native and faster (as for generators), else fp32; FP32 and
 * BF16 are resolved as ag_precision_resolve does on the oneDNN backend.
 */
int ag_restore_precision_resolve(ag_precision requested, const ag_cpu_info *cpu,
                                 ag_precision_choice *out);

/* Resident set size of the process now / at its peak, in bytes (from /proc). */
size_t ag_process_rss_bytes(void);
size_t ag_process_peak_rss_bytes(void);

#ifdef __cplusplus
}
#endif
#endif
