/*
 * track.c - one face followed over a clip's frames (animegan.h's ag_face_track), for the
 * fusion of a clip: which face of each frame is "the" face, and its landmarks smoothed.
 *
 *   cut        a 16x16 grey thumbnail of each frame; a mean change over cut_threshold is a
 *              cut: the face is looked for again by identity and the filter restarts
 *   follow     the candidate overlapping the last box most (IoU >= min_overlap), ties and
 *              crossings decided by identity
 *   find again after a cut, or when the face was missing: the candidate most like the
 *              reference embedding (>= min_similarity); without a caller's embedding (the
 *              landmarks' geometry tells poses apart, not people: obama.jpg and biden.jpg
 *              score 0.994, two photos of Obama 0.958), near where it was last seen,
 *              else after a cut the start rule
 *   smooth     One-Euro filters on the face's pose and on its shape (speeds in face sizes
 *              a frame)
 *
 * Everything is fixed-size in the struct: no allocation after create.
 */
#include "animegan.h"

#include "../util/util_internal.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#define THUMB 16
#define GEOMETRY_POINTS 15
#define GEOMETRY_DIM (GEOMETRY_POINTS * (GEOMETRY_POINTS - 1) / 2)
#define D_CUTOFF 0.1f /* the speed's own cutoff, cycles a frame */
#define EMBED_KEEP 0.9f

/* Landmarks whose distances describe a face's proportions: eye corners, brows, nose, mouth
 * corners and lips, chin, forehead, cheeks. */
static const short geometry_points[GEOMETRY_POINTS] = {33, 133, 362, 263, 70,  300, 1,  2,
                                                       61, 291, 13,  14,  152, 10,  234};

typedef struct euro {
    float x, dx; /* the filtered value and speed */
} euro;

struct ag_face_track {
    ag_face_track_options o;
    float given[AG_FACE_EMBED_MAX]; /* options.reference, copied */
    /* from here on: cleared by ag_face_track_reset */
    int started;   /* a reference exists */
    int following; /* the face was in the last frame */
    int filtered;  /* the filter holds a state */
    float last_box[4];
    euro pose[4];                     /* centroid x, y, log radius, angle */
    euro shape[AG_FACE_LANDMARKS][2]; /* the landmarks in the pose's frame */
    float ref[AG_FACE_LANDMARKS][2];  /* the first frame's shape: the angle's zero */
    float scratch[AG_FACE_LANDMARKS][2];
    float thumb[THUMB * THUMB];
    int has_thumb;
    float reference[AG_FACE_EMBED_MAX], candidate[AG_FACE_EMBED_MAX];
    int ref_dim;
    ag_face_track_stats stats;
};

void ag_face_track_options_init(ag_face_track_options *o) {
    memset(o, 0, sizeof *o);
    o->face = 1;
    o->min_cutoff = 0.05f;
    o->beta = 80.0f;
    o->shape_cutoff = 0.02f;
    o->shape_beta = 20.0f;
    o->cut_threshold = 28.0f;
    o->min_overlap = 0.3f;
}

int ag_face_track_create(const ag_face_track_options *options, ag_face_track **out, ag_error *err) {
    ag_face_track_options o;
    if (options)
        o = *options;
    else
        ag_face_track_options_init(&o);
    if (o.face < 1 || o.face > AG_FACE_MAX || o.min_cutoff <= 0 || o.beta < 0 ||
        o.shape_cutoff <= 0 || o.shape_beta < 0 || o.cut_threshold <= 0 || o.min_overlap <= 0 ||
        o.min_overlap > 1 || o.min_similarity < 0 || o.min_similarity > 1)
        return ag_error_set(err, AG_E_ARG, "face track: an option is out of range");
    if (o.min_similarity == 0)
        o.min_similarity = 0.5f;
    ag_face_track *t = ag_calloc(1, sizeof *t);
    if (!t)
        return ag_error_set(err, AG_E_NOMEM, "out of memory for a face track");
    t->o = o;
    t->o.reference = NULL; /* the caller's: copied */
    if (o.embed && o.reference && o.reference_dim > 0 && o.reference_dim <= AG_FACE_EMBED_MAX) {
        memcpy(t->given, o.reference, sizeof(float) * (size_t)o.reference_dim);
        t->o.reference_dim = o.reference_dim;
    } else {
        t->o.reference_dim = 0;
    }
    ag_face_track_reset(t);
    *out = t;
    return AG_OK;
}

void ag_face_track_destroy(ag_face_track *track) {
    ag_free(track);
}

void ag_face_track_reset(ag_face_track *t) {
    memset(&t->started, 0, sizeof *t - offsetof(ag_face_track, started));
    if (t->o.reference_dim) { /* the identity given: looked for from the first frame */
        memcpy(t->reference, t->given, sizeof(float) * (size_t)t->o.reference_dim);
        t->ref_dim = t->o.reference_dim, t->started = 1;
    }
}

int ag_face_track_last_box(const ag_face_track *t, float box[4]) {
    if (t->following)
        memcpy(box, t->last_box, sizeof t->last_box);
    return t->following;
}

void ag_face_track_get_stats(const ag_face_track *t, ag_face_track_stats *out) {
    *out = t->stats;
}

/* ---- cuts ------------------------------------------------------------------------------------ */

/* The frame's 16x16 grey thumbnail (cell means over up to 8x8 samples each). */
static void thumbnail(const ag_image *im, float out[THUMB * THUMB]) {
    for (int cy = 0; cy < THUMB; cy++)
        for (int cx = 0; cx < THUMB; cx++) {
            int x0 = cx * im->width / THUMB, x1 = (cx + 1) * im->width / THUMB;
            int y0 = cy * im->height / THUMB, y1 = (cy + 1) * im->height / THUMB;
            int sx = (x1 - x0 + 7) / 8, sy = (y1 - y0 + 7) / 8;
            double sum = 0;
            int n = 0;
            for (int y = y0; y < y1; y += sy ? sy : 1)
                for (int x = x0; x < x1; x += sx ? sx : 1, n++) {
                    const uint8_t *p = im->pixels + ((size_t)y * im->width + x) * im->bands;
                    sum += im->bands >= 3 ? 0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2] : p[0];
                }
            out[cy * THUMB + cx] = n ? (float)(sum / n) : 0;
        }
}

/* 1 when `frame` is a cut from the last one; the thumbnail kept. */
static int is_cut(ag_face_track *t, const ag_image *frame) {
    float now[THUMB * THUMB];
    thumbnail(frame, now);
    double change = 0;
    for (int i = 0; i < THUMB * THUMB; i++)
        change += (double)fabsf(now[i] - t->thumb[i]);
    int cut = t->has_thumb && change / (THUMB * THUMB) > (double)t->o.cut_threshold;
    memcpy(t->thumb, now, sizeof now);
    t->has_thumb = 1;
    return cut;
}

/* ---- identity -------------------------------------------------------------------------------- */

/* The landmarks' proportions: the distances between geometry_points over their mean, less
 * one (so a cosine compares shapes, not sizes). */
static void geometry_embedding(const ag_face *f, float *vec, int *dim) {
    double mean = 0;
    int k = 0;
    for (int a = 0; a < GEOMETRY_POINTS; a++)
        for (int b = a + 1; b < GEOMETRY_POINTS; b++, k++) {
            const float *p = f->landmarks[geometry_points[a]],
                        *q = f->landmarks[geometry_points[b]];
            vec[k] = hypotf(p[0] - q[0], p[1] - q[1]);
            mean += (double)vec[k];
        }
    mean = mean > 0 ? mean / k : 1;
    for (int i = 0; i < k; i++)
        vec[i] = (float)((double)vec[i] / mean - 1);
    *dim = k;
}

static int embed(ag_face_track *t, const ag_image *frame, const ag_face *f, float *vec, int *dim,
                 ag_error *err) {
    if (!t->o.embed) {
        geometry_embedding(f, vec, dim);
        return AG_OK;
    }
    int rc = t->o.embed(t->o.embed_user, frame, f, vec, dim);
    if (rc == AG_OK && (*dim < 1 || *dim > AG_FACE_EMBED_MAX))
        rc = ag_error_set(err, AG_E_INTERNAL, "face track: an embedding of %d floats", *dim);
    return rc;
}

static float cosine(const float *a, const float *b, int n) {
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++)
        ab += (double)a[i] * (double)b[i], aa += (double)a[i] * (double)a[i],
            bb += (double)b[i] * (double)b[i];
    return aa > 0 && bb > 0 ? (float)(ab / sqrt(aa * bb)) : 0;
}

/* faces[i]'s similarity to the reference; -1 without one. */
static int similarity(ag_face_track *t, const ag_image *frame, const ag_face *f, float *sim,
                      ag_error *err) {
    *sim = -1;
    if (!t->started || !f->has_landmarks)
        return AG_OK;
    int dim = 0, rc = embed(t, frame, f, t->candidate, &dim, err);
    if (rc == AG_OK && dim == t->ref_dim)
        *sim = cosine(t->candidate, t->reference, dim);
    return rc;
}

/* The reference: set at the start, then kept mostly (EMBED_KEEP) while the face is followed. */
static int update_reference(ag_face_track *t, const ag_image *frame, const ag_face *f,
                            ag_error *err) {
    int dim = 0, rc = embed(t, frame, f, t->candidate, &dim, err);
    if (rc != AG_OK)
        return rc;
    int blend = t->started && dim == t->ref_dim;
    for (int i = 0; i < dim; i++)
        t->reference[i] = blend ? EMBED_KEEP * t->reference[i] + (1 - EMBED_KEEP) * t->candidate[i]
                                : t->candidate[i];
    t->ref_dim = dim;
    t->started = 1;
    return AG_OK;
}

/* ---- choosing the face ----------------------------------------------------------------------- */

static float overlap(const float a[4], const float b[4]) {
    float w = fminf(a[2], b[2]) - fmaxf(a[0], b[0]), h = fminf(a[3], b[3]) - fmaxf(a[1], b[1]);
    if (w <= 0 || h <= 0)
        return 0;
    float inter = w * h;
    float uni = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter;
    return uni > 0 ? inter / uni : 0;
}

/* Following: the best of overlap plus identity among those overlapping enough. */
static int follow(ag_face_track *t, const ag_image *frame, const ag_face *faces, int count,
                  int *pick, ag_error *err) {
    int overlapping = 0;
    for (int i = 0; i < count; i++)
        overlapping +=
            faces[i].has_landmarks && overlap(faces[i].box, t->last_box) >= t->o.min_overlap;
    float best = -1e9f;
    *pick = -1;
    for (int i = 0; i < count; i++) {
        float iou = overlap(faces[i].box, t->last_box), sim = 0;
        if (!faces[i].has_landmarks || iou < t->o.min_overlap)
            continue;
        int rc = overlapping > 1 ? similarity(t, frame, &faces[i], &sim, err) : AG_OK;
        if (rc != AG_OK)
            return rc;
        if (iou + sim > best)
            best = iou + sim, *pick = i;
    }
    return AG_OK;
}

/* Where the face was last seen: a face missing for a while (a hand passed, the detector
 * missed it) is taken back there, centre within a face size. */
static int near_last(const ag_face_track *t, const ag_face *f) {
    float size = fmaxf(t->last_box[2] - t->last_box[0], t->last_box[3] - t->last_box[1]);
    float dx = (f->box[0] + f->box[2] - t->last_box[0] - t->last_box[2]) / 2;
    float dy = (f->box[1] + f->box[3] - t->last_box[1] - t->last_box[3]) / 2;
    return f->has_landmarks && hypotf(dx, dy) <= size;
}

/* Finding it: with the caller's embedding, the most alike over min_similarity; without one
 * (the landmarks' geometry tells poses apart better than people), one near where it was
 * last seen, else after a cut or at the start the face-th. */
static int find(ag_face_track *t, const ag_image *frame, const ag_face *faces, int count, int cut,
                int *pick, ag_error *err) {
    *pick = -1;
    float best = t->o.min_similarity;
    for (int i = 0; t->started && t->o.embed && i < count; i++) {
        float sim;
        int rc = similarity(t, frame, &faces[i], &sim, err);
        if (rc != AG_OK)
            return rc;
        if (sim >= best)
            best = sim, *pick = i;
    }
    if (t->started && t->o.embed)
        return AG_OK;
    for (int i = 0; t->started && i < count && *pick < 0; i++)
        if (near_last(t, &faces[i]))
            *pick = i;
    if (*pick < 0 && (!t->started || cut) && count >= t->o.face &&
        faces[t->o.face - 1].has_landmarks)
        *pick = t->o.face - 1;
    return AG_OK;
}

/* ---- smoothing ------------------------------------------------------------------------------- */

/*
 * The landmarks split into a pose (centroid, log of the RMS radius, angle against the first
 * frame's shape), averaged over 468 points so nearly free of FaceMesh's per-point noise, and
 * a shape (the landmarks with the pose taken off, in face radii). Each number has its own
 * One-Euro filter: the pose's follows motion closely (min_cutoff, beta), the shape's is
 * held harder (shape_cutoff, shape_beta) but still opens a mouth at once.
 */
static float alpha(float cutoff) {
    float r = 2 * (float)M_PI * cutoff;
    return r / (r + 1);
}

/* One step of a One-Euro filter; `unit` turns a step into face sizes. */
static float euro_step(euro *e, float raw, float unit, float min_cutoff, float beta) {
    float d = (raw - e->x) / unit;
    e->dx = alpha(D_CUTOFF) * d + (1 - alpha(D_CUTOFF)) * e->dx;
    float a = alpha(min_cutoff + beta * fabsf(e->dx));
    return e->x = a * raw + (1 - a) * e->x;
}

typedef struct pose {
    float cx, cy, log_r, angle;
} pose;

/* f's pose (the angle against ref, NULL: 0) and its shape with the pose taken off. */
static pose pose_of(const float (*l)[2], const float (*ref)[2], float (*shape)[2]) {
    double cx = 0, cy = 0, rr = 0;
    for (int i = 0; i < AG_FACE_LANDMARKS; i++)
        cx += (double)l[i][0], cy += (double)l[i][1];
    cx /= AG_FACE_LANDMARKS, cy /= AG_FACE_LANDMARKS;
    double dot = 0, cross = 0;
    for (int i = 0; i < AG_FACE_LANDMARKS; i++) {
        double x = (double)l[i][0] - cx, y = (double)l[i][1] - cy;
        rr += x * x + y * y;
        if (ref)
            dot += (double)ref[i][0] * x + (double)ref[i][1] * y,
                cross += (double)ref[i][0] * y - (double)ref[i][1] * x;
    }
    double r = sqrt(rr / AG_FACE_LANDMARKS), angle = ref ? atan2(cross, dot) : 0;
    r = r > 1e-6 ? r : 1e-6;
    double c = cos(angle), s = sin(angle);
    for (int i = 0; i < AG_FACE_LANDMARKS && shape; i++) {
        double x = ((double)l[i][0] - cx) / r, y = ((double)l[i][1] - cy) / r;
        shape[i][0] = (float)(c * x + s * y), shape[i][1] = (float)(-s * x + c * y);
    }
    return (pose){(float)cx, (float)cy, (float)log(r), (float)angle};
}

/* p moved from the raw pose to the smoothed one. */
static void repose(float p[2], const pose *raw, const pose *to) {
    double k = exp((double)(to->log_r - raw->log_r)), a = (double)(to->angle - raw->angle);
    double x = (double)(p[0] - raw->cx), y = (double)(p[1] - raw->cy);
    p[0] = (float)((double)to->cx + k * (cos(a) * x - sin(a) * y));
    p[1] = (float)((double)to->cy + k * (sin(a) * x + cos(a) * y));
}

static void start_filter(ag_face_track *t, const ag_face *f) {
    pose_of((const float(*)[2])f->landmarks, NULL, t->ref);
    pose p = pose_of((const float(*)[2])f->landmarks, (const float(*)[2])t->ref, NULL);
    t->pose[0] = (euro){p.cx, 0}, t->pose[1] = (euro){p.cy, 0};
    t->pose[2] = (euro){p.log_r, 0}, t->pose[3] = (euro){p.angle, 0};
    for (int i = 0; i < AG_FACE_LANDMARKS; i++)
        for (int c = 0; c < 2; c++)
            t->shape[i][c] = (euro){t->ref[i][c], 0};
    t->filtered = 1;
}

/* *out <- f with its landmarks smoothed; box, quad and keypoints moved with the pose. */
static void smooth(ag_face_track *t, const ag_face *f, ag_face *out) {
    *out = *f;
    if (!t->filtered) {
        start_filter(t, f);
        return;
    }
    const ag_face_track_options *o = &t->o;
    float(*shape)[2] = t->scratch;
    pose raw = pose_of((const float(*)[2])f->landmarks, (const float(*)[2])t->ref, shape);
    float r = expf(raw.log_r);
    pose s = {euro_step(&t->pose[0], raw.cx, r, o->min_cutoff, o->beta),
              euro_step(&t->pose[1], raw.cy, r, o->min_cutoff, o->beta),
              euro_step(&t->pose[2], raw.log_r, 1, o->min_cutoff, o->beta),
              euro_step(&t->pose[3], raw.angle, 1, o->min_cutoff, o->beta)};
    float k = expf(s.log_r), c = cosf(s.angle), sn = sinf(s.angle);
    for (int i = 0; i < AG_FACE_LANDMARKS; i++) {
        float x = euro_step(&t->shape[i][0], shape[i][0], 1, o->shape_cutoff, o->shape_beta);
        float y = euro_step(&t->shape[i][1], shape[i][1], 1, o->shape_cutoff, o->shape_beta);
        out->landmarks[i][0] = s.cx + k * (c * x - sn * y);
        out->landmarks[i][1] = s.cy + k * (sn * x + c * y);
    }
    float bc[2] = {(f->box[0] + f->box[2]) / 2, (f->box[1] + f->box[3]) / 2};
    float half[2] = {(f->box[2] - f->box[0]) / 2 * k / r, (f->box[3] - f->box[1]) / 2 * k / r};
    repose(bc, &raw, &s);
    out->box[0] = bc[0] - half[0], out->box[2] = bc[0] + half[0];
    out->box[1] = bc[1] - half[1], out->box[3] = bc[1] + half[1];
    for (int q = 0; q < 4; q++)
        repose(out->quad[q], &raw, &s);
    for (int q = 0; q < 6; q++)
        repose(out->keypoints[q], &raw, &s);
}

int ag_face_track_update(ag_face_track *t, const ag_image *frame, const ag_face *faces, int count,
                         int *index, ag_face *smoothed, ag_error *err) {
    *index = -1;
    t->stats.frames++;
    int cut = is_cut(t, frame);
    if (cut) {
        t->stats.cuts++;
        t->following = 0, t->filtered = 0;
    }
    int pick = -1, was_following = t->following;
    int rc = t->following ? follow(t, frame, faces, count, &pick, err)
                          : find(t, frame, faces, count, cut, &pick, err);
    if (rc == AG_OK && pick < 0 && t->following) /* it moved too far: look for it again */
        rc = find(t, frame, faces, count, cut, &pick, err);
    if (rc != AG_OK)
        return rc;
    if (pick < 0) {
        t->stats.lost += t->following;
        t->following = 0, t->filtered = 0;
        return AG_OK;
    }
    int followed = was_following && overlap(faces[pick].box, t->last_box) >= t->o.min_overlap;
    if (!followed)
        t->filtered = 0; /* a jump: no smoothing across it */
    if (!followed && t->started)
        t->stats.reacquired++;
    /* The reference: at the start, then (the landmarks' geometry, which is free) kept up to
     * date while followed; a network's embedding is computed only when needed. */
    if (!t->started || (followed && !t->o.embed))
        if ((rc = update_reference(t, frame, &faces[pick], err)) != AG_OK)
            return rc;
    memcpy(t->last_box, faces[pick].box, sizeof t->last_box);
    t->following = 1;
    t->stats.found++;
    smooth(t, &faces[pick], smoothed);
    *index = pick;
    return AG_OK;
}
