/*
 * util.c - error messages, assertions, file reading and CPU count.
 */
#include "util_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int ag_error_set(ag_error *err, int code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

int ag_error_prefix(int rc, const char *label, ag_error *err) {
    if (rc != AG_OK && err) {
        char reason[AG_ERROR_MESSAGE_BYTES];
        memcpy(reason, err->message, sizeof reason);
        ag_error_set(err, rc, "%s: %s", label, reason);
    }
    return rc;
}

const char *ag_error_name(int code) {
    switch (code) {
    case AG_OK: return "ok";
    case AG_E_ARG: return "invalid_argument";
    case AG_E_IO: return "io";
    case AG_E_FORMAT: return "bad_format";
    case AG_E_UNSUPPORTED: return "unsupported";
    case AG_E_NOMEM: return "out_of_memory";
    case AG_E_LIMIT: return "too_large";
    case AG_E_NOTFOUND: return "not_found";
    case AG_E_CANCELLED: return "cancelled";
    default: return "internal";
    }
}

void ag_assert_fail(const char *what, const char *file, int line) {
    fprintf(stderr, "animegan: assertion failed: %s (%s:%d)\n", what, file, line);
    abort();
}

int ag_read_file(const char *path, size_t max_bytes, uint8_t **data, size_t *size, ag_error *err) {
    *data = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ag_error_set(err, AG_E_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return ag_error_set(err, AG_E_IO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        /* A device, FIFO or socket has no size to bound the read by (and /dev/zero never
         * ends), so only regular files are read. */
        close(fd);
        return ag_error_set(err, AG_E_IO, "%s: %s", path,
                            S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file");
    }
    if ((uint64_t)st.st_size > max_bytes) {
        close(fd);
        return ag_error_set(err, AG_E_LIMIT, "%s: file of %lld bytes exceeds the %zu byte limit",
                            path, (long long)st.st_size, max_bytes);
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = ag_malloc(n ? n : 1);
    if (!buf) {
        close(fd);
        return ag_error_set(err, AG_E_NOMEM, "%s: out of memory for %zu bytes", path, n);
    }
    size_t done = 0;
    while (done < n) {
        ssize_t r = read(fd, buf + done, n - done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = r < 0 ? errno : EIO;
            ag_free(buf);
            close(fd);
            return ag_error_set(err, AG_E_IO, "%s: read failed: %s", path, strerror(e));
        }
        done += (size_t)r;
    }
    close(fd);
    *data = buf;
    *size = n;
    return AG_OK;
}

int ag_cpu_count(void) {
    /* The affinity mask, not the machine's core count: taskset and cgroup cpusets narrow it. */
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 && n < 4096 ? (int)n : 1;
}

int ag_parse_int64(const char *text, long long min, long long max, long long *out) {
    const char *p = text;
    if (!p || !*p)
        return AG_E_ARG;
    int negative = *p == '-';
    p += negative;
    /* "0", or digits without a leading zero: 19 at most, so the sum below cannot wrap. */
    size_t digits = strspn(p, "0123456789");
    if (digits == 0 || p[digits] != '\0' || (p[0] == '0' && (digits > 1 || negative)) ||
        digits > 19)
        return AG_E_ARG;
    unsigned long long v = 0;
    for (size_t i = 0; i < digits; i++)
        v = v * 10 + (unsigned long long)(p[i] - '0');
    if (v > (unsigned long long)LLONG_MAX + (unsigned long long)negative)
        return AG_E_LIMIT;
    long long value = negative ? (long long)(0 - v) : (long long)v;
    if (value < min || value > max)
        return AG_E_LIMIT;
    *out = value;
    return AG_OK;
}

float ag_f16_to_f32(uint16_t h) {
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
    float v;
    if (exp == 0)
        v = ldexpf((float)mant, -24);
    else if (exp == 31)
        v = mant ? NAN : INFINITY;
    else
        v = ldexpf((float)(mant | 0x400), (int)exp - 25);
    return h >> 15 ? -v : v;
}
