/*
 * clock.c - the monotonic clock every part reads (ag_now_us), with a hook tests use to
 * step time by hand instead of sleeping.
 */
#include "animegan.h"

#include <stdatomic.h>
#include <time.h>

static uint64_t monotonic_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static _Atomic(ag_clock_fn) clock_now = monotonic_us;

uint64_t ag_now_us(void) {
    return atomic_load_explicit(&clock_now, memory_order_relaxed)();
}

void ag_clock_hook(ag_clock_fn clock) {
    atomic_store(&clock_now, clock ? clock : monotonic_us);
}
