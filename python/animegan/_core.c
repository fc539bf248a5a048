/*
 * _core.c - the CPython extension under `import animegan`: thin types over include/animegan.h,
 * on the stable ABI (Python 3.11+: the buffer protocol is part of it from 3.11).
 *
 *   Weights   an ag_model (immutable; shared by every Engine over it)
 *   Engine    an ag_engine: one arena, used by one thread at a time (a busy flag refuses a
 *             second caller instead of racing; animegan/__init__.py pools engines)
 *   Detector  an ag_face_detector over the two bundled face models
 *   Pixels    an ag_image the library allocated, exported through the buffer protocol so
 *             numpy and PIL wrap it without a copy; ag_image_fini when the last view goes
 *
 * Every call into the library runs with the GIL released. Errors become animegan.Error
 * subclasses carrying the library's one-line message. The policy (pools, caches, numpy/PIL
 * conversion) lives in Python; this file only moves pixels and maps errors.
 */
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030B0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <animegan.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* ---- errors -------------------------------------------------------------------------------- */

static PyObject *Error, *InputError, *ModelError, *FileError, *OutOfMemoryError;

/* Where the failure happened decides the class: a model file's fault, or the input's. */
typedef enum { AT_LOAD, AT_RUN } error_site;

static PyObject *raise_error(const ag_error *err, error_site site) {
    PyObject *type = Error;
    if (err->code == AG_E_NOMEM)
        type = OutOfMemoryError;
    else if (site == AT_LOAD)
        type = ModelError;
    else if (err->code == AG_E_IO)
        type = FileError;
    else if (err->code != AG_E_INTERNAL && err->code != AG_E_CANCELLED)
        type = InputError;
    const char *text = err->message[0] ? err->message : ag_error_name(err->code);
    PyObject *exc = PyObject_CallFunction(type, "s", text);
    if (!exc)
        return NULL;
    PyObject *code = PyLong_FromLong(err->code);
    PyObject *name = PyUnicode_FromString(ag_error_name(err->code));
    if (code && name && PyObject_SetAttrString(exc, "code", code) == 0 &&
        PyObject_SetAttrString(exc, "code_name", name) == 0)
        PyErr_SetObject(type, exc);
    Py_XDECREF(code);
    Py_XDECREF(name);
    Py_DECREF(exc);
    return NULL;
}

static PyObject *input_error(const char *message) {
    ag_error err = {.code = AG_E_ARG};
    snprintf(err.message, sizeof err.message, "%s", message);
    return raise_error(&err, AT_RUN);
}

/* Keyword `name`'s row of the step table (src/pipeline/options.c: the CLI's --name of
 * `command`): 0 when `value` is in the row's range or is its default, else -1 with an
 * InputError that states the range. */
static int outside_row(int command, const char *name, double value) {
    const ag_step_option *o = ag_step_option_of(command, name);
    char message[96];
    if (!o)
        return PyErr_Format(PyExc_SystemError, "--%s: no row in the step table", name), -1;
    if (value == o->def || (value >= o->min && value <= o->max))
        return 0;
    snprintf(message, sizeof message, "%s: must be %g to %g", o->keyword ? o->keyword : name,
             o->min, o->max);
    input_error(message);
    return -1;
}

/* The row of Python keyword `keyword` (NULL: none). */
static const ag_step_option *keyword_row(const char *keyword) {
    int count;
    const ag_step_option *o = ag_step_options(&count);
    for (int i = 0; i < count; i++)
        if (o[i].keyword && !strcmp(o[i].keyword, keyword))
            return &o[i];
    return NULL;
}

/* `value`'s index among keyword's row's choices; -1 with the row's InputError ("mode must be
 * normal, blend or overlay, not 'x'", `extra`: what else this call takes) otherwise. */
static int row_choice(const char *keyword, const char *value, const char *shown,
                      const char *const *extra) {
    const ag_step_option *o = keyword_row(keyword);
    int i = o ? ag_step_option_choice(o, value) : -1;
    if (i >= 0)
        return i;
    if (!o || !o->choices)
        return PyErr_Format(PyExc_SystemError, "%s: no choice row in the step table", keyword), -1;
    char message[256], quoted[40];
    snprintf(quoted, sizeof quoted, "%.32s", shown ? shown : "");
    input_error(ag_step_option_refusal(o, keyword, extra, quoted, message, sizeof message));
    return -1;
}

/* One caller at a time on an engine or detector: a second one is a bug in the caller's
 * pooling, refused rather than allowed to corrupt the arena. */
static int claim(atomic_int *busy, const char *what) {
    int expected = 0;
    if (atomic_compare_exchange_strong(busy, &expected, 1))
        return 0;
    PyErr_Format(PyExc_RuntimeError, "this %s is in use by another thread", what);
    return -1;
}

/* Text option -> enum through the library's own parser; -1 (with InputError) when unknown. */
static int parse_choice(const char *text, int (*parse)(const char *), const char *what,
                        const char *allowed) {
    int value = parse(text);
    if (value < 0) {
        char message[160];
        snprintf(message, sizeof message, "%s: '%.32s' is not %s", what, text, allowed);
        input_error(message);
    }
    return value;
}

/* ---- Pixels: an ag_image exported as a (height, width, bands) uint8 buffer ------------------ */

typedef struct {
    PyObject ob_base;
    ag_image image;
    Py_ssize_t shape[3], strides[3];
} PixelsObject;

static PyTypeObject *PixelsType;

/* Takes ownership of `image` (finalised on failure too). */
static PyObject *pixels_new(ag_image *image) {
    PixelsObject *self = PyObject_New(PixelsObject, PixelsType);
    if (!self) {
        ag_image_fini(image);
        return NULL;
    }
    self->image = *image;
    memset(image, 0, sizeof *image);
    self->shape[0] = self->image.height;
    self->shape[1] = self->image.width;
    self->shape[2] = self->image.bands;
    self->strides[2] = 1;
    self->strides[1] = self->image.bands;
    self->strides[0] = (Py_ssize_t)self->image.width * self->image.bands;
    return (PyObject *)self;
}

static void pixels_dealloc(PyObject *obj) {
    PixelsObject *self = (PixelsObject *)obj;
    PyTypeObject *type = Py_TYPE(obj);
    ag_image_fini(&self->image);
    PyObject_Free(obj);
    Py_DECREF(type);
}

static int pixels_getbuffer(PyObject *obj, Py_buffer *view, int flags) {
    PixelsObject *self = (PixelsObject *)obj;
    (void)flags; /* C-contiguous, writable: satisfies every request */
    view->obj = Py_NewRef(obj);
    view->buf = self->image.pixels;
    view->len = self->shape[0] * self->strides[0];
    view->readonly = 0;
    view->itemsize = 1;
    view->format = (flags & PyBUF_FORMAT) ? "B" : NULL;
    view->ndim = 3;
    view->shape = (flags & PyBUF_ND) ? self->shape : NULL;
    view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? self->strides : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    return 0;
}

static void pixels_releasebuffer(PyObject *obj, Py_buffer *view) {
    (void)obj;
    (void)view;
}

static PyObject *pixels_get_size(PyObject *obj, void *closure) {
    PixelsObject *self = (PixelsObject *)obj;
    (void)closure;
    return Py_BuildValue("(iii)", self->image.height, self->image.width, self->image.bands);
}

static PyGetSetDef pixels_getset[] = {
    {"shape", pixels_get_size, NULL, "(height, width, bands)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot pixels_slots[] = {
    {Py_tp_doc, "8-bit RGB(A) pixels owned by the library, exported without a copy."},
    {Py_tp_dealloc, pixels_dealloc},
    {Py_tp_getset, pixels_getset},
    {Py_bf_getbuffer, pixels_getbuffer},
    {Py_bf_releasebuffer, pixels_releasebuffer},
    {0, NULL},
};

static PyType_Spec pixels_spec = {"animegan._core.Pixels", sizeof(PixelsObject), 0,
                                  Py_TPFLAGS_DEFAULT, pixels_slots};

/* ---- input images: any C-contiguous (height, width, 3 or 4) uint8 buffer -------------------- */

/* Fills `image` pointing into `view` (no copy); the caller releases `view` on success. */
static int image_from_object(PyObject *src, Py_buffer *view, ag_image *image) {
    if (PyObject_GetBuffer(src, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
        PyErr_Clear();
        input_error("image: expected a C-contiguous uint8 buffer of shape (height, width, 3 or 4)");
        return -1;
    }
    const char *format = view->format ? view->format : "B";
    if (format[0] == '=' || format[0] == '<' || format[0] == '>' || format[0] == '|' ||
        format[0] == '@')
        format++;
    char message[160];
    if (view->itemsize != 1 || strcmp(format, "B") != 0)
        snprintf(message, sizeof message, "image: expected uint8 pixels, got format '%s'",
                 view->format ? view->format : "?");
    else if (view->ndim != 3 || (view->shape[2] != 3 && view->shape[2] != 4))
        snprintf(message, sizeof message,
                 "image: expected shape (height, width, 3 or 4), got %d dimension(s)%s", view->ndim,
                 view->ndim == 3 ? " with neither 3 nor 4 bands" : "");
    else if (view->shape[0] > INT_MAX / 4 || view->shape[1] > INT_MAX / 4)
        snprintf(message, sizeof message, "image: %zd x %zd is too large", view->shape[1],
                 view->shape[0]);
    else if (view->shape[0] == 0 || view->shape[1] == 0)
        snprintf(message, sizeof message, "image: %zd x %zd has no pixels", view->shape[1],
                 view->shape[0]);
    else
        message[0] = '\0';
    if (message[0]) {
        PyBuffer_Release(view);
        input_error(message);
        return -1;
    }
    *image = (ag_image){.width = (int)view->shape[1],
                        .height = (int)view->shape[0],
                        .bands = (int)view->shape[2],
                        .pixels = view->buf};
    return 0;
}

/* ---- Weights ----------------------------------------------------------------------------- */

typedef struct {
    PyObject ob_base;
    ag_model *model;
} WeightsObject;

static PyTypeObject *WeightsType;

/* Every kind the CLI loads, as its commands do: a style or any model file (ag_model_load;
 * upscalers' .pth files among them), else a GPEN / GFPGAN / CodeFormer checkpoint, else a bundled
 * upscaler family at `scale`. A file none of them takes gets the first loader's message. */
static int load_any(const char *name, int scale, ag_model **out, ag_error *err) {
    int rc = scale ? AG_E_NOTFOUND : ag_model_load(name, out, err);
    if (rc == AG_OK || rc == AG_E_IO || rc == AG_E_NOMEM)
        return rc;
    ag_error other = {0};
    if (!scale && ag_restore_model_load(name, out, &other) == AG_OK)
        return AG_OK;
    if (ag_upscaler_load(name, scale, out, &other) == AG_OK)
        return AG_OK;
    if (scale)
        *err = other;
    return err->code ? err->code : rc;
}

static int weights_init(PyObject *obj, PyObject *args, PyObject *kwargs) {
    WeightsObject *self = (WeightsObject *)obj;
    static char *keywords[] = {"name_or_path", "scale", NULL};
    const char *name;
    int scale = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|i", keywords, &name, &scale))
        return -1;
    if (self->model)
        return PyErr_SetString(PyExc_RuntimeError, "Weights already loaded"), -1;
    ag_error err = {0};
    ag_model *model = NULL;
    int rc;
    PyThreadState *ts = PyEval_SaveThread();
    rc = load_any(name, scale, &model, &err);
    PyEval_RestoreThread(ts);
    if (rc)
        return raise_error(&err, AT_LOAD), -1;
    self->model = model;
    return 0;
}

static void weights_dealloc(PyObject *obj) {
    WeightsObject *self = (WeightsObject *)obj;
    PyTypeObject *type = Py_TYPE(obj);
    ag_model_destroy(self->model);
    PyObject_Free(obj);
    Py_DECREF(type);
}

static int need_model(WeightsObject *self) {
    if (self->model)
        return 0;
    PyErr_SetString(PyExc_RuntimeError, "Weights not loaded");
    return -1;
}

static PyObject *weights_info(PyObject *obj, PyObject *unused) {
    WeightsObject *self = (WeightsObject *)obj;
    (void)unused;
    if (need_model(self))
        return NULL;
    const ag_model_info *i = ag_model_get_info(self->model);
    return Py_BuildValue("{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:n,s:n,s:i,s:s}", "name", i->name, "path",
                         i->path, "format", i->format, "architecture", i->architecture, "style",
                         i->style, "kind", i->kind, "license", i->license, "param_count",
                         (Py_ssize_t)i->param_count, "weight_bytes", (Py_ssize_t)i->weight_bytes,
                         "min_side", i->min_side, "upsample", ag_resize_mode_name(i->resize));
}

static PyMethodDef weights_methods[] = {
    {"info", weights_info, METH_NOARGS, "The model's description (ag_model_info) as a dict."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot weights_slots[] = {
    {Py_tp_doc, "Weights(name_or_path): a loaded model file (immutable, shareable)."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, weights_init},
    {Py_tp_dealloc, weights_dealloc},
    {Py_tp_methods, weights_methods},
    {0, NULL},
};

static PyType_Spec weights_spec = {"animegan._core.Weights", sizeof(WeightsObject), 0,
                                   Py_TPFLAGS_DEFAULT, weights_slots};

/* ---- Detector ------------------------------------------------------------------------------ */

typedef struct {
    PyObject ob_base;
    ag_model *detect, *mesh;
    ag_face_detector *detector;
    ag_engine_options options;
    ag_model *embed;            /* face-recognition, loaded at the first target_like */
    ag_face_embedder *embedder; /* likewise */
    atomic_int busy;
} DetectorObject;

static PyTypeObject *DetectorType;

static int detector_init(PyObject *obj, PyObject *args, PyObject *kwargs) {
    DetectorObject *self = (DetectorObject *)obj;
    static char *keywords[] = {"threads", NULL};
    int threads = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|i", keywords, &threads))
        return -1;
    if (self->detector)
        return PyErr_SetString(PyExc_RuntimeError, "Detector already created"), -1;
    /* As `animegan convert` sets it up (cli/faces.c): fp32, the model's own upsampling. */
    ag_engine_options options = {.backend = AG_BACKEND_ONEDNN,
                                 .precision = AG_PRECISION_FP32,
                                 .threads = threads > 0 ? threads : ag_cpu_count()};
    ag_error err = {0};
    int rc;
    self->options = options;
    PyThreadState *ts = PyEval_SaveThread();
    rc = ag_face_models_load(&self->detect, &self->mesh, &err);
    if (rc == AG_OK)
        rc = ag_face_detector_create(self->detect, self->mesh, &options, &self->detector, &err);
    PyEval_RestoreThread(ts);
    if (rc)
        return raise_error(&err, AT_LOAD), -1;
    return 0;
}

static void detector_dealloc(PyObject *obj) {
    DetectorObject *self = (DetectorObject *)obj;
    PyTypeObject *type = Py_TYPE(obj);
    ag_face_embedder_destroy(self->embedder);
    ag_model_destroy(self->embed);
    ag_face_detector_destroy(self->detector);
    ag_model_destroy(self->mesh);
    ag_model_destroy(self->detect);
    PyObject_Free(obj);
    Py_DECREF(type);
}

static PyObject *points(const float (*p)[2], int count) {
    PyObject *list = PyList_New(count);
    for (int i = 0; list && i < count; i++) {
        PyObject *pair = Py_BuildValue("(dd)", (double)p[i][0], (double)p[i][1]);
        if (!pair || PyList_SetItem(list, i, pair) != 0) {
            Py_DECREF(list);
            return NULL;
        }
    }
    return list;
}

static PyObject *face_dict(const ag_face *f) {
    PyObject *landmarks =
        f->has_landmarks ? points(f->landmarks, AG_FACE_LANDMARKS) : Py_NewRef(Py_None);
    if (!landmarks)
        return NULL;
    return Py_BuildValue("{s:d,s:(dddd),s:N,s:N,s:d,s:N}", "score", (double)f->score, "box",
                         (double)f->box[0], (double)f->box[1], (double)f->box[2], (double)f->box[3],
                         "keypoints", points(f->keypoints, 6), "quad", points(f->quad, 4),
                         "presence", (double)f->presence, "landmarks", landmarks);
}

typedef struct face_args {
    ag_face_options options;
    ag_face *faces; /* AG_FACE_MAX, ag_malloc'ed */
    int count, found;
} face_args;

/* Detect with the GIL released; the caller holds the detector's busy flag. */
static int detect_faces(DetectorObject *d, const ag_image *image, face_args *fa, ag_error *err) {
    fa->count = fa->found = 0;
    if (!(fa->faces = ag_malloc(sizeof *fa->faces * AG_FACE_MAX))) {
        err->code = AG_E_NOMEM;
        snprintf(err->message, sizeof err->message, "out of memory");
        return AG_E_NOMEM;
    }
    return ag_faces_detect(d->detector, image, &fa->options, fa->faces, AG_FACE_MAX, &fa->count,
                           &fa->found, err);
}

static PyObject *detector_detect(PyObject *obj, PyObject *args, PyObject *kwargs) {
    DetectorObject *self = (DetectorObject *)obj;
    static char *keywords[] = {"image", "min_score", "max_faces", "landmarks", "single_pass", NULL};
    PyObject *src;
    face_args fa = {0};
    int landmarks = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|fipp", keywords, &src, &fa.options.min_score,
                                     &fa.options.max_faces, &landmarks, &fa.options.single_pass))
        return NULL;
    fa.options.no_landmarks = !landmarks;
    Py_buffer view;
    ag_image image;
    if (!self->detector)
        return PyErr_SetString(PyExc_RuntimeError, "Detector not created"), NULL;
    if (image_from_object(src, &view, &image))
        return NULL;
    if (claim(&self->busy, "detector")) {
        PyBuffer_Release(&view);
        return NULL;
    }
    ag_error err = {0};
    int rc;
    PyThreadState *ts = PyEval_SaveThread();
    rc = detect_faces(self, &image, &fa, &err);
    PyEval_RestoreThread(ts);
    atomic_store(&self->busy, 0);
    PyBuffer_Release(&view);
    PyObject *list = rc ? raise_error(&err, AT_RUN) : PyList_New(fa.count);
    for (int i = 0; list && i < fa.count; i++) {
        PyObject *face = face_dict(&fa.faces[i]);
        if (!face || PyList_SetItem(list, i, face) != 0)
            Py_CLEAR(list);
    }
    ag_free(fa.faces);
    return list;
}

/* source_like / target_like: the largest face of `photo` as a descriptor, the embedder made
 * at the first call (as `animegan fuse --target-like` sets it up). */
static int describe_like(DetectorObject *d, const ag_image *photo, const char *label, float *like,
                         ag_error *err) {
    int rc = AG_OK;
    if (!d->embedder) {
        rc = d->embed ? AG_OK : ag_face_embed_model_load(&d->embed, err);
        rc = rc ? rc : ag_face_embedder_create(d->embed, &d->options, &d->embedder, err);
    }
    return rc ? rc : ag_face_describe(d->detector, d->embedder, photo, label, like, err);
}

/* The n-th (1-based) face of `image` with its landmarks, or (like: a descriptor) the one most
 * like it, as `animegan fuse` picks it. */
static int pick_face(DetectorObject *d, const ag_image *image, const char *which, int n,
                     const float *like, ag_face *faces, ag_face *out, ag_error *err) {
    ag_face_options fo = {.max_faces = AG_FACE_MAX};
    int count = 0;
    int rc = ag_faces_detect(d->detector, image, &fo, faces, AG_FACE_MAX, &count, NULL, err);
    if (rc == AG_OK && like && count > 0) {
        rc = ag_face_most_like(d->embedder, image, faces, count, like, NULL, err);
        n = rc + 1;
    }
    if (rc < 0)
        return rc;
    if (count == 0 || n > count) {
        snprintf(err->message, sizeof err->message, "%s: face %d asked, %d found", which, n, count);
        return err->code = AG_E_ARG;
    }
    *out = faces[n - 1];
    if (!out->has_landmarks) {
        snprintf(err->message, sizeof err->message,
                 "%s: the face has no landmarks (FaceMesh did not confirm it)", which);
        return err->code = AG_E_ARG;
    }
    return AG_OK;
}

typedef struct fuse_args {
    const ag_image *source, *target;
    int source_face, target_face;
    const ag_image *like[2]; /* source_like, target_like; NULL: by number */
    ag_fuse_options options;
} fuse_args;

static int fuse(DetectorObject *d, const fuse_args *a, ag_image *out, ag_error *err) {
    ag_face *faces = ag_malloc(sizeof *faces * (AG_FACE_MAX + 2));
    if (!faces) {
        snprintf(err->message, sizeof err->message, "out of memory");
        return err->code = AG_E_NOMEM;
    }
    ag_face *sf = faces + AG_FACE_MAX, *tf = sf + 1;
    float like[2][AG_FACE_DESCRIPTOR];
    int rc = AG_OK;
    for (int i = 0; i < 2 && rc == AG_OK; i++)
        if (a->like[i])
            rc = describe_like(d, a->like[i], i ? "target_like" : "source_like", like[i], err);
    rc = rc ? rc
            : pick_face(d, a->source, "source", a->source_face, a->like[0] ? like[0] : NULL, faces,
                        sf, err);
    rc = rc ? rc
            : pick_face(d, a->target, "target", a->target_face, a->like[1] ? like[1] : NULL, faces,
                        tf, err);
    rc = rc ? rc : ag_face_fuse(a->source, sf, a->target, tf, &a->options, out, NULL, err);
    ag_free(faces);
    return rc;
}

/* An Engine argument's engine (None: NULL); -1 with a TypeError for anything else. */
static int engine_arg(PyObject *obj, const char *which, ag_engine **out);

static PyObject *detector_fuse(PyObject *obj, PyObject *args, PyObject *kwargs) {
    DetectorObject *self = (DetectorObject *)obj;
    static char *keywords[] = {"source",      "target",        "source_face", "target_face",
                               "shape_ratio", "texture_ratio", "mode",        "smooth",
                               "brightness",  "contrast",      "saturation",  "size",
                               "enhance",     "restorer",      "upscaler",    "paint_occluders",
                               "source_like", "target_like",   NULL};
    PyObject *source, *target, *restorer = Py_None, *upscaler = Py_None;
    PyObject *likes[2] = {Py_None, Py_None};
    const char *mode = "normal", *enhance = "auto";
    int paint = 0;
    fuse_args a = {.source_face = 1, .target_face = 1};
    ag_fuse_options_init(&a.options);
    ag_fuse_options *o = &a.options;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|iiffsffffisOOpOO", keywords, &source,
                                     &target, &a.source_face, &a.target_face, &o->shape_ratio,
                                     &o->texture_ratio, &mode, &o->smooth, &o->brightness,
                                     &o->contrast, &o->saturation, &o->size, &enhance, &restorer,
                                     &upscaler, &paint, &likes[0], &likes[1]))
        return NULL;
    if ((likes[0] != Py_None && a.source_face != 1) || (likes[1] != Py_None && a.target_face != 1))
        return input_error("source_like / target_like and source_face / target_face both choose "
                           "the face");
    int m = row_choice("mode", mode, mode, NULL);
    if (m < 0)
        return NULL;
    o->mode = (ag_fuse_mode)m;
    int e = row_choice("enhance", enhance, enhance, NULL);
    if (e < 0 || engine_arg(restorer, "restorer", &o->restorer) ||
        engine_arg(upscaler, "upscaler", &o->upscaler))
        return NULL;
    o->enhance = (ag_fuse_enhance)e, o->keep_occluders = !paint;
    static const char *const numbers[] = {"source-face",   "target-face", "shape-ratio",
                                          "texture-ratio", "smooth",      "brightness",
                                          "contrast",      "saturation",  "size"};
    const double values[] = {a.source_face,    a.target_face, o->shape_ratio,
                             o->texture_ratio, o->smooth,     o->brightness,
                             o->contrast,      o->saturation, o->size};
    for (int i = 0; i < 9; i++)
        if (outside_row(AG_CMD_FUSE, numbers[i], values[i]))
            return NULL;
    if (!self->detector)
        return PyErr_SetString(PyExc_RuntimeError, "Detector not created"), NULL;
    Py_buffer sv, tv, lv[2];
    ag_image s, t, l[2], out = {0};
    if (image_from_object(source, &sv, &s))
        return NULL;
    if (image_from_object(target, &tv, &t)) {
        PyBuffer_Release(&sv);
        return NULL;
    }
    for (int i = 0; i < 2; i++) {
        if (likes[i] != Py_None && image_from_object(likes[i], &lv[i], &l[i])) {
            for (int j = 0; j < i; j++)
                if (likes[j] != Py_None)
                    PyBuffer_Release(&lv[j]);
            PyBuffer_Release(&tv);
            PyBuffer_Release(&sv);
            return NULL;
        }
        a.like[i] = likes[i] != Py_None ? &l[i] : NULL;
    }
    a.source = &s, a.target = &t;
    int busy = claim(&self->busy, "detector"), rc = AG_OK;
    ag_error err = {0};
    if (!busy) {
        PyThreadState *ts = PyEval_SaveThread();
        rc = fuse(self, &a, &out, &err);
        PyEval_RestoreThread(ts);
        atomic_store(&self->busy, 0);
    }
    for (int i = 0; i < 2; i++)
        if (likes[i] != Py_None)
            PyBuffer_Release(&lv[i]);
    PyBuffer_Release(&tv);
    PyBuffer_Release(&sv);
    if (busy)
        return NULL; /* claim's RuntimeError */
    if (rc)
        return ag_image_fini(&out), raise_error(&err, AT_RUN);
    return pixels_new(&out);
}

static PyMethodDef detector_methods[] = {
    {"detect", (PyCFunction)(void (*)(void))detector_detect, METH_VARARGS | METH_KEYWORDS,
     "detect(image, min_score=0.6, max_faces=8, landmarks=True, single_pass=False) -> list"},
    {"fuse", (PyCFunction)(void (*)(void))detector_fuse, METH_VARARGS | METH_KEYWORDS,
     "fuse(source, target, source_face=1, target_face=1, shape_ratio=0.7, texture_ratio=0.7, "
     "mode='normal', smooth=0, brightness=0, contrast=0, saturation=0, size=0, enhance='auto', "
     "restorer=None, upscaler=None, paint_occluders=False, source_like=None, target_like=None) "
     "-> Pixels"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot detector_slots[] = {
    {Py_tp_doc, "Detector(threads=0): the bundled face detector and landmarks (one caller at "
                "a time)."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, detector_init},
    {Py_tp_dealloc, detector_dealloc},
    {Py_tp_methods, detector_methods},
    {0, NULL},
};

static PyType_Spec detector_spec = {"animegan._core.Detector", sizeof(DetectorObject), 0,
                                    Py_TPFLAGS_DEFAULT, detector_slots};

/* ---- Engine -------------------------------------------------------------------------------- */

typedef struct {
    PyObject ob_base;
    ag_engine *engine;
    PyObject *weights; /* the WeightsObject it runs, kept alive as long as the engine */
    atomic_int busy;
    ag_precision_choice precision;
} EngineObject;

static PyTypeObject *EngineType;

static int engine_arg(PyObject *obj, const char *which, ag_engine **out) {
    *out = NULL;
    if (obj == Py_None)
        return 0;
    if (!PyObject_TypeCheck(obj, EngineType))
        return PyErr_Format(PyExc_TypeError, "%s: expected an Engine or None", which), -1;
    *out = ((EngineObject *)obj)->engine;
    return 0;
}

static int parse_backend(const char *text) {
    return !strcmp(text, "onednn")      ? AG_BACKEND_ONEDNN
           : !strcmp(text, "reference") ? AG_BACKEND_REFERENCE
                                        : -1;
}

static int engine_init(PyObject *obj, PyObject *args, PyObject *kwargs) {
    EngineObject *self = (EngineObject *)obj;
    static char *keywords[] = {"weights", "precision", "threads", "backend", "upsample", NULL};
    PyObject *weights;
    const char *precision = "auto", *backend = "onednn", *upsample = NULL;
    int threads = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!|sisz", keywords, WeightsType, &weights,
                                     &precision, &threads, &backend, &upsample))
        return -1;
    if (self->engine)
        return PyErr_SetString(PyExc_RuntimeError, "Engine already created"), -1;
    if (need_model((WeightsObject *)weights))
        return -1;
    ag_engine_options o = {.threads = threads > 0 ? threads : ag_cpu_count()};
    int p = parse_choice(precision, ag_precision_parse, "precision", "fp32, bf16, int8 or auto");
    int b = p < 0 ? -1 : parse_choice(backend, parse_backend, "backend", "onednn or reference");
    int r = b < 0 || !upsample ? AG_RESIZE_DEFAULT
                               : parse_choice(upsample, ag_resize_mode_parse, "upsample",
                                              "asymmetric, align-corners or half-pixel");
    if (p < 0 || b < 0 || r < 0)
        return -1;
    o.backend = (ag_backend)b, o.resize = (ag_resize_mode)r;
    const ag_model *model = ((WeightsObject *)weights)->model;
    int restorer = ag_model_get_info(model)->role == AG_MODEL_RESTORER;
    if (restorer && p == AG_PRECISION_INT8)
        return input_error("a restorer runs in fp32 or bf16 (precision 'int8' given)"), -1;
    if ((restorer
             ? ag_restore_precision_resolve((ag_precision)p, NULL, &self->precision)
             : ag_precision_resolve((ag_precision)p, o.backend, NULL, &self->precision)) != 0) {
        ag_error err = {.code = AG_E_UNSUPPORTED};
        snprintf(err.message, sizeof err.message, "%s", self->precision.note);
        return raise_error(&err, AT_RUN), -1;
    }
    o.precision = self->precision.precision;
    ag_error err = {0};
    int rc = ag_engine_create(model, &o, &self->engine, &err);
    if (rc)
        return raise_error(&err, AT_LOAD), -1;
    self->weights = Py_NewRef(weights);
    return 0;
}

static void engine_dealloc(PyObject *obj) {
    EngineObject *self = (EngineObject *)obj;
    PyTypeObject *type = Py_TYPE(obj);
    ag_engine_destroy(self->engine);
    Py_XDECREF(self->weights);
    PyObject_Free(obj);
    Py_DECREF(type);
}

/* What one call does, all of it with the GIL released. */
typedef struct run_args {
    ag_decode_options shape; /* portrait centre crop / max_side, as the decode does */
    int side_by_side;
    int faces;     /* 0 none, 1 the largest face's aligned crop (portrait), 2 paste faces */
    int face_size; /* of the aligned crop */
    face_args fa;
    DetectorObject *detector;
} run_args;

static int needs_shape(const ag_image *in, const ag_decode_options *o) {
    return o->portrait || o->max_pixels ||
           (o->max_side > 0 && (in->width > o->max_side || in->height > o->max_side));
}

/* The centre square as a face quad: --portrait's fallback when no face is found. */
static void centre_quad(const ag_image *in, float quad[4][2]) {
    float s = (float)(in->width < in->height ? in->width : in->height);
    float x0 = (in->width - s) / 2, y0 = (in->height - s) / 2;
    const float q[4][2] = {{x0, y0}, {x0, y0 + s}, {x0 + s, y0 + s}, {x0 + s, y0}};
    memcpy(quad, q, sizeof q);
}

/* The face modes of `animegan convert` (cli/faces.c: ag_cli_faces_render, one output). */
static int run_faces(EngineObject *e, const ag_image *in, run_args *a, ag_image *out,
                     ag_error *err) {
    int rc = detect_faces(a->detector, in, &a->fa, err);
    if (rc == AG_OK && a->faces == 2)
        return ag_stylize_paste_faces(e->engine, NULL, in, a->fa.faces, a->fa.count, a->face_size,
                                      out, err);
    if (rc != AG_OK)
        return rc;
    if (a->fa.count == 0) {
        memset(&a->fa.faces[0], 0, sizeof a->fa.faces[0]);
        centre_quad(in, a->fa.faces[0].quad);
    }
    ag_image crop = {0};
    rc = ag_face_align(in, &a->fa.faces[0], a->face_size, &crop, err);
    if (rc == AG_OK)
        rc = ag_stylize(e->engine, &crop, a->side_by_side, out, err);
    ag_image_fini(&crop);
    return rc;
}

typedef struct faces_call {
    EngineObject *e;
    run_args *a;
} faces_call;

/* ag_stylize_fn: the face modes as the pipeline's stylise step. */
static int stylize_faces(void *user, const ag_image *in, ag_image *out, ag_error *err) {
    faces_call *f = user;
    return run_faces(f->e, in, f->a, out, err);
}

/* Stylise: the one-step pipeline of this engine (the face modes as its variant). */
static int run(EngineObject *e, const ag_image *in, run_args *a, ag_image *out, ag_error *err) {
    ag_image shaped = {0};
    const ag_image *x = in;
    int rc = AG_OK;
    if (needs_shape(in, &a->shape)) {
        rc = ag_image_shape(in, &a->shape, "image", &shaped, err);
        x = &shaped;
    }
    ag_pipeline p;
    ag_pipeline_init(&p);
    p.style = e->engine, p.side_by_side = a->side_by_side;
    faces_call f = {e, a};
    if (a->faces)
        p.stylize = stylize_faces, p.stylize_user = &f;
    if (rc == AG_OK)
        rc = ag_pipeline_apply(&p, x, out, NULL, err);
    ag_image_fini(&shaped);
    return rc;
}

/* Claim the engine (and a detector), run fn with the GIL released, release: the one path of
 * every call (stylize, restore, upscale). */
typedef int (*image_fn)(EngineObject *e, DetectorObject *d, const ag_image *in, void *arg,
                        ag_image *out, ag_error *err);

static PyObject *engine_apply(EngineObject *self, DetectorObject *d, PyObject *src, image_fn fn,
                              void *arg) {
    if (!self->engine)
        return PyErr_SetString(PyExc_RuntimeError, "Engine not created"), NULL;
    Py_buffer view;
    ag_image in, out = {0};
    if (image_from_object(src, &view, &in))
        return NULL;
    if (claim(&self->busy, "engine")) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (d && claim(&d->busy, "detector")) {
        atomic_store(&self->busy, 0);
        PyBuffer_Release(&view);
        return NULL;
    }
    ag_error err = {0};
    int rc;
    PyThreadState *ts = PyEval_SaveThread();
    rc = fn(self, d, &in, arg, &out, &err);
    PyEval_RestoreThread(ts);
    if (d)
        atomic_store(&d->busy, 0);
    atomic_store(&self->busy, 0);
    PyBuffer_Release(&view);
    if (rc)
        return ag_image_fini(&out), raise_error(&err, AT_RUN);
    return pixels_new(&out);
}

static int run_stylize(EngineObject *e, DetectorObject *d, const ag_image *in, void *arg,
                       ag_image *out, ag_error *err) {
    (void)d; /* run_args carries it */
    return run(e, in, arg, out, err);
}

static PyObject *engine_call(EngineObject *self, PyObject *src, run_args *a) {
    PyObject *out = engine_apply(self, a->detector, src, run_stylize, a);
    ag_free(a->fa.faces);
    return out;
}

static PyObject *engine_stylize(PyObject *obj, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"image",    "side_by_side", "max_side",   "portrait", "size",
                               "detector", "max_faces",    "max_pixels", NULL};
    PyObject *src, *detector = Py_None;
    const char *portrait = NULL;
    Py_ssize_t max_pixels = 0;
    run_args a = {.shape.portrait_size = 512};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|pizi$Oin", keywords, &src, &a.side_by_side,
                                     &a.shape.max_side, &portrait, &a.shape.portrait_size,
                                     &detector, &a.fa.options.max_faces, &max_pixels))
        return NULL;
    if (max_pixels < 0 || a.shape.max_side < 0)
        return input_error("max_side and max_pixels must be 0 or more");
    a.shape.max_pixels = (size_t)max_pixels;
    a.face_size = a.shape.portrait_size;
    static const char *const also[] = {"paste", "None", NULL}; /* paste: the pasted faces */
    if (portrait && !strcmp(portrait, "paste")) {
        a.faces = 2;
    } else if (portrait) {
        int choice = row_choice("portrait", portrait, portrait, also);
        if (choice < 0)
            return NULL;
        a.faces = choice == 0;          /* face */
        a.shape.portrait = choice != 0; /* center, centre */
    }
    if (a.faces) {
        if (!PyObject_TypeCheck(detector, DetectorType))
            return PyErr_SetString(PyExc_TypeError, "the face modes need a Detector"), NULL;
        a.detector = (DetectorObject *)detector;
        if (a.faces == 2 && a.side_by_side)
            return input_error("portrait='paste' keeps the whole photo: not with side_by_side");
        /* The face modes look for faces in the photo at up to 4096 px, as convert does. */
        if (a.faces == 1 && a.shape.max_side && a.shape.max_side < 4096)
            a.shape.max_side = 4096;
        if (outside_row(AG_CMD_CONVERT, "size", a.face_size))
            return NULL;
    }
    return engine_call((EngineObject *)obj, src, &a);
}

typedef struct restore_args {
    ag_restore_options options;
    ag_restore_result result;
} restore_args;

static int run_restore(EngineObject *e, DetectorObject *d, const ag_image *in, void *arg,
                       ag_image *out, ag_error *err) {
    restore_args *a = arg;
    ag_pipeline p;
    ag_pipeline_init(&p);
    p.restorer = e->engine, p.detector = d ? d->detector : NULL, p.restore = a->options;
    ag_pipeline_result res;
    int rc = ag_pipeline_apply(&p, in, out, &res, err);
    a->result = res.faces;
    return rc;
}

static PyObject *engine_restore(PyObject *obj, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {
        "image", "detector", "fidelity", "max_faces", "aligned", "codeformer_fidelity", NULL};
    PyObject *src, *detector = Py_None;
    restore_args a = {0};
    ag_restore_options_init(&a.options);
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|Ofipf", keywords, &src, &detector,
                                     &a.options.fidelity, &a.options.max_faces, &a.options.aligned,
                                     &a.options.codeformer_fidelity))
        return NULL;
    if (outside_row(AG_CMD_RESTORE, "fidelity", a.options.fidelity) ||
        outside_row(AG_CMD_RESTORE, "codeformer-fidelity", a.options.codeformer_fidelity) ||
        outside_row(AG_CMD_RESTORE, "max-faces", a.options.max_faces))
        return NULL;
    if (!a.options.aligned && !PyObject_TypeCheck(detector, DetectorType))
        return PyErr_SetString(PyExc_TypeError, "restoring a photo needs a Detector"), NULL;
    DetectorObject *d = a.options.aligned ? NULL : (DetectorObject *)detector;
    PyObject *out = engine_apply((EngineObject *)obj, d, src, run_restore, &a);
    return out ? Py_BuildValue("(Ni)", out, a.result.restored) : NULL;
}

static int run_upscale(EngineObject *e, DetectorObject *d, const ag_image *in, void *arg,
                       ag_image *out, ag_error *err) {
    (void)d;
    ag_pipeline p;
    ag_pipeline_init(&p);
    p.upscaler = e->engine, p.upscale = *(const ag_upscale_options *)arg;
    return ag_pipeline_apply(&p, in, out, NULL, err);
}

static PyObject *engine_upscale(PyObject *obj, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"image", "scale", "tile", "max_mb", NULL};
    PyObject *src;
    int max_mb = (int)(AG_UPSCALE_DEFAULT_MAX_BYTES >> 20);
    ag_upscale_options o;
    ag_upscale_options_init(&o);
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|iii", keywords, &src, &o.scale, &o.tile_px,
                                     &max_mb))
        return NULL;
    if (outside_row(AG_CMD_UPSCALE, "scale", o.scale) ||
        outside_row(AG_CMD_UPSCALE, "tile", o.tile_px) ||
        outside_row(AG_CMD_UPSCALE, "max-mb", max_mb))
        return NULL; /* scale 0 and tile 0, the rows' defaults: the model's own, the largest */
    o.max_bytes = (size_t)max_mb << 20;
    return engine_apply((EngineObject *)obj, NULL, src, run_upscale, &o);
}

static PyObject *engine_precision(PyObject *obj, void *closure) {
    (void)closure;
    return PyUnicode_FromString(ag_precision_name(((EngineObject *)obj)->precision.precision));
}

static PyObject *engine_note(PyObject *obj, void *closure) {
    (void)closure;
    return PyUnicode_FromString(((EngineObject *)obj)->precision.note);
}

static PyObject *engine_arena_bytes(PyObject *obj, void *closure) {
    (void)closure;
    EngineObject *self = (EngineObject *)obj;
    return PyLong_FromSize_t(self->engine ? ag_engine_arena_bytes(self->engine) : 0);
}

static PyGetSetDef engine_getset[] = {
    {"precision", engine_precision, NULL, "the precision it runs (auto resolved)", NULL},
    {"precision_note", engine_note, NULL, "why auto chose it, or the emulation warning", NULL},
    {"arena_bytes", engine_arena_bytes, NULL, "bytes of the arena planned now", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef engine_methods[] = {
    {"restore", (PyCFunction)(void (*)(void))engine_restore, METH_VARARGS | METH_KEYWORDS,
     "restore(image, detector=None, fidelity=1.0, max_faces=8, aligned=False, "
     "codeformer_fidelity=0.5) -> (Pixels, "
     "restored): the faces restored (ag_restore_faces)"},
    {"upscale", (PyCFunction)(void (*)(void))engine_upscale, METH_VARARGS | METH_KEYWORDS,
     "upscale(image, scale=0, tile=0, max_mb=1024) -> Pixels, tiled (ag_upscale)"},
    {"stylize", (PyCFunction)(void (*)(void))engine_stylize, METH_VARARGS | METH_KEYWORDS,
     "stylize(image, side_by_side=False, max_side=0, portrait=None, size=512, *, detector=None, "
     "max_faces=0, max_pixels=0) -> Pixels"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot engine_slots[] = {
    {Py_tp_doc, "Engine(weights, precision='auto', threads=0, backend='onednn', upsample=None): "
                "one arena; one caller at a time."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, engine_init},
    {Py_tp_dealloc, engine_dealloc},
    {Py_tp_methods, engine_methods},
    {Py_tp_getset, engine_getset},
    {0, NULL},
};

static PyType_Spec engine_spec = {"animegan._core.Engine", sizeof(EngineObject), 0,
                                  Py_TPFLAGS_DEFAULT, engine_slots};

/* ---- files: decode and save as `animegan convert` does ------------------------------------ */

static PyObject *core_decode_file(PyObject *module, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"path", "max_side", "max_pixels", "portrait", "size", NULL};
    const char *path;
    ag_decode_options o = {.portrait_size = 512};
    Py_ssize_t max_pixels = 0;
    (void)module;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|inpi", keywords, &path, &o.max_side,
                                     &max_pixels, &o.portrait, &o.portrait_size))
        return NULL;
    if (max_pixels < 0 || o.max_side < 0)
        return input_error("max_side and max_pixels must be 0 or more");
    o.max_pixels = (size_t)max_pixels;
    ag_image image = {0};
    ag_error err = {0};
    int rc;
    PyThreadState *ts = PyEval_SaveThread();
    rc = ag_image_decode_file(path, &o, &image, &err);
    PyEval_RestoreThread(ts);
    if (rc)
        return raise_error(&err, AT_RUN);
    return pixels_new(&image);
}

/* Untrusted bytes (an upload) through the library's bounded decoder. */
static PyObject *core_decode(PyObject *module, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"data", "max_side", "max_pixels", "label", NULL};
    Py_buffer data;
    const char *label = "image";
    ag_decode_options o = {.portrait_size = 512};
    Py_ssize_t max_pixels = 0;
    (void)module;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*|ins", keywords, &data, &o.max_side,
                                     &max_pixels, &label))
        return NULL;
    if (max_pixels < 0 || o.max_side < 0) {
        PyBuffer_Release(&data);
        return input_error("max_side and max_pixels must be 0 or more");
    }
    o.max_pixels = (size_t)max_pixels;
    ag_image image = {0};
    ag_error err = {0};
    PyThreadState *ts = PyEval_SaveThread();
    int rc = ag_image_decode(data.buf, (size_t)data.len, label, &o, &image, &err);
    PyEval_RestoreThread(ts);
    PyBuffer_Release(&data);
    if (rc)
        return raise_error(&err, AT_RUN);
    return pixels_new(&image);
}

static PyObject *core_encode(PyObject *module, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"image", "format", "quality", NULL};
    PyObject *src;
    const char *format_name = "png";
    int quality = 90;
    (void)module;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|si", keywords, &src, &format_name, &quality))
        return NULL;
    int format = ag_format_parse(format_name);
    if (format < 0)
        return input_error("format: expected png, jpg or webp");
    if (quality < 1 || quality > 100)
        return input_error("quality: must be 1 to 100");
    Py_buffer view;
    ag_image image;
    if (image_from_object(src, &view, &image))
        return NULL;
    void *bytes = NULL;
    size_t size = 0;
    ag_error err = {0};
    PyThreadState *ts = PyEval_SaveThread();
    int rc = ag_image_encode(&image, (ag_format)format, quality, &bytes, &size, &err);
    PyEval_RestoreThread(ts);
    PyBuffer_Release(&view);
    if (rc)
        return raise_error(&err, AT_RUN);
    PyObject *result = PyBytes_FromStringAndSize(bytes, (Py_ssize_t)size);
    ag_free(bytes);
    return result;
}

static PyObject *core_save_file(PyObject *module, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"image", "path", "format", "quality", NULL};
    PyObject *src;
    const char *path, *format_name = NULL;
    int quality = 90;
    (void)module;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Os|zi", keywords, &src, &path, &format_name,
                                     &quality))
        return NULL;
    int format = format_name ? ag_format_parse(format_name) : ag_format_from_path(path);
    if (format < 0)
        return input_error(format_name ? "format: expected png, jpg or webp"
                                       : "cannot tell the image format of the output: name it "
                                         ".png, .jpg or .webp");
    if (quality < 1 || quality > 100)
        return input_error("quality: must be 1 to 100");
    Py_buffer view;
    ag_image image;
    if (image_from_object(src, &view, &image))
        return NULL;
    ag_error err = {0};
    int rc;
    PyThreadState *ts = PyEval_SaveThread();
    rc = ag_image_save_file(&image, path, (ag_format)format, quality, &err);
    PyEval_RestoreThread(ts);
    PyBuffer_Release(&view);
    if (rc)
        return raise_error(&err, AT_RUN);
    Py_RETURN_NONE;
}

static PyObject *core_allocated_bytes(PyObject *module, PyObject *unused) {
    (void)module, (void)unused;
    return Py_BuildValue("(nn)", (Py_ssize_t)ag_allocated_bytes(),
                         (Py_ssize_t)ag_allocated_peak_bytes());
}

static PyObject *core_rss_bytes(PyObject *module, PyObject *unused) {
    (void)module, (void)unused;
    return Py_BuildValue("(nn)", (Py_ssize_t)ag_process_rss_bytes(),
                         (Py_ssize_t)ag_process_peak_rss_bytes());
}

static PyObject *core_bundled(PyObject *module, PyObject *unused) {
    (void)module, (void)unused;
    const char *names[64];
    int n = ag_model_list_bundled(names, 64);
    n = n > 64 ? 64 : n;
    PyObject *list = PyList_New(0);
    for (int i = 0; list && i < n; i++) {
        PyObject *name = PyUnicode_FromString(names[i]);
        if (!name || PyList_Append(list, name) != 0)
            Py_CLEAR(list);
        Py_XDECREF(name);
    }
    return list;
}

/* choice(keyword, value, extra=()) -> index of value among the keyword row's choices, or the
 * row's InputError naming them (and `extra`, the strings the caller also takes). */
static PyObject *core_choice(PyObject *module, PyObject *args) {
    (void)module;
    const char *keyword;
    PyObject *value, *extra_seq = NULL;
    if (!PyArg_ParseTuple(args, "sO|O", &keyword, &value, &extra_seq))
        return NULL;
    const char *extra[8] = {NULL};
    PyObject *text = PyObject_Str(value);
    if (!text)
        return NULL;
    Py_ssize_t n = extra_seq ? PySequence_Size(extra_seq) : 0;
    for (Py_ssize_t i = 0; i < n && i < 7; i++) {
        PyObject *item = PySequence_GetItem(extra_seq, i);
        extra[i] = item ? PyUnicode_AsUTF8AndSize(item, NULL) : NULL;
        Py_XDECREF(item); /* the tuple keeps the string alive */
        if (!extra[i])
            return Py_DECREF(text), NULL;
    }
    /* a non-string never matches ("3" is not 3), and is shown as str() shows it */
    const char *v = PyUnicode_Check(value) ? PyUnicode_AsUTF8AndSize(value, NULL) : NULL;
    int i = row_choice(keyword, v, PyUnicode_AsUTF8AndSize(text, NULL), extra);
    Py_DECREF(text);
    return i < 0 ? NULL : PyLong_FromLong(i);
}

/* The step table's rows that have a keyword: (keyword, type, min, max, default, commands). */
static PyObject *core_step_options(PyObject *module, PyObject *unused) {
    (void)module, (void)unused;
    static const char *const types[] = {"flag", "int", "float", "text"};
    int count;
    const ag_step_option *o = ag_step_options(&count);
    PyObject *list = PyList_New(0);
    for (int i = 0; list && i < count; i++) {
        if (!o[i].keyword)
            continue;
        PyObject *row = Py_BuildValue("(ssdddi)", o[i].keyword, types[o[i].type], o[i].min,
                                      o[i].max, o[i].def, o[i].commands);
        if (!row || PyList_Append(list, row) != 0)
            Py_CLEAR(list);
        Py_XDECREF(row);
    }
    return list;
}

/* The step table's keyword rows with a fixed set of values: (keyword, choices, commands). */
static PyObject *core_choice_rows(PyObject *module, PyObject *unused) {
    (void)module, (void)unused;
    int count;
    const ag_step_option *o = ag_step_options(&count);
    PyObject *list = PyList_New(0);
    for (int i = 0; list && i < count; i++) {
        if (!o[i].keyword || !o[i].choices)
            continue;
        int n = 0;
        while (o[i].choices[n])
            n++;
        PyObject *choices = PyTuple_New(n);
        for (int c = 0; choices && c < n; c++) {
            PyObject *word = PyUnicode_FromString(o[i].choices[c]);
            if (!word)
                Py_CLEAR(choices);
            else
                PyTuple_SetItem(choices, c, word);
        }
        PyObject *row =
            choices ? Py_BuildValue("(sOi)", o[i].keyword, choices, o[i].commands) : NULL;
        Py_XDECREF(choices);
        if (!row || PyList_Append(list, row) != 0)
            Py_CLEAR(list);
        Py_XDECREF(row);
    }
    return list;
}

static PyMethodDef core_methods[] = {
    {"decode_file", (PyCFunction)(void (*)(void))core_decode_file, METH_VARARGS | METH_KEYWORDS,
     "decode_file(path, max_side=0, max_pixels=0, portrait=False, size=512) -> Pixels, as "
     "`animegan convert` decodes (portrait: the centre square at size)"},
    {"save_file", (PyCFunction)(void (*)(void))core_save_file, METH_VARARGS | METH_KEYWORDS,
     "save_file(image, path, format=None, quality=90): atomic (temporary file, rename)"},
    {"decode", (PyCFunction)(void (*)(void))core_decode, METH_VARARGS | METH_KEYWORDS,
     "decode(data, max_side=0, max_pixels=0, label='image') -> Pixels: JPEG, PNG, WebP, TIFF, "
     "GIF, HEIF bytes, EXIF-oriented 8-bit sRGB"},
    {"encode", (PyCFunction)(void (*)(void))core_encode, METH_VARARGS | METH_KEYWORDS,
     "encode(image, format='png', quality=90) -> bytes"},
    {"allocated_bytes", core_allocated_bytes, METH_NOARGS,
     "(live, peak) bytes the library allocated through ag_malloc"},
    {"rss_bytes", core_rss_bytes, METH_NOARGS, "(now, peak) resident set size of the process"},
    {"bundled_models", core_bundled, METH_NOARGS, "names of the bundled models found"},
    {"choice_rows", core_choice_rows, METH_NOARGS,
     "[(keyword, choices, commands)]: the step table's keyword rows with a fixed set of values"},
    {"choice", core_choice, METH_VARARGS,
     "choice(keyword, value, extra=()) -> index among the row's choices, else InputError"},
    {"step_options", core_step_options, METH_NOARGS,
     "[(keyword, type, min, max, default, commands)]: the step table's keyword rows"},
    {NULL, NULL, 0, NULL},
};

/* ---- module -------------------------------------------------------------------------------- */

static struct PyModuleDef core_module = {PyModuleDef_HEAD_INIT,
                                         "animegan._core",
                                         "The C extension of the animegan package.",
                                         -1,
                                         core_methods,
                                         NULL,
                                         NULL,
                                         NULL,
                                         NULL};

static int add_type(PyObject *m, PyType_Spec *spec, PyTypeObject **out) {
    PyObject *type = PyType_FromSpec(spec);
    if (!type)
        return -1;
    *out = (PyTypeObject *)type;
    const char *name = strrchr(spec->name, '.') + 1;
    return PyModule_AddObjectRef(m, name, type);
}

/* The error classes: Error, and its subclasses that are also the built-in kind they are. */
static int add_errors(PyObject *m) {
    Error = PyErr_NewExceptionWithDoc("animegan.Error", "A failure the library reported.",
                                      PyExc_Exception, NULL);
    if (!Error || PyModule_AddObjectRef(m, "Error", Error))
        return -1;
    struct {
        const char *name, *doc;
        PyObject *builtin, **out;
    } subs[] = {
        {"InputError", "Bad input image or option (the process keeps working).", PyExc_ValueError,
         &InputError},
        {"ModelError", "Bad or unknown model file.", PyExc_ValueError, &ModelError},
        {"FileError", "A file could not be read or written.", PyExc_OSError, &FileError},
        {"OutOfMemoryError", "The library could not allocate.", PyExc_MemoryError,
         &OutOfMemoryError},
    };
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        char qualified[64];
        snprintf(qualified, sizeof qualified, "animegan.%s", subs[i].name);
        PyObject *bases = PyTuple_Pack(2, Error, subs[i].builtin);
        if (!bases)
            return -1;
        *subs[i].out = PyErr_NewExceptionWithDoc(qualified, subs[i].doc, bases, NULL);
        Py_DECREF(bases);
        if (!*subs[i].out || PyModule_AddObjectRef(m, subs[i].name, *subs[i].out))
            return -1;
    }
    return 0;
}

PyMODINIT_FUNC PyInit__core(void);
PyMODINIT_FUNC PyInit__core(void) {
    ag_error err = {0};
    if (ag_image_startup("python", &err) != 0) {
        PyErr_Format(PyExc_ImportError, "animegan: %s", err.message);
        return NULL;
    }
    PyObject *m = PyModule_Create(&core_module);
    if (!m)
        return NULL;
    if (add_errors(m) || add_type(m, &pixels_spec, &PixelsType) ||
        add_type(m, &weights_spec, &WeightsType) || add_type(m, &engine_spec, &EngineType) ||
        add_type(m, &detector_spec, &DetectorType) ||
        PyModule_AddStringConstant(m, "LIBRARY_VERSION", AG_VERSION) ||
        PyModule_AddIntConstant(m, "MIN_SIDE", AG_MIN_SIDE)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
