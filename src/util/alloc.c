/*
 * alloc.c - the library's allocator: malloc with byte accounting for metrics and leak
 * checks (as redis' zmalloc). A size header in front of each block makes ag_free O(1).
 */
#include "animegan.h"
#include "util_internal.h"

#include <fcntl.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The header keeps the payload aligned for any type (and for 64-byte SIMD via the arena). */
#define AG_ALLOC_HEADER_BYTES ((size_t)alignof(max_align_t))

static atomic_size_t allocated_bytes;
static atomic_size_t allocated_peak_bytes;

static void account(size_t added, size_t removed) {
    size_t now = atomic_fetch_add(&allocated_bytes, added) + added;
    atomic_fetch_sub(&allocated_bytes, removed);
    size_t peak = atomic_load(&allocated_peak_bytes);
    while (now > peak && !atomic_compare_exchange_weak(&allocated_peak_bytes, &peak, now)) {
    }
}

void *ag_malloc(size_t size) {
    if (size > SIZE_MAX / 2)
        return NULL;
    unsigned char *block = malloc(AG_ALLOC_HEADER_BYTES + size);
    if (!block)
        return NULL;
    memcpy(block, &size, sizeof size);
    account(size, 0);
    return block + AG_ALLOC_HEADER_BYTES;
}

void *ag_calloc(size_t count, size_t size) {
    if (size && count > SIZE_MAX / 2 / size)
        return NULL;
    void *p = ag_malloc(count * size);
    if (p)
        memset(p, 0, count * size);
    return p;
}

void *ag_realloc(void *ptr, size_t size) {
    if (!ptr)
        return ag_malloc(size);
    if (size > SIZE_MAX / 2)
        return NULL;
    unsigned char *block = (unsigned char *)ptr - AG_ALLOC_HEADER_BYTES;
    size_t old_size;
    memcpy(&old_size, block, sizeof old_size);
    unsigned char *grown = realloc(block, AG_ALLOC_HEADER_BYTES + size);
    if (!grown)
        return NULL;
    memcpy(grown, &size, sizeof size);
    account(size, old_size);
    return grown + AG_ALLOC_HEADER_BYTES;
}

void ag_free(void *ptr) {
    if (!ptr)
        return;
    unsigned char *block = (unsigned char *)ptr - AG_ALLOC_HEADER_BYTES;
    size_t size;
    memcpy(&size, block, sizeof size);
    account(0, size);
    free(block);
}

/* Large maps streamed whole by every layer (the arena) take transparent huge pages where the
 * kernel gives them only on request (THP "madvise"): fewer TLB misses on every pass. Only the
 * 2 MB pages wholly inside [p, p + bytes) are advised; failure just keeps 4 KB pages. */
void ag_advise_huge_pages(void *p, size_t bytes) {
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t lo = ((uintptr_t)p + huge - 1) & ~(huge - 1),
              hi = ((uintptr_t)p + bytes) & ~(huge - 1);
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
    (void)p, (void)bytes;
#endif
}

size_t ag_allocated_bytes(void) {
    return atomic_load(&allocated_bytes);
}
size_t ag_allocated_peak_bytes(void) {
    return atomic_load(&allocated_peak_bytes);
}

/* Reads "<key>  <n> kB" from /proc/self/status; 0 when unavailable. */
static size_t proc_status_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    char line[256];
    size_t kb = 0, key_len = strlen(key);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, key_len) == 0) {
            kb = strtoull(line + key_len, NULL, 10);
            break;
        }
    }
    fclose(f);
    return kb;
}

/* The same figure as VmRSS, from /proc/self/statm ("size resident ..." in pages): a quarter
 * of the cost of formatting and scanning /proc/self/status, and the server asks twice per
 * request, refusals included. */
size_t ag_process_rss_bytes(void) {
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char text[128];
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0)
        return 0;
    text[n] = '\0';
    unsigned long long size_pages = 0, resident_pages = 0;
    if (sscanf(text, "%llu %llu", &size_pages, &resident_pages) != 2)
        return 0;
    return (size_t)resident_pages * (size_t)sysconf(_SC_PAGESIZE);
}
size_t ag_process_peak_rss_bytes(void) {
    return proc_status_kb("VmHWM:") * 1024;
}
