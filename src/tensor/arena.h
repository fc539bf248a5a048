/*
 * arena.h - the activation memory plan: every buffer of one generator pass gets an offset in
 * one arena, from the steps during which it is live. Buffers whose lifetimes do not overlap
 * share bytes. Planned once per (model, image size), before the first layer runs.
 */
#ifndef AG_ARENA_H
#define AG_ARENA_H

#include <stddef.h>

#define AG_ARENA_ALIGN 64
#define AG_ARENA_MAX_BUFFERS 3088 /* 2 x AG_GRAPH_MAX_NODES + 16 */

typedef struct ag_arena_buffer {
    size_t bytes;
    int first_step, last_step; /* inclusive */
    size_t offset;             /* filled by ag_arena_plan */
} ag_arena_buffer;

/* Assign offsets (largest first, lowest free offset); returns the arena size in bytes. */
size_t ag_arena_plan(ag_arena_buffer *buffers, int count);

#endif
