/*
 * arena.c - greedy offset assignment for the activation arena (as ggml-alloc does): place
 * buffers from the largest down, each at the lowest aligned offset that does not overlap a
 * placed buffer live at the same time. Counts are small (tens), so O(n^2) is fine.
 */
#include "arena.h"

#include "../util/util_internal.h"
#include <stdlib.h>

static size_t align_up(size_t n) {
    return (n + AG_ARENA_ALIGN - 1) & ~(size_t)(AG_ARENA_ALIGN - 1);
}

static int lifetimes_overlap(const ag_arena_buffer *a, const ag_arena_buffer *b) {
    return a->first_step <= b->last_step && b->first_step <= a->last_step;
}

/* The lowest offset >= candidate where `b` fits beside every placed, overlapping buffer. */
static size_t first_fit(const ag_arena_buffer *buffers, const int *placed, int placed_count,
                        const ag_arena_buffer *b) {
    size_t offset = 0;
    for (int moved = 1; moved;) {
        moved = 0;
        for (int i = 0; i < placed_count; i++) {
            const ag_arena_buffer *p = &buffers[placed[i]];
            if (!lifetimes_overlap(p, b))
                continue;
            size_t p_end = p->offset + align_up(p->bytes);
            if (offset < p_end && p->offset < offset + align_up(b->bytes)) {
                offset = p_end;
                moved = 1;
            }
        }
    }
    return offset;
}

size_t ag_arena_plan(ag_arena_buffer *buffers, int count) {
    int order[AG_ARENA_MAX_BUFFERS], placed[AG_ARENA_MAX_BUFFERS];
    AG_ASSERT(count <= AG_ARENA_MAX_BUFFERS);
    for (int i = 0; i < count; i++)
        order[i] = i;
    for (int i = 1; i < count; i++) /* insertion sort, largest first */
        for (int j = i; j > 0 && buffers[order[j]].bytes > buffers[order[j - 1]].bytes; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    size_t total = 0;
    for (int i = 0; i < count; i++) {
        ag_arena_buffer *b = &buffers[order[i]];
        b->offset = b->bytes ? first_fit(buffers, placed, i, b) : 0;
        if (getenv("AG_DEBUG_NO_SHARE")) /* debugging: keep every buffer to the end */
            b->offset = total;
        placed[i] = order[i];
        if (b->offset + align_up(b->bytes) > total)
            total = b->offset + align_up(b->bytes);
    }
    return total;
}
