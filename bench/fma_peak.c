/*
 * fma_peak.c - the machine's fp32 FMA peak, the denominator of "% of peak" in
 * bench/compare.sh. Not linked into anything; the script builds it with
 *   cc -O2 -mavx512f -mfma -pthread bench/fma_peak.c -o build/bench/fma_peak
 * and, for the AVX2-only rows (the peak of a server without AVX-512), with
 *   cc -O2 -DFMA_AVX2 -mavx2 -mfma -pthread bench/fma_peak.c -o build/bench/fma_peak_avx2
 * (16 ymm chains of 8 lanes instead of 16 zmm chains of 16).
 *
 * Each thread runs 16 independent AVX-512 FMA chains (acc = acc * a + b on 16 zmm
 * registers): 16 chains cover a 4-cycle FMA latency on two FMA pipes with room to spare,
 * so the loop is limited by FMA throughput alone. No memory is touched. The threads start
 * together, run until the main thread raises a stop flag after --seconds, and count their
 * iterations; flop = iterations * 16 chains * 16 lanes * 2.
 *
 * Two rates: "gflops_wall" divides by wall time; "gflops" sums each thread's flop divided by
 * that thread's own CPU time (CLOCK_THREAD_CPUTIME_ID). On a shared machine the scheduler
 * takes cores away for part of the window, which lowers the wall rate but not the CPU-time
 * rate: "gflops" is what the cores do while they run this code, i.e. the peak of --threads
 * cores, and it is the figure compare.sh uses (max over rounds).
 * Prints one JSON object on stdout.
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef FMA_AVX2
typedef __m256 vec;
#define LANES 8
#define ISA_TEXT "avx2 fma, %d ymm chains per thread"
#define vset _mm256_set1_ps
#define vfma _mm256_fmadd_ps
#define vadd _mm256_add_ps
static float vsum(__m256 v) {
    float t[8], s = 0.0f;
    _mm256_storeu_ps(t, v);
    for (int i = 0; i < 8; i++)
        s += t[i];
    return s;
}
#else
typedef __m512 vec;
#define LANES 16
#define ISA_TEXT "avx512f fma, %d zmm chains per thread"
#define vset _mm512_set1_ps
#define vfma _mm512_fmadd_ps
#define vadd _mm512_add_ps
#define vsum _mm512_reduce_add_ps
#endif

#define CHAINS 16
#define INNER 1024 /* iterations between looks at the stop flag */
#define MAX_THREADS 256

typedef struct worker {
    pthread_t thread;
    unsigned long long iterations;
    double cpu_s; /* this thread's CPU time between start and stop */
    float sink;   /* keeps the chains alive */
    char pad[64];
} worker;

static atomic_int start_flag, stop_flag;

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double now_s(void) {
    return clock_s(CLOCK_MONOTONIC);
}

#define FMA16(a, b)                                                                                \
    do {                                                                                           \
        c0 = vfma(c0, a, b);                                                                       \
        c1 = vfma(c1, a, b);                                                                       \
        c2 = vfma(c2, a, b);                                                                       \
        c3 = vfma(c3, a, b);                                                                       \
        c4 = vfma(c4, a, b);                                                                       \
        c5 = vfma(c5, a, b);                                                                       \
        c6 = vfma(c6, a, b);                                                                       \
        c7 = vfma(c7, a, b);                                                                       \
        c8 = vfma(c8, a, b);                                                                       \
        c9 = vfma(c9, a, b);                                                                       \
        c10 = vfma(c10, a, b);                                                                     \
        c11 = vfma(c11, a, b);                                                                     \
        c12 = vfma(c12, a, b);                                                                     \
        c13 = vfma(c13, a, b);                                                                     \
        c14 = vfma(c14, a, b);                                                                     \
        c15 = vfma(c15, a, b);                                                                     \
    } while (0)

static void *run(void *arg) {
    worker *w = arg;
    /* acc -> acc * 0.999999 + 1e-6 converges to 1: no overflow, no denormals. */
    const vec a = vset(0.999999f), b = vset(1e-6f);
    vec c0 = vset(0.0f), c1 = vset(0.1f), c2 = vset(0.2f);
    vec c3 = vset(0.3f), c4 = vset(0.4f), c5 = vset(0.5f);
    vec c6 = vset(0.6f), c7 = vset(0.7f), c8 = vset(0.8f);
    vec c9 = vset(0.9f), c10 = vset(1.0f), c11 = vset(1.1f);
    vec c12 = vset(1.2f), c13 = vset(1.3f), c14 = vset(1.4f);
    vec c15 = vset(1.5f);
    unsigned long long n = 0;
    while (!atomic_load_explicit(&start_flag, memory_order_acquire))
        ;
    double cpu0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
        for (int i = 0; i < INNER; i++)
            FMA16(a, b);
        n += INNER;
    }
    w->cpu_s = clock_s(CLOCK_THREAD_CPUTIME_ID) - cpu0;
    vec s = vadd(vadd(vadd(c0, c1), vadd(c2, c3)), vadd(vadd(c4, c5), vadd(c6, c7)));
    s = vadd(s, vadd(vadd(vadd(c8, c9), vadd(c10, c11)), vadd(vadd(c12, c13), vadd(c14, c15))));
    w->sink = vsum(s);
    w->iterations = n;
    return NULL;
}

static int usage(const char *argv0) {
    fprintf(stderr, "usage: %s [--threads N (1-%d, default 2)] [--seconds S (default 0.5)]\n",
            argv0, MAX_THREADS);
    return 2;
}

int main(int argc, char **argv) {
    int threads = 2;
    double seconds = 0.5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else
            return usage(argv[0]);
    }
    if (threads < 1 || threads > MAX_THREADS || !(seconds > 0.0 && seconds <= 60.0))
        return usage(argv[0]);

    static worker workers[MAX_THREADS];
    for (int t = 0; t < threads; t++) {
        int rc = pthread_create(&workers[t].thread, NULL, run, &workers[t]);
        if (rc) {
            fprintf(stderr, "fma_peak: pthread_create: %s\n", strerror(rc));
            return 1;
        }
    }
    struct timespec pause = {.tv_sec = 0, .tv_nsec = 20 * 1000 * 1000};
    nanosleep(&pause, NULL); /* let every thread reach the start line */
    double t0 = now_s();
    atomic_store_explicit(&start_flag, 1, memory_order_release);
    while (now_s() - t0 < seconds) {
        struct timespec tick = {.tv_sec = 0, .tv_nsec = 5 * 1000 * 1000};
        nanosleep(&tick, NULL);
    }
    atomic_store_explicit(&stop_flag, 1, memory_order_relaxed);
    double flop = 0.0, cpu_rate = 0.0, cpu_s = 0.0;
    float sink = 0.0f;
    for (int t = 0; t < threads; t++) {
        pthread_join(workers[t].thread, NULL);
        double f = (double)workers[t].iterations * CHAINS * (double)LANES * 2.0;
        flop += f;
        cpu_s += workers[t].cpu_s;
        if (workers[t].cpu_s > 0.0)
            cpu_rate += f / workers[t].cpu_s;
        sink += workers[t].sink;
    }
    double elapsed = now_s() - t0;
    printf("{\"runtime\": \"fma_peak\", \"isa\": \"" ISA_TEXT "\", "
           "\"threads\": %d, \"seconds\": %.3f, \"cpu_seconds\": %.3f, \"gflops\": %.1f, "
           "\"gflops_wall\": %.1f, \"sink\": %.3f}\n",
           CHAINS, threads, elapsed, cpu_s, cpu_rate * 1e-9, flop / elapsed * 1e-9, (double)sink);
    return 0;
}
