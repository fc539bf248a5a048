/*
 * cgroup.c - the memory limit a container or a systemd unit puts on this process, read where
 * the kernel shows it: cgroup v2's memory.max or v1's memory.limit_in_bytes, in this process's
 * own cgroup (its path comes from /proc/self/cgroup, so a unit's MemoryMax= is seen without a
 * cgroup namespace) and in each ancestor, whose limits apply too. The only cgroup reader:
 * defaults.c's ag_memory_limit takes the lowest (and the file it is in) for the memory bound.
 */
#include "server.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

/* A limit at or above 2^62 is the kernel's "no limit" (v1 prints a page-rounded LLONG_MAX). */
#define NO_LIMIT ((unsigned long long)1 << 62)

/* The number in `path` ("max" or absent: none); 0 when there is no limit. */
static unsigned long long read_limit(const char *path) {
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    unsigned long long value = 0;
    if (fscanf(f, "%llu", &value) != 1 || value >= NO_LIMIT)
        value = 0;
    fclose(f);
    return value;
}

/* The lowest limit found so far and the file it was read from. */
typedef struct lowest {
    unsigned long long bytes; /* 0: none yet */
    char *where;
    size_t where_cap;
} lowest;

static void consider(lowest *l, unsigned long long bytes, const char *path) {
    if (!bytes || (l->bytes && l->bytes <= bytes))
        return;
    l->bytes = bytes;
    if (l->where_cap)
        snprintf(l->where, l->where_cap, "%s", path);
}

/* The lowest limit in `file` of directory mount+cgroup and of each of its parents up to the
 * mount (a cgroup namespace's root is the mount itself), into l. */
static void lowest_along(lowest *l, const char *mount, const char *cgroup, const char *file) {
    char dir[PATH_MAX], path[PATH_MAX + 64];
    if (snprintf(dir, sizeof dir, "%s%s", mount, cgroup) >= (int)sizeof dir)
        return;
    size_t mount_len = strlen(mount);
    for (;;) {
        snprintf(path, sizeof path, "%s/%s", dir, file);
        consider(l, read_limit(path), path);
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) < mount_len)
            break;
        *slash = '\0';
    }
}

/* Whether the comma-separated `list` holds `name`. */
static int has_controller(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ',')) {
        if (strcspn(p, ",") == n && !strncmp(p, name, n))
            return 1;
    }
    return 0;
}

size_t ag_cgroup_memory_limit(const char *root, char *where, size_t where_cap) {
    char v2[PATH_MAX], v1[PATH_MAX], line[PATH_MAX + 64];
    snprintf(v2, sizeof v2, "%s/sys/fs/cgroup", root);
    snprintf(v1, sizeof v1, "%s/sys/fs/cgroup/memory", root);
    lowest l = {0, where, where_cap};
    if (where_cap)
        where[0] = '\0';
    /* The mount points' own files: a container's limit when it has a cgroup namespace. */
    lowest_along(&l, v2, "", "memory.max");
    lowest_along(&l, v1, "", "memory.limit_in_bytes");
    snprintf(line, sizeof line, "%s/proc/self/cgroup", root);
    FILE *f = fopen(line, "re");
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        /* "hierarchy-id:controllers:path"; v2's is "0::path" */
        char *controllers = strchr(line, ':');
        char *cgroup = controllers ? strchr(controllers + 1, ':') : NULL;
        if (!cgroup || cgroup[1] != '/')
            continue;
        *cgroup++ = '\0';
        *controllers++ = '\0';
        if (!strcmp(line, "0") && controllers[0] == '\0')
            lowest_along(&l, v2, cgroup, "memory.max");
        else if (has_controller(controllers, "memory"))
            lowest_along(&l, v1, cgroup, "memory.limit_in_bytes");
    }
    if (f)
        fclose(f);
    return l.bytes > SIZE_MAX ? SIZE_MAX : (size_t)l.bytes;
}
