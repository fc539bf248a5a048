/*
 * libav.c - loads the FFmpeg libraries with dlopen the first time src/video/ needs them and
 * fills the table of libav_internal.h (why: see there). The handles are never closed: the
 * libraries keep process-wide state (codec tables, the log callback) for the process's life.
 */
#define AG_LIBAV_LOADER
#include "libav_internal.h"

#include "../util/util_internal.h"

#include <dlfcn.h>
#include <pthread.h>

#define AG_STR_(x) #x
#define AG_STR(x) AG_STR_(x)

ag_libav_table ag_libav;

/* The sonames of the major versions we were compiled against (FFmpeg's ABI per major). */
static const char *const sonames[] = {
    [AG_LIBAVUTIL] = "libavutil.so." AG_STR(LIBAVUTIL_VERSION_MAJOR),
    [AG_LIBSWRESAMPLE] = "libswresample.so." AG_STR(LIBSWRESAMPLE_VERSION_MAJOR),
    [AG_LIBSWSCALE] = "libswscale.so." AG_STR(LIBSWSCALE_VERSION_MAJOR),
    [AG_LIBAVCODEC] = "libavcodec.so." AG_STR(LIBAVCODEC_VERSION_MAJOR),
    [AG_LIBAVFORMAT] = "libavformat.so." AG_STR(LIBAVFORMAT_VERSION_MAJOR),
    [AG_LIBAVFILTER] = "libavfilter.so." AG_STR(LIBAVFILTER_VERSION_MAJOR),
};
#define LIB_COUNT (sizeof sonames / sizeof sonames[0])

static ag_error load_error; /* written once, inside pthread_once */

static int open_all(void *handles[LIB_COUNT]) {
    for (size_t i = 0; i < LIB_COUNT; i++) {
        handles[i] = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL);
        if (!handles[i])
            return ag_error_set(&load_error, AG_E_UNSUPPORTED, "video support unavailable: %s",
                                dlerror());
    }
    return 0;
}

static void load_once(void) {
    void *handles[LIB_COUNT];
    if (open_all(handles))
        return;
        /* POSIX guarantees that a dlsym result converts to a function pointer. */
#define AG_LIBAV_RESOLVE(lib, name)                                                                \
    ag_libav.name = (__typeof__(ag_libav.name))dlsym(handles[lib], #name);                         \
    if (!ag_libav.name) {                                                                          \
        ag_error_set(&load_error, AG_E_UNSUPPORTED, "video support unavailable: %s has no %s",     \
                     sonames[lib], #name);                                                         \
        return;                                                                                    \
    }
    AG_LIBAV_FUNCTIONS(AG_LIBAV_RESOLVE)
#undef AG_LIBAV_RESOLVE
}

int ag_libav_load(ag_error *err) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, load_once);
    if (load_error.code && err)
        *err = load_error;
    return load_error.code;
}
