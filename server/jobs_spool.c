/*
 * jobs_spool.c - the spool directory of the video jobs (--jobs-dir). Per job: ID.json (its
 * state, rewritten by temp file + fsync + rename at each transition), ID.in (the video),
 * ID.out.EXT (the result, itself written by temp + rename, 0600) and, during an upload,
 * ID.upload. At start-up, jobs that were queued or running are marked failed
 * ("interrupted"), their files and every temporary or orphan file removed: a kill -9 leaves
 * nothing behind that the API does not account for.
 *
 * A job id is "<port>-<32 hex>": the port this instance listens on (which a balancer in
 * front of several instances routes by, contrib/nginx/animegan.conf) and 128 random bits,
 * the secret. A job survives a restart of its instance on the same port and --jobs-dir.
 */
#include "jobs_internal.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *const ag_job_state_names[] = {"free", "uploading", "queued",   "running",
                                          "done", "failed",    "cancelled"};

int ag_jobs_set_error(ag_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int ag_jobs_set_error(ag_error *err, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    err->code = code;
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return code;
}

double ag_jobs_now_unix(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void ag_jobs_path(const ag_jobs *j, const job *b, const char *suffix, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s.%s", j->c->dir, b->id, suffix);
}

void ag_jobs_result_path(const ag_jobs *j, const job *b, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s.out.%s", j->c->dir, b->id, b->ext);
}

size_t ag_jobs_file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (size_t)st.st_size : 0;
}

/* "<port>-<32 hex>" (1 to 5 digits), or the bare 32 hex of spools from before ports. */
int ag_jobs_valid_id(const char *s, size_t n) {
    size_t digits = 0;
    while (digits < n && digits < 6 && s[digits] >= '0' && s[digits] <= '9')
        digits++;
    size_t at = digits > 0 && digits < 6 && digits < n && s[digits] == '-' ? digits + 1 : 0;
    if (n - at != AG_JOB_SECRET_HEX)
        return 0;
    for (size_t i = at; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

int ag_jobs_new_id(const ag_jobs *j, char out[AG_JOB_ID_MAX + 1]) {
    uint8_t bits[16];
    if (getrandom(bits, sizeof bits, 0) != (ssize_t)sizeof bits)
        return -1; /* an id must be a secret: no fallback */
    /* with --jobs-redis any instance serves any job: the id names none */
    int n = j->redis ? 0 : snprintf(out, AG_JOB_ID_MAX + 1, "%d-", j->server->port);
    for (int i = 0; i < 16; i++)
        snprintf(out + n + 2 * i, 3, "%02x", bits[i]);
    return 0;
}

int ag_jobs_write_all(int fd, const void *data, size_t n) {
    const uint8_t *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Remove every file of a job (state, input, result, partial upload). */
void ag_jobs_remove_files(ag_jobs *j, const job *b) {
    char path[4096];
    static const char *const suffixes[] = {"json", "in", "upload", "source"};
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        ag_jobs_path(j, b, suffixes[i], path, sizeof path);
        unlink(path);
    }
    ag_jobs_result_path(j, b, path, sizeof path);
    unlink(path);
}

/* ---- the state file ------------------------------------------------------------------------ */

/* Write ID.json by temp file + rename; called with the lock held (small, local disk). */
void ag_jobs_save_state(ag_jobs *j, const job *b) {
    ag_text t;
    ag_text_init(&t, AG_JOB_STATE_JSON_MAX);
    ag_text_printf(&t,
                   "{\"id\":\"%s\",\"state\":\"%s\",\"ext\":\"%s\",\"model\":%d,\"max_side\":%d,"
                   "\"side_by_side\":%d,\"upscale\":%d,\"restore\":%d,\"width\":%d,\"height\":%d,"
                   "\"created\":%.3f,\"finished\":%.3f,\"frames_done\":%lld,"
                   "\"frames_total\":%lld,\"error_code\":",
                   b->id, ag_job_state_names[b->state], b->ext, b->model, b->max_side,
                   b->side_by_side, b->upscale > 1 ? b->upscale : 1, b->restore, b->out_width,
                   b->out_height, b->created_unix, b->finished_unix, (long long)b->frames_done,
                   (long long)b->frames_total);
    ag_text_json_string(&t, b->error_code);
    ag_text_append(&t, ",\"error\":", 9);
    ag_text_json_string(&t, b->error);
    ag_text_append(&t, "}\n", 2);
    size_t size = 0;
    char *text = ag_text_take(&t, &size);
    if (!text)
        return;
    char tmp[4096], path[4096];
    snprintf(tmp, sizeof tmp, "%s/.%s.json.XXXXXX", j->c->dir, b->id);
    ag_jobs_path(j, b, "json", path, sizeof path);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd >= 0) {
        int ok = ag_jobs_write_all(fd, text, size) == 0 && fsync(fd) == 0;
        close(fd);
        if (!ok || rename(tmp, path) != 0)
            unlink(tmp);
    }
    ag_free(text);
}

static int state_from_name(const char *name) {
    for (int i = JOB_QUEUED; i <= JOB_CANCELLED; i++)
        if (!strcmp(name, ag_job_state_names[i]))
            return i;
    return -1;
}

/* A frame side from a state file: 1 to AG_JOB_MAX_OUT_SIDE, else 0 (absent or not one). */
static int side_of(const cJSON *root, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    return cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= AG_JOB_MAX_OUT_SIDE
               ? (int)v->valuedouble
               : 0;
}

/* Read a state file of a previous run into a free slot; 0 when loaded. */
static int load_state(const char *path, job *b) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    char buf[AG_JOB_STATE_JSON_MAX + 1];
    ssize_t n = read(fd, buf, AG_JOB_STATE_JSON_MAX);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    cJSON *root = cJSON_Parse(buf);
    if (!root)
        return -1;
    int rc = -1;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "id");
    const cJSON *state = cJSON_GetObjectItemCaseSensitive(root, "state");
    const cJSON *ext = cJSON_GetObjectItemCaseSensitive(root, "ext");
    if (cJSON_IsString(id) && ag_jobs_valid_id(id->valuestring, strlen(id->valuestring)) &&
        cJSON_IsString(state) && state_from_name(state->valuestring) > 0 && cJSON_IsString(ext) &&
        strlen(ext->valuestring) < sizeof b->ext) {
        memset(b, 0, sizeof *b);
        snprintf(b->id, sizeof b->id, "%s", id->valuestring);
        snprintf(b->ext, sizeof b->ext, "%s", ext->valuestring);
        b->state = (job_state)state_from_name(state->valuestring);
        b->upscale = 1; /* state files from before upscale=N: not upscaled */
        const cJSON *v;
        if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(root, "upscale")) &&
            ag_server_upscale_slot((int)v->valuedouble) >= 0)
            b->upscale = (int)v->valuedouble;
        if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(root, "restore")) &&
            v->valuedouble >= 1 && v->valuedouble <= AG_SERVER_MAX_RESTORERS)
            b->restore = (int)v->valuedouble; /* shown in the job's JSON */
        b->out_width = side_of(root, "width");
        b->out_height = side_of(root, "height");
        if (!b->out_width || !b->out_height)
            b->out_width = b->out_height = 0; /* unknown: not reported */
        if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(root, "created")))
            b->created_unix = v->valuedouble;
        if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(root, "finished")))
            b->finished_unix = v->valuedouble;
        if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(root, "frames_done")))
            b->frames_done = (int64_t)v->valuedouble;
        if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(root, "frames_total")))
            b->frames_total = (int64_t)v->valuedouble;
        if (cJSON_IsString(v = cJSON_GetObjectItemCaseSensitive(root, "error_code")))
            snprintf(b->error_code, sizeof b->error_code, "%s", v->valuestring);
        if (cJSON_IsString(v = cJSON_GetObjectItemCaseSensitive(root, "error")))
            snprintf(b->error, sizeof b->error, "%s", v->valuestring);
        rc = 0;
    }
    cJSON_Delete(root);
    return rc;
}

job *ag_jobs_find(ag_jobs *j, const char *id, size_t n) {
    if (!ag_jobs_valid_id(id, n))
        return NULL;
    for (int i = 0; i < j->c->max_jobs; i++)
        if (j->slots[i].state > JOB_UPLOADING && strlen(j->slots[i].id) == n &&
            !strncmp(j->slots[i].id, id, n))
            return &j->slots[i];
    return NULL;
}

job *ag_jobs_free_slot(ag_jobs *j) {
    for (int i = 0; i < j->c->max_jobs; i++)
        if (j->slots[i].state == JOB_FREE)
            return &j->slots[i];
    return NULL;
}

void ag_jobs_release_slot(ag_jobs *j, job *b) {
    size_t held = b->reserved_bytes + b->file_bytes;
    j->spool_bytes = j->spool_bytes > held ? j->spool_bytes - held : 0;
    memset(b, 0, sizeof *b);
}

/* ---- crash recovery -------------------------------------------------------------------------- */

static int has_suffix(const char *name, const char *suffix) {
    size_t n = strlen(name), m = strlen(suffix);
    return n > m && !strcmp(name + n - m, suffix);
}

/* Load ID.json files; jobs that were queued or running did not survive: failed. */
void ag_jobs_recover(ag_jobs *j) {
    DIR *dir = opendir(j->c->dir);
    if (!dir)
        return;
    char path[4096];
    struct dirent *e;
    int interrupted = 0, kept = 0, removed = 0;
    while ((e = readdir(dir)) != NULL) {
        if (!has_suffix(e->d_name, ".json") || e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", j->c->dir, e->d_name);
        job *b = ag_jobs_free_slot(j);
        job loaded;
        size_t id_len = strcspn(e->d_name, ".");
        if (!b || load_state(path, &loaded) != 0 || strlen(loaded.id) != id_len ||
            strncmp(e->d_name, loaded.id, id_len) != 0) {
            unlink(path);
            removed++;
            continue;
        }
        *b = loaded;
        b->seq = j->next_seq++;
        if (b->state == JOB_QUEUED || b->state == JOB_RUNNING) {
            b->state = JOB_FAILED;
            b->finished_unix = ag_jobs_now_unix();
            snprintf(b->error_code, sizeof b->error_code, "interrupted");
            snprintf(b->error, sizeof b->error,
                     "the server stopped while this job was %s; submit it again",
                     loaded.state == JOB_QUEUED ? "queued" : "running");
            char in[4096], out[4096];
            ag_jobs_path(j, b, "in", in, sizeof in);
            ag_jobs_result_path(j, b, out, sizeof out);
            unlink(in);
            unlink(out);
            ag_jobs_path(j, b, "source", in, sizeof in); /* a fusion job's */
            unlink(in);
            ag_jobs_save_state(j, b);
            interrupted++;
        }
        if (b->state == JOB_DONE) {
            ag_jobs_result_path(j, b, path, sizeof path);
            if (access(path, R_OK) != 0) {
                b->state = JOB_FAILED;
                snprintf(b->error_code, sizeof b->error_code, "result_lost");
                snprintf(b->error, sizeof b->error, "the result file is gone");
                ag_jobs_save_state(j, b);
            }
        }
        char in[4096], out[4096];
        ag_jobs_path(j, b, "in", in, sizeof in);
        ag_jobs_result_path(j, b, out, sizeof out);
        b->file_bytes = ag_jobs_file_size(in) + ag_jobs_file_size(out);
        j->spool_bytes += b->file_bytes;
        kept++;
    }
    /* Everything else is a temporary or an orphan: uploads cut by the crash, temp files of
     * the muxer and of state writes, inputs and results whose state file is gone. */
    rewinddir(dir);
    while ((e = readdir(dir)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        int keep = 0;
        size_t id_len = strcspn(e->d_name, ".");
        if (e->d_name[0] != '.' && e->d_name[id_len] == '.') {
            job *b = ag_jobs_find(j, e->d_name, id_len);
            const char *rest = e->d_name + id_len + 1;
            keep =
                b && (!strcmp(rest, "json") || (!strcmp(rest, "in") && b->state <= JOB_RUNNING) ||
                      (!strncmp(rest, "out.", 4) && b->state == JOB_DONE));
        }
        if (!keep) {
            snprintf(path, sizeof path, "%s/%s", j->c->dir, e->d_name);
            if (unlink(path) == 0)
                removed++;
        }
    }
    closedir(dir);
    ag_log_event(j->server->config.log_format, "info",
                 "jobs: %s: %d job(s) kept, %d interrupted job(s) marked failed, %d stale "
                 "file(s) removed",
                 j->c->dir, kept, interrupted, removed);
}
