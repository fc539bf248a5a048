/*
 * test_cgroup.c - server/cgroup.c on fake /proc and /sys trees: the limit of this process's
 * own cgroup under v2 and v1, an ancestor's lower limit, "max" and v1's page-rounded
 * LLONG_MAX as no limit, a namespace's root file, and no cgroup at all; the file named.
 */
#include "test.h"

#include "../server/cgroup.c"

#include <ftw.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[64];

/* Write `text` to root/relative, creating its directories. */
static int put(const char *relative, const char *text) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", root, relative);
    for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')); p++) {
        *p = '\0';
        mkdir(path, 0755);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(text, f);
    return fclose(f);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* A fresh fake root for each case. */
static int fresh_root(void) {
    if (root[0])
        nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    snprintf(root, sizeof root, "/tmp/ag_cgroup_XXXXXX");
    return mkdtemp(root) ? 0 : -1;
}

#define MiB(n) ((size_t)(n) << 20)

/* The limit, with the file it was read from (checked against the tree's by the cases). */
static char where[PATH_MAX + 64];
static size_t limit_of(const char *r) {
    return ag_cgroup_memory_limit(r, where, sizeof where);
}

/* Whether `where` is root/relative. */
static int read_from(const char *relative) {
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", root, relative);
    return !strcmp(where, path);
}

static int test_v2_unit_memory_max(void) {
    CHECK(fresh_root() == 0);
    CHECK(put("proc/self/cgroup", "0::/system.slice/animegan.service\n") == 0);
    CHECK(put("sys/fs/cgroup/memory.max", "max\n") == 0);
    CHECK(put("sys/fs/cgroup/system.slice/memory.max", "max\n") == 0);
    CHECK(put("sys/fs/cgroup/system.slice/animegan.service/memory.max", "1610612736\n") == 0);
    CHECK(limit_of(root) == MiB(1536));
    CHECK(read_from("sys/fs/cgroup/system.slice/animegan.service/memory.max"));
    /* an ancestor's lower limit applies */
    CHECK(put("sys/fs/cgroup/system.slice/memory.max", "1073741824\n") == 0);
    CHECK(limit_of(root) == MiB(1024));
    CHECK(read_from("sys/fs/cgroup/system.slice/memory.max"));
    CHECK(ag_cgroup_memory_limit(root, NULL, 0) == MiB(1024)); /* where not asked */
    return 0;
}

static int test_v1_memory_controller(void) {
    CHECK(fresh_root() == 0);
    CHECK(put("proc/self/cgroup", "9:name=systemd:/\n5:cpu,cpuacct:/\n"
                                  "4:blkio,memory:/process_api/abc\n0::/\n") == 0);
    CHECK(put("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n") == 0);
    CHECK(put("sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes", "536870912\n") == 0);
    CHECK(limit_of(root) == MiB(512));
    CHECK(read_from("sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes"));
    /* "memoryx" is not the memory controller: its path is not followed */
    CHECK(put("proc/self/cgroup", "4:memoryx:/process_api/abc\n") == 0);
    CHECK(limit_of(root) == 0);
    return 0;
}

static int test_namespace_root_and_none(void) {
    CHECK(fresh_root() == 0);
    CHECK(limit_of(root) == 0); /* nothing readable */
    CHECK(put("proc/self/cgroup", "0::/\n") == 0);
    CHECK(put("sys/fs/cgroup/memory.max", "268435456\n") == 0);
    CHECK(limit_of(root) == MiB(256));
    CHECK(put("sys/fs/cgroup/memory.max", "max\n") == 0);
    CHECK(limit_of(root) == 0 && where[0] == '\0');
    return 0;
}

int main(int argc, char **argv) {
    static const test_case tests[] = {
        TEST(test_v2_unit_memory_max),
        TEST(test_v1_memory_controller),
        TEST(test_namespace_root_and_none),
    };
    int rc = test_run_all(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
    if (root[0])
        nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}
