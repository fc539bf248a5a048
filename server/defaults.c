/*
 * defaults.c - the settings a host gets from the memory it has. The memory bound (budget.c)
 * grows with the queue, the image limits and the upscaling window; the defaults a large host
 * wants do not fit a 1 GiB VPS. So the bound is held against a memory limit (--max-memory-mb,
 * else the process's cgroup limit, else the RAM), and the settings the user did not give are
 * taken from the first level of a table, largest first, whose bound fits it (server.c tries
 * them in order). A given setting is never changed: when the smallest level does not fit
 * with it, the service refuses to start and names it.
 */
#include "server.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)
#define MPX(w, h) ((size_t)(w) * (size_t)(h))

/* One level: queue depth, the image limit (convert, restore, upscale), a fusion's images,
 * the upscaling tile window and the largest upscaled result. */
typedef struct level {
    int queue;
    size_t max_pixels, fuse_max_pixels, upscale_bytes, max_output_pixels;
} level;

static const level levels[] = {
    {16, MPX(4096, 4096), MPX(4096, 4096), 128 * MIB, MPX(2048, 2048)}, /* 8 GiB and up */
    {8, MPX(4096, 4096), MPX(2896, 2896), 128 * MIB, MPX(2048, 2048)},
    {4, MPX(4096, 2048), MPX(2048, 2048), 64 * MIB, MPX(2048, 2048)},
    {2, MPX(2048, 2048), MPX(2048, 1448), 64 * MIB, MPX(2048, 1448)},
    {1, MPX(2048, 2048), MPX(1448, 1448), 32 * MIB, MPX(1448, 1448)},
    {1, MPX(1448, 1448), MPX(1024, 1024), 32 * MIB, MPX(1024, 1024)}, /* 1 GiB: a queue slot */
    {0, MPX(2048, 1448), MPX(1448, 1024), 32 * MIB, MPX(1448, 1024)},
};

int ag_defaults_levels(void) {
    return (int)(sizeof levels / sizeof levels[0]);
}

void ag_defaults_apply(ag_server_config *c, int i) {
    const level *l = &levels[i];
    if (!ag_config_given(c, "queue"))
        c->queue = l->queue;
    if (!ag_config_given(c, "max-pixels"))
        c->max_pixels = l->max_pixels;
    if (!ag_config_given(c, "fuse-max-pixels"))
        c->fuse_max_pixels = l->fuse_max_pixels;
    if (!ag_config_given(c, "upscale-max-mb"))
        c->upscale_max_bytes = l->upscale_bytes;
    if (!ag_config_given(c, "max-output-pixels"))
        c->max_output_pixels = l->max_output_pixels;
}

static const char *mark(const ag_server_config *c, const char *name) {
    return ag_config_given(c, name) ? " (given)" : "";
}

void ag_defaults_describe(const ag_server_config *c, char *buf, size_t cap) {
    snprintf(buf, cap,
             "queue %d%s, max-pixels %.1fM%s, fuse-max-pixels %.1fM%s, upscale-max-mb %zu%s, "
             "max-output-pixels %.1fM%s",
             c->queue, mark(c, "queue"), (double)c->max_pixels / 1e6, mark(c, "max-pixels"),
             (double)ag_fuse_max_pixels(c) / 1e6, mark(c, "fuse-max-pixels"),
             c->upscale_max_bytes / MIB, mark(c, "upscale-max-mb"),
             (double)c->max_output_pixels / 1e6, mark(c, "max-output-pixels"));
}

void ag_defaults_given(const ag_server_config *c, char *buf, size_t cap) {
    static const char *const names[] = {"queue",          "max-pixels",        "fuse-max-pixels",
                                        "upscale-max-mb", "max-output-pixels", "workers",
                                        "max-upload-mb",  "max-side",          "cache-mb"};
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof names / sizeof names[0] && len < cap; i++)
        if (ag_config_given(c, names[i]))
            len += (size_t)snprintf(buf + len, cap - len, "%s--%s", len ? ", " : "", names[i]);
}

/* ---- the memory limit ------------------------------------------------------------------- */

size_t ag_memory_limit(const ag_server_config *c, char *why, size_t why_cap) {
    if (c->max_memory_bytes) {
        snprintf(why, why_cap, "--max-memory-mb");
        return c->max_memory_bytes;
    }
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    size_t ram = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : SIZE_MAX;
    char where[512];
    size_t cgroup = ag_cgroup_memory_limit("", where, sizeof where);
    if (cgroup && cgroup < ram) {
        snprintf(why, why_cap, "the cgroup's %s", where);
        return cgroup;
    }
    snprintf(why, why_cap, "the RAM");
    return ram;
}
