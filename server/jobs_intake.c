/*
 * jobs_intake.c - a complete upload becomes a job, on the intake thread: the MHD thread
 * suspends the connection and hands the upload over (ag_jobs_intake_push), so nothing here
 * stalls other clients: the fsync, the copy of a multipart body's video field into ID.in,
 * the container probe (header, sample tables, frame walk, all bounded), and the work bound.
 * Then the answer is prepared in the request (202 with the job, or the refusal) and the
 * connection resumed; the MHD thread sends it (ag_jobs_request, state AG_REQ_DONE).
 *
 * The list holds at most --max-jobs uploads (each holds a job slot). At shutdown the uploads
 * still waiting are answered 503 and the thread exits before the MHD daemon stops.
 */
#include "jobs_internal.h"
#include "jobs_redis.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

size_t ag_jobs_video_pixels(const ag_server *s) {
    const ag_server_config *c = &s->config;
    return c->jobs.max_pixels < c->max_pixels ? c->jobs.max_pixels : c->max_pixels;
}

int64_t ag_jobs_max_frames(const ag_jobs_config *c) {
    return c->max_frames;
}

void ag_jobs_intake_push(ag_jobs *j, ag_job_upload *up) {
    pthread_mutex_lock(&j->lock);
    int stopping = j->stopping;
    if (!stopping) {
        up->next = NULL;
        *j->intake_tail = up;
        j->intake_tail = &up->next;
        pthread_cond_signal(&j->intake_wake);
    }
    pthread_mutex_unlock(&j->lock);
    if (stopping) {
        up->request->retry_after_s = 5;
        ag_jobs_prepare_error(up->request, 503, "shutting_down", "the server is shutting down");
        ag_job_finish(j->server, up->request);
    }
}

/* The multipart body in ID.upload: its video field copied into ID.in. 0, or a reply. */
static int copy_source(ag_jobs *j, ag_request *r, job *b, const uint8_t *body, size_t size,
                       const char *boundary);

static int copy_field(ag_jobs *j, ag_request *r, ag_job_upload *up, const char *upath,
                      const char *inpath) {
    int fd = open(upath, O_RDONLY | O_CLOEXEC);
    void *map = fd >= 0 ? mmap(NULL, up->bytes, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    if (fd >= 0)
        close(fd);
    if (map == MAP_FAILED)
        return ag_jobs_prepare_error(r, 500, "spool_error", "cannot read the spool file"), -1;
    ag_multipart_part part;
    int found = ag_multipart_find(map, up->bytes, up->boundary, "video", &part);
    if (found == 1)
        found = ag_multipart_find(map, up->bytes, up->boundary, "image", &part);
    if (found == 0 && copy_source(j, r, up->slot, map, up->bytes, up->boundary) != 0) {
        munmap(map, up->bytes);
        unlink(upath);
        return -1;
    }
    int ok = -1;
    if (found == 0 && part.size > 0) {
        int out = open(inpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        ok = out >= 0 && ag_jobs_write_all(out, part.data, part.size) == 0 && fsync(out) == 0 ? 0
                                                                                              : -1;
        if (out >= 0)
            close(out);
    }
    munmap(map, up->bytes);
    unlink(upath);
    if (found != 0 || part.size == 0)
        return ag_jobs_prepare_error(r, 400, "bad_request", "%s",
                                     found == 1   ? "the form has no field 'video'"
                                     : found == 2 ? "the field 'video' is there more than once"
                                                  : "malformed multipart body"),
               -1;
    if (ok != 0)
        return ag_jobs_prepare_error(r, 500, "spool_error", "cannot write the spool file"), -1;
    return 0;
}

/* A fusion job's `source` image part into ID.source (b->fusion set), its header within
 * --fuse-max-pixels; fusion options without one are refused. 0, or -1 with the reply. */
static int copy_source(ag_jobs *j, ag_request *r, job *b, const uint8_t *body, size_t size,
                       const char *boundary) {
    ag_multipart_part part;
    int found = body ? ag_multipart_find(body, size, boundary, "source", &part) : 1;
    if (found == 1 && b->fuse_given)
        return ag_jobs_prepare_error(r, 400, "bad_request",
                                     "fusion options without a 'source' image: send the video "
                                     "and the face as multipart fields 'video' and 'source'"),
               -1;
    if (found == 1)
        return 0;
    if (found != 0 || !part.size || !ag_upload_sniff(part.data, part.size))
        return ag_jobs_prepare_error(r, found == 2 ? 400 : 415,
                                     found == 2 ? "bad_request" : "unsupported_media_type", "%s",
                                     found == 2 ? "the field 'source' is there more than once"
                                                : "the 'source' field is not a JPEG, PNG, WebP, "
                                                  "GIF, TIFF or HEIF image"),
               -1;
    int w = 0, h = 0;
    ag_error err = {0};
    size_t limit = ag_fuse_max_pixels(&j->server->config);
    if (ag_image_probe(part.data, part.size, &w, &h, &err) != 0)
        return ag_jobs_prepare_error(r, 422, "undecodable_image", "source: %s", err.message), -1;
    if ((size_t)w * (size_t)h > limit)
        return ag_jobs_prepare_error(r, 413, "too_large",
                                     "the source is %dx%d; the limit is %.1f megapixels "
                                     "(--fuse-max-pixels)",
                                     w, h, (double)limit / 1e6),
               -1;
    char path[4096];
    ag_jobs_path(j, b, "source", path, sizeof path);
    int out = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int ok = out >= 0 && ag_jobs_write_all(out, part.data, part.size) == 0 && fsync(out) == 0;
    if (out >= 0)
        close(out);
    if (!ok)
        return ag_jobs_prepare_error(r, 500, "spool_error", "cannot write the spool file"), -1;
    b->fusion = 1;
    return 0;
}

/* A fusion job runs here (the Redis queue carries one input file), with the face models,
 * its frames within --fuse-max-pixels, side by side only stylised. 0, or -1 with the reply. */
static int fusion_fits(ag_jobs *j, ag_request *r, const job *b, const ag_video_info *info) {
    const ag_server *s = j->server;
    size_t limit = ag_fuse_max_pixels(&s->config);
    int side = info->width > info->height ? info->width : info->height;
    double k = b->max_side > 0 && side > b->max_side ? (double)b->max_side / side : 1;
    double frame = (double)info->width * k * (double)info->height * k;
    if (j->redis)
        return ag_jobs_prepare_error(r, 501, "not_implemented",
                                     "fusion jobs are not taken with --jobs-redis (the cluster's "
                                     "queue carries one input file, not the source image)"),
               -1;
    if (!s->face_detect || !s->face_mesh)
        return ag_jobs_prepare_error(r, 503, "faces_unavailable",
                                     "this server has no face models: fusion is unavailable"),
               -1;
    if (frame > (double)limit)
        return ag_jobs_prepare_error(r, 413, "too_large",
                                     "frames of %.1f megapixels fused; the limit is %.1f "
                                     "(--fuse-max-pixels): ask for a smaller max_side",
                                     frame / 1e6, (double)limit / 1e6),
               -1;
    if (b->side_by_side && !b->fuse_style)
        return ag_jobs_prepare_error(r, 400, "bad_option",
                                     "side_by_side applies to a stylised fusion (model=NAME)"),
               -1;
    return 0;
}

/* The size of a job's result frames as the video pipeline plans them (src/video/video.c,
 * plan_sizes): the input's display size fitted to max_side (even sides, at least
 * AG_MIN_SIDE), twice as wide side by side, then `upscale` times. */
static void output_size(int width, int height, int max_side, int side_by_side, int upscale,
                        int *out_width, int *out_height) {
    int longest = width > height ? width : height;
    if (max_side > 0 && longest > max_side) {
        double scale = (double)max_side / longest;
        width = (int)lround(width * scale);
        height = (int)lround(height * scale);
    }
    width = (width & ~1) < AG_MIN_SIDE ? AG_MIN_SIDE : width & ~1;
    height = (height & ~1) < AG_MIN_SIDE ? AG_MIN_SIDE : height & ~1;
    int n = upscale > 1 ? upscale : 1;
    *out_width = (side_by_side ? 2 : 1) * width * n;
    *out_height = height * n;
}

/* Output pixels of one frame: the input's, scaled down to fit max_side, then upscale=N
 * times (the upscaler's frames are what the worker and the encoder go through). */
static double output_pixels(const ag_video_info *info, int max_side, int upscale) {
    int side = info->width > info->height ? info->width : info->height;
    double scale = max_side > 0 && side > max_side ? (double)max_side / side : 1.0;
    double n = upscale > 1 ? upscale : 1;
    return (double)info->width * scale * n * (double)info->height * scale * n;
}

/* What one frame costs in pixels of the job's style (the unit of --max-job-megapixels):
 * its stylised pixels, with restore=K what the restorer costs for the faces of a frame
 * (restore_price), and with upscale=N what the upscaler costs over them, by the
 * networks' FLOPs per input pixel (the upscaler's at its own scale: an x4 file serving
 * upscale=2 makes x4 before resizing; side by side, it upscales both halves), but never
 * less than the output's pixels, the old price, which the encoder and the frames' memory go
 * by (and FLOPs undercount a small upscaler's time: docs/stability.md). */
typedef struct frame_cost {
    double style_px, upscaler_ratio, work_px;
    double face_px; /* restore=K: one face's restoration in pixels of the style */
    int faces;      /* the faces a frame's restoration is priced at */
    double restore_px;
} frame_cost;

#define PRICE_SIDE 256 /* FLOPs grow with the pixels: any size gives the style's per pixel */

/* restore=K: one face at the restorer's size (its FLOPs over the style's per pixel), times
 * the faces the pipeline restores at most in a frame (ag_restore_options' max_faces, as
 * photos): a frame holds up to that many, and a clip's every frame may. */
static void restore_price(const ag_server *s, const job *b, frame_cost *c) {
    if (!b->restore || b->restore > s->restorer_count)
        return;
    const ag_model *m = s->restorers[b->restore - 1];
    int face = ag_model_get_info(m)->min_side;
    double style = ag_model_flop(s->models[b->model], PRICE_SIDE, PRICE_SIDE);
    ag_restore_options ro;
    ag_restore_options_init(&ro);
    c->faces = ro.max_faces;
    c->face_px = style > 0 ? ag_model_flop(m, face, face) / style * PRICE_SIDE * PRICE_SIDE : 0;
    c->restore_px = c->faces * c->face_px;
}

static frame_cost price_frame(const ag_server *s, const job *b, const ag_video_info *info) {
    frame_cost c = {.style_px = output_pixels(info, b->max_side, 1)};
    restore_price(s, b, &c);
    c.work_px = c.style_px + c.restore_px;
    /* A fusion: its frames' pixels (the encoder's and the frames' price) plus, stylised, the
     * style's; upscale=N as below on top. */
    if (b->fusion)
        c.work_px += b->fuse_style ? c.style_px : 0;
    int slot = b->upscale > 1 ? ag_server_upscale_slot(b->upscale) : -1;
    if (slot < 0 || !s->upscalers[slot])
        return c;
    double style = ag_model_flop(s->models[b->model], PRICE_SIDE, PRICE_SIDE);
    double up = ag_model_flop(s->upscalers[slot], PRICE_SIDE, PRICE_SIDE);
    c.upscaler_ratio = style > 0 ? up / style : 0;
    double sbs = b->side_by_side ? 2 : 1; /* the upscaler gets both halves */
    double out_px = output_pixels(info, b->max_side, b->upscale) * sbs;
    double network_px = c.style_px * (1 + c.upscaler_ratio * sbs) + c.restore_px;
    c.work_px = network_px > out_px ? network_px : out_px;
    return c;
}

/* --max-job-megapixels: 0, or -1 with the 413 prepared in r, naming the limit and, for
 * restore=K and upscale=N, the networks' costs it counted. */
static int work_fits(ag_jobs *j, ag_request *r, const job *b, const ag_video_info *info,
                     const frame_cost *c) {
    double work_mpx = (double)info->frames * c->work_px / 1e6;
    double bound_mpx = (double)j->c->max_work_mpx;
    if (bound_mpx <= 0 || work_mpx <= bound_mpx)
        return 0;
    const ag_server *s = j->server;
    char restored[200] = "", upscaled[240] = "";
    if (c->restore_px > 0) {
        const char *path = s->config.restore_models[b->restore - 1], *slash = strrchr(path, '/');
        snprintf(restored, sizeof restored,
                 ", restore=%d by %s priced at %d faces a frame of %.0f pixels' work each",
                 b->restore, slash ? slash + 1 : path, c->faces, c->face_px);
    }
    if (b->upscale > 1) {
        const ag_model *up = s->upscalers[ag_server_upscale_slot(b->upscale)];
        snprintf(upscaled, sizeof upscaled,
                 ", upscale=%d by %s costing %.1f times %s's FLOPs a pixel", b->upscale,
                 ag_model_get_info(up)->name, c->upscaler_ratio, s->model_names[b->model]);
    }
    char work[80] = "";
    if (c->restore_px > 0 || b->upscale > 1)
        snprintf(work, sizeof work, ": %.0f pixels' work a frame", c->work_px);
    ag_jobs_prepare_error(r, 413, "too_large",
                          "%lld frames of %.0f pixels stylised%s%s%s = %.0f megapixels of work; "
                          "the limit is %.0f (--max-job-megapixels; a smaller max_side%s%s or a "
                          "shorter clip fits)",
                          (long long)info->frames, c->style_px, restored, upscaled, work, work_mpx,
                          bound_mpx, b->restore ? ", no restore" : "",
                          b->upscale > 1 ? ", upscale" : "");
    return -1;
}

/* The result's frames within --max-output-pixels (upscale=N, as convert's upscale_fits
 * words it) and the encoders' 16384 px a side; 0, or -1 with the 413 prepared in r. */
static int output_fits(ag_jobs *j, ag_request *r, const job *b, int out_w, int out_h) {
    const ag_server_config *c = &j->server->config;
    double pixels = (double)out_w * out_h;
    if (b->upscale > 1 && pixels > (double)c->max_output_pixels) {
        ag_jobs_prepare_error(r, 413, "output_too_large",
                              "upscale=%d gives %.1f megapixels; the limit is %.1f "
                              "(--max-output-pixels): ask for a smaller max_side or scale",
                              b->upscale, pixels / 1e6, (double)c->max_output_pixels / 1e6);
        return -1;
    }
    if (out_w > AG_JOB_MAX_OUT_SIDE || out_h > AG_JOB_MAX_OUT_SIDE) {
        ag_jobs_prepare_error(r, 413, "output_too_large",
                              "the result's frames would be %dx%d; the video encoders take at "
                              "most %d px a side: ask for a smaller max_side or scale",
                              out_w, out_h, AG_JOB_MAX_OUT_SIDE);
        return -1;
    }
    return 0;
}

/* The probe's refusal as a reply: the limit (413), not a video we take (415), damaged (422). */
static int refuse_probe(ag_jobs *j, ag_request *r, const ag_error *err) {
    const char *at = strchr(err->message, ':');
    const char *msg =
        at && !strncmp(err->message, j->c->dir, strlen(j->c->dir)) ? at + 2 : err->message;
    int status = err->code == AG_E_LIMIT ? 413 : err->code == AG_E_UNSUPPORTED ? 415 : 422;
    const char *code = err->code == AG_E_LIMIT         ? "too_large"
                       : err->code == AG_E_UNSUPPORTED ? "unsupported_media_type"
                                                       : "undecodable_video";
    ag_jobs_prepare_error(r, status, code, "%s", msg);
    return -1;
}

/* The result's estimated bytes (ag_jobs_result_bytes: by format, frames and output size),
 * within --max-job-result-mb: 0 and *bytes set, or -1 with the 413 prepared in r. A header
 * without a frame count is estimated at the run's frame bound, capped by the setting. */
static int result_fits(ag_jobs *j, ag_request *r, const job *b, const ag_video_info *info,
                       int64_t max_frames, int out_w, int out_h, size_t in_bytes, size_t *bytes) {
    int64_t frames = info->frames > 0 ? info->frames : max_frames;
    size_t bound = j->c->max_result_bytes;
    size_t estimate = ag_jobs_result_bytes(b->ext, frames, out_w, out_h, in_bytes, b->upscale);
    if (estimate > bound && info->frames > 0) {
        int animation = !strcmp(b->ext, "gif") || !strcmp(b->ext, "webp");
        ag_jobs_prepare_error(r, 413, "too_large",
                              "a %s of %lld frames of %dx%d would be about %.0f MiB; the limit "
                              "is %zu MiB (--max-job-result-mb): %sa smaller max_side or a "
                              "shorter clip fits",
                              b->ext, (long long)frames, out_w, out_h, (double)estimate / 1048576.0,
                              bound >> 20,
                              animation ? "format=mp4 or webm (many times smaller), " : "");
        return -1;
    }
    *bytes = estimate < bound ? estimate : bound;
    return 0;
}

/* --jobs-redis: the job into the cluster's queue; the local slot was only the upload's and
 * is released here (its reservation is the job's in Redis now). 0, or -1 with the reply. */
static int queue_in_redis(ag_jobs *j, ag_job_upload *up, job *b, const char *inpath,
                          size_t result_bytes) {
    ag_request *r = up->request;
    size_t in_bytes = ag_jobs_file_size(inpath);
    b->created_unix = ag_jobs_now_unix();
    b->state = JOB_QUEUED;
    b->reserved_bytes = result_bytes;
    b->file_bytes = in_bytes;
    int rc = ag_jobs_redis_submit(j, b);
    if (rc != AG_JR_OK) {
        unlink(inpath);
        b->state = JOB_UPLOADING;
        r->retry_after_s = rc == AG_JR_DOWN ? AG_JR_RETRY_AFTER_S : 60;
        if (rc == AG_JR_DOWN)
            ag_jobs_prepare_error(r, 503, "jobs_unavailable",
                                  "the job queue (Redis) is unreachable; try again shortly");
        else
            ag_jobs_prepare_error(r, 429, "too_many_jobs",
                                  "this client has %d jobs queued or running (--jobs-per-client)",
                                  j->c->per_client);
        return -1;
    }
    ag_jobs_prepare_job(r, j, b, 202);
    snprintf(up->location, sizeof up->location, "/api/v1/jobs/%s", b->id);
    pthread_mutex_lock(&j->lock);
    up->slot = NULL;
    b->reserved_bytes = b->file_bytes = 0;
    ag_jobs_release_slot(j, b);
    pthread_mutex_unlock(&j->lock);
    return 0;
}

/* Fill r with the answer to a complete upload; the job is queued when it is a 202. */
static int intake(ag_jobs *j, ag_job_upload *up) {
    ag_server *s = j->server;
    ag_request *r = up->request;
    job *b = up->slot;
    char upath[4096], inpath[4096], srcpath[4096];
    ag_jobs_path(j, b, "upload", upath, sizeof upath);
    ag_jobs_path(j, b, "in", inpath, sizeof inpath);
    ag_jobs_path(j, b, "source", srcpath, sizeof srcpath);
    int synced = fsync(up->fd) == 0;
    if (close(up->fd) != 0)
        synced = 0;
    up->fd = -1;
    if (!synced)
        return ag_jobs_prepare_error(r, 500, "spool_error", "cannot write the spool file"), -1;
    if (up->kind == AG_BODY_MULTIPART) {
        if (copy_field(j, r, up, upath, inpath) != 0)
            return -1;
    } else if (copy_source(j, r, b, NULL, 0, NULL) != 0) {
        unlink(upath);
        return -1;
    } else if (rename(upath, inpath) != 0) {
        return ag_jobs_prepare_error(r, 500, "spool_error", "cannot keep the upload"), -1;
    }
    /* The header and the tables only: size, duration, frames, codec; before any frame. */
    ag_video_limits limits = {.max_pixels = ag_jobs_video_pixels(s),
                              .max_seconds = j->c->max_seconds,
                              .max_frames = ag_jobs_max_frames(j->c)};
    ag_video_info info;
    ag_error err = {0};
    if (ag_video_probe(inpath, &limits, &info, &err) != 0) {
        unlink(inpath), unlink(srcpath);
        return refuse_probe(j, r, &err);
    }
    if (b->fusion && fusion_fits(j, r, b, &info) != 0) {
        unlink(inpath), unlink(srcpath);
        return -1;
    }
    int out_w = 0, out_h = 0;
    output_size(info.width, info.height, b->max_side, b->side_by_side, b->upscale, &out_w, &out_h);
    if (output_fits(j, r, b, out_w, out_h) != 0) {
        unlink(inpath), unlink(srcpath);
        return -1;
    }
    /* The work: frames x what a frame costs, what the runner's time goes by. */
    frame_cost cost = price_frame(s, b, &info);
    if (work_fits(j, r, b, &info, &cost) != 0) {
        unlink(inpath), unlink(srcpath);
        return -1;
    }
    double bound_mpx = (double)j->c->max_work_mpx, px = cost.work_px;
    int64_t by_work = bound_mpx > 0 && px > 0 ? (int64_t)(bound_mpx * 1e6 / px) : 0;
    int64_t max_frames = limits.max_frames;
    if (by_work > 0 && (max_frames == 0 || by_work < max_frames))
        max_frames = by_work; /* a header that undercounts is caught during the run */
    size_t in_bytes = ag_jobs_file_size(inpath), result_bytes = 0;
    if (result_fits(j, r, b, &info, max_frames, out_w, out_h, in_bytes, &result_bytes) != 0) {
        unlink(inpath), unlink(srcpath);
        return -1;
    }
    if (j->redis) {
        b->max_frames = max_frames;
        b->frames_total = info.frames;
        b->out_width = out_w;
        b->out_height = out_h;
        return queue_in_redis(j, up, b, inpath, result_bytes);
    }
    pthread_mutex_lock(&j->lock);
    /* The reservation now: the input as it is, plus the result's estimate (the upload
     * reserved as much again as itself, which a GIF's result exceeds many times). */
    size_t held = j->spool_bytes - b->reserved_bytes;
    if (held + in_bytes + result_bytes > j->c->quota_bytes) {
        pthread_mutex_unlock(&j->lock);
        unlink(inpath), unlink(srcpath);
        r->retry_after_s = 60;
        ag_jobs_prepare_error(r, 507, "spool_full",
                              "the job spool is full (--jobs-quota-mb %zu; this %s result is "
                              "estimated at %.0f MiB); try again later",
                              j->c->quota_bytes >> 20, b->ext, (double)result_bytes / 1048576.0);
        return -1;
    }
    b->max_frames = max_frames;
    b->frames_total = info.frames;
    b->created_unix = ag_jobs_now_unix();
    b->seq = j->next_seq++;
    b->state = JOB_QUEUED;
    b->out_width = out_w;
    b->out_height = out_h;
    j->spool_bytes = held;
    b->reserved_bytes = result_bytes;
    b->file_bytes = in_bytes;
    j->spool_bytes += b->reserved_bytes + b->file_bytes;
    ag_jobs_save_state(j, b);
    if (ag_jobs_prepare_job(r, j, b, 202) == 0) {
        snprintf(up->location, sizeof up->location, "/api/v1/jobs/%s", b->id);
        up->slot = NULL; /* the table's now */
        pthread_cond_broadcast(&j->wake);
    } else {
        b->state = JOB_UPLOADING; /* released with the upload at completion */
        unlink(inpath), unlink(srcpath);
    }
    pthread_mutex_unlock(&j->lock);
    return 0;
}

void *ag_jobs_intake_main(void *arg) {
    ag_jobs *j = arg;
    ag_log_thread_request("");
    for (;;) {
        pthread_mutex_lock(&j->lock);
        while (!j->intake_head && !j->stopping)
            pthread_cond_wait(&j->intake_wake, &j->lock);
        ag_job_upload *up = j->intake_head;
        if (up) {
            j->intake_head = up->next;
            if (!j->intake_head)
                j->intake_tail = &j->intake_head;
        }
        int stopping = j->stopping;
        pthread_mutex_unlock(&j->lock);
        if (!up)
            break; /* stopping, nothing left */
        ag_log_thread_request(up->request->id);
        if (stopping) {
            up->request->retry_after_s = 5;
            ag_jobs_prepare_error(up->request, 503, "shutting_down", "the server is shutting down");
        } else {
            intake(j, up);
        }
        ag_log_thread_request("");
        ag_job_finish(j->server, up->request);
    }
    return NULL;
}
