/*
 * fuzz_image.c - libFuzzer target for the image entry: ag_image_probe then ag_image_decode
 * on the same bytes, capped at 512x512 pixels so no input spends seconds decoding. The first
 * byte picks the geometry path (plain, max_side, portrait) so all three get exercised.
 *
 * Build (one thread: libvips gets concurrency 1 from ag_image_startup):
 *   clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
 *       -fno-sanitize-recover=all -Iinclude $(pkg-config --cflags vips) \
 *       -o build/fuzz/fuzz_image fuzz/fuzz_image.c src/image/[a-z]*.c src/util/[a-z]*.c \
 *       $(pkg-config --libs vips) -lm
 * Run with tests/data as seeds (the first directory receives new inputs):
 *   build/fuzz/fuzz_image build/fuzz/corpus_image tests/data tests/data/generated
 */
#include "../src/util/util_internal.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    /* libvips prints a warning per corrupt input otherwise; the fuzzer log drowns in them. */
    setenv("VIPS_WARNING", "0", 0);
    ag_error err = {0};
    if (ag_image_startup((*argv)[0], &err) != 0)
        abort();
    return 0;
}

/* Folded pixel bytes, so reading every pixel below cannot be optimised away. */
static volatile uint8_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t before = ag_allocated_bytes();
    ag_error err = {0};
    int width = 0, height = 0;
    int probed = ag_image_probe(data, size, &width, &height, &err);
    AG_ASSERT(probed == AG_OK || err.code == probed);
    AG_ASSERT(probed != AG_OK || (width > 0 && height > 0));

    ag_decode_options o = {.max_pixels = 512 * 512};
    int mode = size > 0 ? data[0] % 3 : 0;
    if (mode == 1)
        o.max_side = 64;
    if (mode == 2)
        o = (ag_decode_options){.max_pixels = 512 * 512, .portrait = 1, .portrait_size = 32};
    ag_image image;
    int rc = ag_image_decode(data, size, "fuzz", &o, &image, &err);
    AG_ASSERT(rc == AG_OK || (err.code == rc && strncmp(err.message, "fuzz: ", 6) == 0));
    if (rc == AG_OK) {
        /* Whatever decodes must have probed, and come out within the promised shape. */
        AG_ASSERT(probed == AG_OK);
        AG_ASSERT(image.width >= AG_MIN_SIDE && image.height >= AG_MIN_SIDE);
        AG_ASSERT(image.bands == 3 || image.bands == 4);
        AG_ASSERT(mode != 1 || (image.width <= 64 && image.height <= 64));
        AG_ASSERT(mode != 2 || (image.width == 32 && image.height == 32));
        size_t n = (size_t)image.width * image.height * image.bands;
        for (size_t i = 0; i < n; i++)
            sink ^= image.pixels[i];
    } else {
        AG_ASSERT(image.pixels == NULL);
    }
    ag_image_fini(&image);
    AG_ASSERT(ag_allocated_bytes() == before);
    return 0;
}
