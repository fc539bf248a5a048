/*
 * test.h - the unit-test harness: a test is a function that returns 0 on success; CHECK
 * prints the failing expression with file and line and fails the test. Each test binary
 * prints one "PASS name" / "FAIL name" line per test and "N passed, N failed", and exits
 * non-zero on any failure, so tests/run.sh can add the binaries up.
 */
#ifndef AG_TEST_H
#define AG_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "  %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);             \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "  %s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);             \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

/* Check a library call returned 0; print its ag_error otherwise. */
#define CHECK_OK(call, errp)                                                                       \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != 0) {                                                                            \
            fprintf(stderr, "  %s:%d: %s returned %d: %s\n", __FILE__, __LINE__, #call, rc_,       \
                    (errp)->message);                                                              \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

typedef struct test_case {
    const char *name;
    int (*fn)(void);
} test_case;

#define TEST(name)                                                                                 \
    { #name, name }

/* A test whose body must give back every byte it allocated through ag_malloc (the file
 * includes src/util/util_internal.h for ag_allocated_bytes). */
#define LEAK_CHECKED(name)                                                                         \
    static int name##_body(void);                                                                  \
    static int name(void) {                                                                        \
        size_t base_ = ag_allocated_bytes();                                                       \
        int rc_ = name##_body();                                                                   \
        if (rc_ == 0 && ag_allocated_bytes() != base_) {                                           \
            fprintf(stderr, "  %s leaked %zu bytes\n", #name, ag_allocated_bytes() - base_);       \
            return 1;                                                                              \
        }                                                                                          \
        return rc_;                                                                                \
    }                                                                                              \
    static int name##_body(void)

/* Directory of the repository's test data; set by the Makefile. */
#ifndef AG_SOURCE_DIR
#define AG_SOURCE_DIR "."
#endif

/* AG_TEST_SKIP="name name...": cases another run covers (tests/asan_test.sh leaves out the
 * full-size goldens whose code paths the reduced ones reach); each is listed as SKIP. */
static inline int test_skipped(const char *name) {
    const char *list = getenv("AG_TEST_SKIP");
    size_t n = strlen(name);
    for (const char *p = list ? strstr(list, name) : NULL; p; p = strstr(p + 1, name))
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
            return 1;
    return 0;
}

static inline int test_run_all(const test_case *tests, int count, int argc, char **argv) {
    int passed = 0, failed = 0;
    for (int i = 0; i < count; i++) {
        if (argc > 1 && !strstr(tests[i].name, argv[1]))
            continue;
        if (test_skipped(tests[i].name)) {
            printf("SKIP %s\n", tests[i].name);
            continue;
        }
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int rc = tests[i].fn();
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
        printf("%s %s (%.2f s)\n", rc == 0 ? "PASS" : "FAIL", tests[i].name, seconds);
        fflush(stdout);
        if (rc == 0)
            passed++;
        else
            failed++;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

#define TEST_MAIN(...)                                                                             \
    int main(int argc, char **argv) {                                                              \
        static const test_case tests_[] = {__VA_ARGS__};                                           \
        return test_run_all(tests_, (int)(sizeof tests_ / sizeof tests_[0]), argc, argv);          \
    }

#endif
