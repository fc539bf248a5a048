/*
 * util_internal.h - helpers shared by every part of the library: error filling, checked
 * size arithmetic, file reading. Not part of the public API.
 */
#ifndef AG_UTIL_INTERNAL_H
#define AG_UTIL_INTERNAL_H

#include "animegan.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Fill `err` (may be NULL) with `code` and a printf-style message; returns `code`. */
int ag_error_set(ag_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* On failure (rc != 0), put "label: " in front of err's message; returns rc. For messages
 * from helpers that do not know which file they were reading. */
int ag_error_prefix(int rc, const char *label, ag_error *err);

/* Invariants only (never input checks): stays on in every build. */
#define AG_ASSERT(cond)                                                                            \
    do {                                                                                           \
        if (!(cond))                                                                               \
            ag_assert_fail(#cond, __FILE__, __LINE__);                                             \
    } while (0)
void ag_assert_fail(const char *what, const char *file, int line) __attribute__((noreturn));

/* *out = a * b, false on size_t overflow. */
static inline bool ag_mul_size(size_t a, size_t b, size_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}

/* Index i reflected into [0, n) without repeating the edge: PyTorch's ReflectionPad2d and
 * np.pad 'reflect' (-1 -> 1, n -> n - 2), periodic past one reflection, where PyTorch
 * refuses; a 1-wide axis repeats its one sample, so 1-pixel maps still pad. */
static inline int ag_reflect_index(int i, int n) {
    if (n == 1)
        return 0;
    int p = 2 * (n - 1);
    i %= p;
    i += i < 0 ? p : 0;
    return i >= n ? p - i : i;
}

/* IEEE half (the fp16 of .pt, .safetensors, .onnx and .tflite weights) to float: every
 * value exact, subnormals, infinities and NaN included. */
float ag_f16_to_f32(uint16_t h);

/* Ask for transparent huge pages over [p, p + bytes) (alloc.c): for the arena. */
void ag_advise_huge_pages(void *p, size_t bytes);

/* What the CPU offers (cpuid, /proc/cpuinfo, ANIMEGAN_ISA), all of ag_cpu_info but the
 * onednn_* fields (cpu.c); ag_cpu_get_info adds those and caches the result. */
void ag_cpu_detect(ag_cpu_info *info);

/* Read a whole file into an ag_malloc'ed buffer, refusing files over max_bytes. */
int ag_read_file(const char *path, size_t max_bytes, uint8_t **data, size_t *size, ag_error *err);

#endif
