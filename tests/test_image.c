/*
 * test_image.c - image decoding, conversion, resizing, encoding and saving (src/image/).
 *
 * Inputs are the photos in tests/data and the special cases tools/make_test_images.sh wrote
 * to tests/data/generated (flat colours, so pixel values can be checked). Every test also
 * checks that ag_allocated_bytes() is back where it started.
 */
#include "animegan.h"
#include "test.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vips/vips.h>

#define DATA AG_SOURCE_DIR "/tests/data/"
#define GEN AG_SOURCE_DIR "/tests/data/generated/"
#define FIXTURES AG_SOURCE_DIR "/tests/fixtures/"

/* A test body wrapped with the allocation check. */
#define IMAGE_TEST(name)                                                                           \
    static int name##_body(void);                                                                  \
    static int name(void) {                                                                        \
        size_t before_ = ag_allocated_bytes();                                                     \
        int rc_ = name##_body();                                                                   \
        size_t after_ = ag_allocated_bytes();                                                      \
        if (rc_ == 0 && after_ != before_) {                                                       \
            fprintf(stderr, "  %s: %zd bytes still allocated\n", #name,                            \
                    (ssize_t)(after_ - before_));                                                  \
            return 1;                                                                              \
        }                                                                                          \
        return rc_;                                                                                \
    }                                                                                              \
    static int name##_body(void)

/* Whole file into a malloc'ed buffer (not ag_malloc: the tests' own memory is not counted). */
static uint8_t *read_bytes(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return buf;
}

static const uint8_t *pixel(const ag_image *im, int x, int y) {
    return im->pixels + ((size_t)y * im->width + x) * im->bands;
}

static int near(int a, int b, int tolerance) {
    return abs(a - b) <= tolerance;
}

/* Pixel (x, y) is (r, g, b) within tolerance. */
static int rgb_near(const ag_image *im, int x, int y, int r, int g, int b, int tolerance) {
    const uint8_t *p = pixel(im, x, y);
    if (near(p[0], r, tolerance) && near(p[1], g, tolerance) && near(p[2], b, tolerance))
        return 1;
    fprintf(stderr, "  pixel (%d,%d) = (%d,%d,%d), expected (%d,%d,%d) +-%d\n", x, y, p[0], p[1],
            p[2], r, g, b, tolerance);
    return 0;
}

/* Every pixel is (r, g, b) within tolerance. */
static int all_rgb_near(const ag_image *im, int r, int g, int b, int tolerance) {
    for (int y = 0; y < im->height; y++)
        for (int x = 0; x < im->width; x++)
            if (!rgb_near(im, x, y, r, g, b, tolerance))
                return 0;
    return 1;
}

static double mean_abs_diff(const ag_image *a, const ag_image *b) {
    size_t n = (size_t)a->width * a->height * a->bands;
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += abs((int)a->pixels[i] - (int)b->pixels[i]);
    return sum / (double)n;
}

static int decode_path(const char *path, const ag_decode_options *o, ag_image *im, ag_error *err) {
    return ag_image_decode_file(path, o, im, err);
}

/* Decode `path`, expect width x height x bands. */
static int check_size(const char *path, const ag_decode_options *o, int width, int height,
                      int bands) {
    ag_error err = {0};
    ag_image im;
    CHECK_OK(decode_path(path, o, &im, &err), &err);
    CHECK_MSG(im.width == width && im.height == height && im.bands == bands,
              "%s: got %dx%dx%d, expected %dx%dx%d", path, im.width, im.height, im.bands, width,
              height, bands);
    ag_image_fini(&im);
    return 0;
}

/* ---- decoding ---------------------------------------------------------------------------- */

IMAGE_TEST(test_decode_photos) {
    /* rocket.jpg is 640 wide, 427 high (LICENSES.md gives numpy's rows x columns). */
    static const struct {
        const char *file;
        int width, height;
    } photos[] = {
        {"astronaut.png", 512, 512},
        {"coffee.png", 600, 400},
        {"chelsea.png", 451, 300},
        {"rocket.jpg", 640, 427},
        {"bryandlee_inputs_1.jpg", 1280, 853},
        {"bryandlee_inputs_2.jpg", 1279, 867},
        {"bryandlee_inputs_3.jpg", 1280, 672},
    };
    for (size_t i = 0; i < sizeof photos / sizeof photos[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, DATA "%s", photos[i].file);
        if (check_size(path, NULL, photos[i].width, photos[i].height, 3))
            return 1;
    }
    return 0;
}

IMAGE_TEST(test_decode_truncated_jpeg) {
    ag_error err = {0};
    ag_image im;
    int rc = ag_image_decode_file(DATA "truncated.jpg", NULL, &im, &err);
    CHECK_MSG(rc == AG_E_FORMAT, "rc %d: %s", rc, err.message);
    CHECK_MSG(strstr(err.message, "truncated.jpg"), "%s", err.message);
    CHECK(im.pixels == NULL);
    return 0;
}

/* The header is intact, the pixel data cut in half: probe succeeds, decode must not. */
IMAGE_TEST(test_decode_truncated_png) {
    size_t size;
    uint8_t *data = read_bytes(GEN "truncated.png", &size);
    CHECK(data);
    ag_error err = {0};
    int w, h;
    CHECK_OK(ag_image_probe(data, size, &w, &h, &err), &err);
    CHECK(w == 64 && h == 64);
    ag_image im;
    int rc = ag_image_decode(data, size, "cut.png", NULL, &im, &err);
    free(data);
    CHECK_MSG(rc == AG_E_FORMAT, "rc %d: %s", rc, err.message);
    CHECK_MSG(strstr(err.message, "cut.png"), "%s", err.message);
    CHECK(im.pixels == NULL);
    return 0;
}

IMAGE_TEST(test_decode_not_an_image) {
    uint8_t noise[4096];
    uint32_t state = 12345;
    for (size_t i = 0; i < sizeof noise; i++) {
        state = state * 1664525u + 1013904223u;
        noise[i] = (uint8_t)(state >> 24);
    }
    ag_error err = {0};
    ag_image im;
    int rc = ag_image_decode(noise, sizeof noise, "noise.bin", NULL, &im, &err);
    CHECK_MSG(rc == AG_E_FORMAT, "rc %d: %s", rc, err.message);
    CHECK_MSG(strcmp(err.message, "noise.bin: not a recognised image format") == 0, "%s",
              err.message);
    rc = ag_image_decode(noise, 0, "empty", NULL, &im, &err);
    CHECK_MSG(rc == AG_E_FORMAT && strstr(err.message, "empty"), "%s", err.message);
    const char *svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"64\" height=\"64\"/>";
    rc = ag_image_decode(svg, strlen(svg), "x.svg", NULL, &im, &err);
    CHECK_MSG(rc == AG_E_FORMAT || rc == AG_E_UNSUPPORTED, "rc %d: %s", rc, err.message);
    CHECK(ag_image_decode_file(DATA "no-such-file.png", NULL, &im, &err) == AG_E_IO);
    return 0;
}

IMAGE_TEST(test_probe) {
    size_t size;
    uint8_t *data = read_bytes(DATA "coffee.png", &size);
    CHECK(data);
    ag_error err = {0};
    int w, h;
    CHECK_OK(ag_image_probe(data, size, &w, &h, &err), &err);
    free(data);
    CHECK(w == 600 && h == 400);
    /* 50000x50000 with one row of data: only a header-only read can answer. */
    data = read_bytes(GEN "huge_header.png", &size);
    CHECK(data);
    CHECK_OK(ag_image_probe(data, size, &w, &h, &err), &err);
    free(data);
    CHECK(w == 50000 && h == 50000);
    /* Sizes are upright: stored 48x32 with orientation 6. */
    data = read_bytes(GEN "orient6.jpg", &size);
    CHECK(data);
    CHECK_OK(ag_image_probe(data, size, &w, &h, &err), &err);
    free(data);
    CHECK(w == 32 && h == 48);
    CHECK(ag_image_probe("GIF8", 4, &w, &h, &err) == AG_E_FORMAT);
    return 0;
}

IMAGE_TEST(test_max_pixels) {
    ag_error err = {0};
    ag_image im;
    ag_decode_options o = {.max_pixels = 512 * 512};
    int rc = ag_image_decode_file(GEN "huge_header.png", &o, &im, &err);
    CHECK_MSG(rc == AG_E_LIMIT, "rc %d: %s", rc, err.message);
    CHECK_MSG(strstr(err.message, "50000x50000"), "%s", err.message);
    if (check_size(DATA "astronaut.png", &o, 512, 512, 3))
        return 1;
    o.max_pixels = 512 * 512 - 1;
    rc = ag_image_decode_file(DATA "astronaut.png", &o, &im, &err);
    CHECK_MSG(rc == AG_E_LIMIT && strstr(err.message, "512x512"), "%s", err.message);
    return 0;
}

IMAGE_TEST(test_max_side) {
    ag_decode_options o = {.max_side = 200};
    if (check_size(DATA "chelsea.png", &o, 200, 133, 3))
        return 1;
    o.max_side = 320; /* 427 * 320 / 640 = 213.5, rounds up */
    if (check_size(DATA "rocket.jpg", &o, 320, 214, 3))
        return 1;
    o.max_side = 1000; /* already fits: untouched */
    if (check_size(DATA "chelsea.png", &o, 451, 300, 3))
        return 1;
    o.max_side = 24; /* upright 32x48 */
    if (check_size(GEN "orient6.jpg", &o, 16, 24, 3))
        return 1;
    o.max_side = 256; /* JPEG shrink-on-load by 2, then Lanczos */
    if (check_size(DATA "bryandlee_inputs_1.jpg", &o, 256, 171, 3))
        return 1;
    o.max_side = 300; /* portrait orientation */
    return check_size(DATA "bryandlee_inputs_1.jpg", &o, 300, 200, 3);
}

/* Shrink-on-load (a block shrink in the JPEG decoder) must look like a full decode + Lanczos. */
IMAGE_TEST(test_max_side_shrink_on_load) {
    ag_error err = {0};
    ag_image full, png_small, jpeg_small;
    CHECK_OK(ag_image_decode_file(DATA "bryandlee_inputs_1.jpg", NULL, &full, &err), &err);
    void *png;
    size_t png_size;
    CHECK_OK(ag_image_encode(&full, AG_FORMAT_PNG, 0, &png, &png_size, &err), &err);
    ag_decode_options o = {.max_side = 100}; /* factor 12.8: JPEG shrinks by 4 on load */
    CHECK_OK(ag_image_decode(png, png_size, "png", &o, &png_small, &err), &err);
    CHECK_OK(ag_image_decode_file(DATA "bryandlee_inputs_1.jpg", &o, &jpeg_small, &err), &err);
    CHECK(jpeg_small.width == 100 && jpeg_small.height == 67);
    CHECK(png_small.width == 100 && png_small.height == 67);
    double diff = mean_abs_diff(&png_small, &jpeg_small);
    printf("  shrink-on-load vs full decode: mean abs diff %.2f (limit 3)\n", diff);
    CHECK(diff < 3.0);
    ag_free(png);
    ag_image_fini(&full);
    ag_image_fini(&png_small);
    ag_image_fini(&jpeg_small);
    return 0;
}

/* face2paint: the centre square, at its own size when portrait_size equals it. */
static int check_portrait_crop(const char *path, int side, int left, int top) {
    ag_error err = {0};
    ag_image full, crop;
    ag_decode_options o = {.portrait = 1, .portrait_size = side, .max_side = 16};
    CHECK_OK(ag_image_decode_file(path, NULL, &full, &err), &err);
    CHECK_OK(ag_image_decode_file(path, &o, &crop, &err), &err);
    CHECK(crop.width == side && crop.height == side && crop.bands == 3);
    for (int y = 0; y < side; y++)
        CHECK(memcmp(pixel(&crop, 0, y), pixel(&full, left, top + y), (size_t)side * 3) == 0);
    ag_image_fini(&full);
    ag_image_fini(&crop);
    return 0;
}

IMAGE_TEST(test_portrait) {
    /* (600 - 400) / 2 = 100; (451 - 300) / 2 = 75 (integer division, as face2paint). */
    if (check_portrait_crop(DATA "coffee.png", 400, 100, 0) ||
        check_portrait_crop(DATA "chelsea.png", 300, 75, 0) ||
        check_portrait_crop(DATA "rocket.jpg", 427, 106, 0))
        return 1;
    ag_decode_options o = {.portrait = 1};
    if (check_size(DATA "coffee.png", &o, 512, 512, 3) ||
        check_size(DATA "bryandlee_inputs_2.jpg", &o, 512, 512, 3))
        return 1;
    o.portrait_size = 256;
    return check_size(GEN "orient6.jpg", &o, 256, 256, 3);
}

/* Enlarging a portrait crop matches face2paint's PIL LANCZOS resize (fixtures made by
 * tools/make_portrait_fixtures.py). PIL rounds to 8 bits between its two passes and uses
 * fixed-point weights, we do neither: within 2 levels, 0.3 on average. */
static int check_enlarge_like_pil(const char *input, int size, const char *reference) {
    ag_error err = {0};
    ag_image ours, pil;
    ag_decode_options o = {.portrait = 1, .portrait_size = size};
    CHECK_OK(ag_image_decode_file(input, &o, &ours, &err), &err);
    CHECK_OK(ag_image_decode_file(reference, NULL, &pil, &err), &err);
    CHECK(ours.width == size && ours.height == size && ours.bands == 3);
    CHECK(pil.width == size && pil.height == size && pil.bands == 3);
    size_t n = (size_t)size * size * 3;
    int max_diff = 0;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs(ours.pixels[i] - pil.pixels[i]);
        max_diff = d > max_diff ? d : max_diff;
        sum += d;
    }
    ag_image_fini(&ours);
    ag_image_fini(&pil);
    printf("  %s at %d: max abs diff %d, mean %.3f (limits 2, 0.3)\n", strrchr(input, '/') + 1,
           size, max_diff, sum / n);
    CHECK(max_diff <= 2 && sum / n <= 0.3);
    return 0;
}

IMAGE_TEST(test_portrait_enlarge) {
    if (check_enlarge_like_pil(DATA "chelsea.png", 320, FIXTURES "portrait_chelsea_320.png") ||
        check_enlarge_like_pil(FIXTURES "portrait_small.png", 150,
                               FIXTURES "portrait_small_150.png"))
        return 1;
    /* Alpha is premultiplied around the resampling: the transparent half of rgba.png lends
     * no colour to the opaque half. rgba.png is 40x30: its square is 30x30 at x = 5. */
    ag_error err = {0};
    ag_image im;
    ag_decode_options o = {.portrait = 1, .portrait_size = 90};
    CHECK_OK(ag_image_decode_file(GEN "rgba.png", &o, &im, &err), &err);
    CHECK(im.width == 90 && im.height == 90 && im.bands == 4);
    const uint8_t *p = pixel(&im, 60, 45);
    CHECK_MSG(p[0] == 10 && p[1] == 20 && p[2] == 30 && p[3] == 200, "(%d,%d,%d,%d)", p[0], p[1],
              p[2], p[3]);
    p = pixel(&im, 44, 45); /* at the edge: colour intact, alpha blended */
    CHECK_MSG(near(p[0], 10, 1) && near(p[1], 20, 1) && near(p[2], 30, 1) && p[3] > 0 && p[3] < 200,
              "(%d,%d,%d,%d)", p[0], p[1], p[2], p[3]);
    ag_image_fini(&im);
    return 0;
}

IMAGE_TEST(test_orientation) {
    ag_error err = {0};
    ag_image im;
    CHECK_OK(ag_image_decode_file(GEN "orient6.jpg", NULL, &im, &err), &err);
    CHECK(im.width == 32 && im.height == 48 && im.bands == 3);
    /* Stored left half red, right half blue; rotated 90 degrees clockwise: red on top. */
    CHECK(rgb_near(&im, 16, 4, 255, 0, 0, 40));
    CHECK(rgb_near(&im, 16, 43, 0, 0, 255, 40));
    ag_image_fini(&im);
    return 0;
}

IMAGE_TEST(test_grey) {
    ag_error err = {0};
    ag_image im;
    CHECK_OK(ag_image_decode_file(GEN "grey.png", NULL, &im, &err), &err);
    CHECK(im.width == 40 && im.height == 30 && im.bands == 3);
    CHECK(all_rgb_near(&im, 100, 100, 100, 0));
    ag_image_fini(&im);
    CHECK_OK(ag_image_decode_file(GEN "grey16.png", NULL, &im, &err), &err);
    CHECK(im.bands == 3);
    CHECK(all_rgb_near(&im, 200, 200, 200, 0)); /* 51400 = 0xc8c8 */
    ag_image_fini(&im);
    return 0;
}

IMAGE_TEST(test_grey_alpha) {
    ag_error err = {0};
    ag_image im;
    CHECK_OK(ag_image_decode_file(GEN "grey_alpha.png", NULL, &im, &err), &err);
    CHECK(im.width == 40 && im.height == 30 && im.bands == 4);
    const uint8_t *p = pixel(&im, 7, 9);
    CHECK(p[0] == 100 && p[1] == 100 && p[2] == 100 && p[3] == 128);
    ag_image_fini(&im);
    return 0;
}

/* Both files hold CMYK (0, 128, 255, 0). The expected sRGB values are what lcms makes of it
 * through each profile (vips icc_transform at generation time); they differ by ~50 in green,
 * so the check shows which profile was used. */
IMAGE_TEST(test_cmyk) {
    ag_error err = {0};
    ag_image im;
    /* Embedded profile: Ghostscript's PostScript CMYK. */
    CHECK_OK(ag_image_decode_file(GEN "cmyk_icc.jpg", NULL, &im, &err), &err);
    CHECK(im.width == 64 && im.height == 48 && im.bands == 3);
    CHECK(all_rgb_near(&im, 255, 187, 0, 8));
    ag_image_fini(&im);
    /* No profile: libvips' built-in CMYK profile. */
    CHECK_OK(ag_image_decode_file(GEN "cmyk.jpg", NULL, &im, &err), &err);
    CHECK(im.width == 64 && im.height == 48 && im.bands == 3);
    CHECK(all_rgb_near(&im, 254, 134, 34, 8));
    ag_image_fini(&im);
    return 0;
}

IMAGE_TEST(test_16bit) {
    ag_error err = {0};
    ag_image im;
    CHECK_OK(ag_image_decode_file(GEN "rgb16.png", NULL, &im, &err), &err);
    CHECK(im.width == 40 && im.height == 30 && im.bands == 3);
    CHECK(all_rgb_near(&im, 128, 64, 255, 0)); /* 0x8080, 0x4040, 0xffff */
    ag_image_fini(&im);
    return 0;
}

IMAGE_TEST(test_palette) {
    ag_error err = {0};
    ag_image im;
    CHECK_OK(ag_image_decode_file(GEN "palette.png", NULL, &im, &err), &err);
    CHECK(im.width == 40 && im.height == 30 && im.bands == 3);
    CHECK(rgb_near(&im, 5, 5, 255, 0, 0, 2));
    CHECK(rgb_near(&im, 35, 5, 0, 255, 0, 2));
    CHECK(rgb_near(&im, 5, 25, 0, 0, 255, 2));
    CHECK(rgb_near(&im, 35, 25, 255, 255, 0, 2));
    ag_image_fini(&im);
    return 0;
}

IMAGE_TEST(test_rgba) {
    ag_error err = {0};
    ag_image im;
    CHECK_OK(ag_image_decode_file(GEN "rgba.png", NULL, &im, &err), &err);
    CHECK(im.width == 40 && im.height == 30 && im.bands == 4);
    CHECK(pixel(&im, 5, 5)[3] == 0);
    const uint8_t *p = pixel(&im, 30, 5);
    CHECK(p[0] == 10 && p[1] == 20 && p[2] == 30 && p[3] == 200);
    ag_image_fini(&im);
    /* Resizing keeps alpha and does not bleed the transparent half's colour. */
    ag_decode_options o = {.max_side = 20};
    CHECK_OK(ag_image_decode_file(GEN "rgba.png", &o, &im, &err), &err);
    CHECK(im.width == 20 && im.height == 15 && im.bands == 4);
    p = pixel(&im, 17, 7);
    CHECK_MSG(p[0] == 10 && p[1] == 20 && p[2] == 30 && p[3] == 200, "(%d,%d,%d,%d)", p[0], p[1],
              p[2], p[3]);
    ag_image_fini(&im);
    return 0;
}

IMAGE_TEST(test_animated) {
    ag_error err = {0};
    ag_image im;
    /* Three 24x16 frames, red, green, blue: the first only. */
    CHECK_OK(ag_image_decode_file(GEN "anim.gif", NULL, &im, &err), &err);
    CHECK_MSG(im.width == 24 && im.height == 16, "gif %dx%d", im.width, im.height);
    CHECK(rgb_near(&im, 12, 8, 255, 0, 0, 0));
    ag_image_fini(&im);
    CHECK_OK(ag_image_decode_file(GEN "anim.webp", NULL, &im, &err), &err);
    CHECK_MSG(im.width == 24 && im.height == 16, "webp %dx%d", im.width, im.height);
    CHECK(rgb_near(&im, 12, 8, 255, 0, 0, 0));
    ag_image_fini(&im);
    return 0;
}

/* libvips' own WebP loader, then the profile (if any) and the orientation applied as the
 * decoder does: the reference our libwebp path must match. Returns a g_malloc'ed buffer. */
static uint8_t *libvips_webp_reference(const void *data, size_t size, int *w, int *h, int *bands) {
    VipsImage *in = vips_image_new_from_buffer(data, size, "", "n", 1, NULL), *x = in, *t[2] = {0};
    uint8_t *pixels = NULL;
    if (!in)
        return NULL;
    if (vips_image_get_typeof(x, VIPS_META_ICC_NAME) &&
        vips_icc_transform(x, &t[0], "srgb", "embedded", TRUE, "intent", VIPS_INTENT_PERCEPTUAL,
                           "depth", 8, NULL) == 0)
        x = t[0];
    if (vips_autorot(x, &t[1], NULL) == 0) {
        size_t n;
        pixels = vips_image_write_to_memory(t[1], &n);
        *w = t[1]->Xsize;
        *h = t[1]->Ysize;
        *bands = t[1]->Bands;
    }
    for (int i = 0; i < 2; i++)
        if (t[i])
            g_object_unref(t[i]);
    g_object_unref(in);
    return pixels;
}

/* Our decode of a WebP buffer equals libvips' loader's, pixel for pixel. */
static int check_webp_like_libvips(const void *data, size_t size, const char *what) {
    ag_error err = {0};
    ag_image im;
    int w = 0, h = 0, bands = 0;
    uint8_t *ref = libvips_webp_reference(data, size, &w, &h, &bands);
    CHECK_MSG(ref != NULL, "%s: libvips cannot load it", what);
    int rc = ag_image_decode(data, size, what, NULL, &im, &err);
    int same = rc == AG_OK && im.width == w && im.height == h && im.bands == bands &&
               memcmp(im.pixels, ref, (size_t)w * h * bands) == 0;
    if (!same)
        fprintf(stderr, "  %s: %dx%dx%d (%s), libvips %dx%dx%d\n", what, im.width, im.height,
                im.bands, rc == AG_OK ? "pixels differ" : err.message, w, h, bands);
    ag_image_fini(&im);
    g_free(ref);
    return same ? 0 : 1;
}

/* A 64x64 RGB WebP, lossy or lossless, made by libvips; g_free the result. */
static void *make_webp(int lossless, size_t *size) {
    uint8_t rgb[64 * 64 * 3];
    for (size_t i = 0; i < sizeof rgb; i++)
        rgb[i] = (uint8_t)(i * 31);
    VipsImage *im = vips_image_new_from_memory(rgb, sizeof rgb, 64, 64, 3, VIPS_FORMAT_UCHAR);
    void *buf = NULL;
    if (im && vips_webpsave_buffer(im, &buf, size, "lossless", lossless, NULL))
        buf = NULL;
    if (im)
        g_object_unref(im);
    return buf;
}

/* The decode term counts what libwebp holds: for a lossless frame, its ARGB copy of the
 * whole frame beside ours (4 + 3 bytes a pixel against max_pixels x 4: refused at the
 * pixel limit), for a lossy one a few rows (taken at the limit). */
IMAGE_TEST(test_webp_decoder_bytes) {
    ag_decode_options o = {.max_pixels = 64 * 64};
    for (int lossless = 0; lossless <= 1; lossless++) {
        size_t size;
        void *data = make_webp(lossless, &size);
        CHECK(data);
        ag_image im;
        ag_error err = {0};
        int rc = ag_image_decode(data, size, "w.webp", &o, &im, &err);
        g_free(data);
        if (lossless) {
            CHECK_MSG(rc == AG_E_LIMIT && strstr(err.message, "ARGB"), "lossless: %d %s", rc,
                      err.message);
        } else {
            CHECK_OK(rc, &err);
            CHECK(im.width == 64 && im.height == 64);
            ag_image_fini(&im);
        }
    }
    return 0;
}

/* WebP is decoded by libwebp (webp_load.c): EXIF orientation, an ICC profile, an animation
 * whose first frame covers part of the canvas, lossy and lossless, all as libvips would. */
IMAGE_TEST(test_webp) {
    ag_error err = {0};
    ag_image im;
    CHECK_OK(ag_image_decode_file(GEN "orient6.webp", NULL, &im, &err), &err);
    CHECK(im.width == 32 && im.height == 48 && im.bands == 3);
    CHECK(rgb_near(&im, 16, 4, 255, 0, 0, 0) && rgb_near(&im, 16, 43, 0, 0, 255, 0));
    ag_image_fini(&im);
    /* Adobe RGB (50, 100, 150) is not sRGB (50, 100, 150): the profile must be applied. */
    CHECK_OK(ag_image_decode_file(GEN "a98.webp", NULL, &im, &err), &err);
    const uint8_t *p = pixel(&im, 20, 15);
    CHECK_MSG(!near(p[0], 50, 3) || !near(p[1], 100, 3) || !near(p[2], 150, 3),
              "profile ignored: (%d,%d,%d)", p[0], p[1], p[2]);
    ag_image_fini(&im);
    CHECK_OK(ag_image_decode_file(GEN "anim_offset.webp", NULL, &im, &err), &err);
    CHECK(im.width == 24 && im.height == 16 && im.bands == 4);
    p = pixel(&im, 6, 4);
    CHECK_MSG(p[0] == 255 && p[1] == 0 && p[2] == 0 && p[3] == 255, "square (%d,%d,%d,%d)", p[0],
              p[1], p[2], p[3]);
    CHECK(pixel(&im, 0, 0)[3] == 0 && pixel(&im, 12, 2)[3] == 0 && pixel(&im, 20, 14)[3] == 0);
    ag_image_fini(&im);
    static const char *const files[] = {"orient6.webp", "a98.webp", "anim_offset.webp",
                                        "anim.webp"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, GEN "%s", files[i]);
        size_t size;
        uint8_t *data = read_bytes(path, &size);
        CHECK(data != NULL);
        int rc = check_webp_like_libvips(data, size, files[i]);
        free(data);
        CHECK(rc == 0);
    }
    /* A lossy photo, with and without alpha. */
    ag_image photo;
    CHECK_OK(ag_image_decode_file(DATA "rocket.jpg", NULL, &photo, &err), &err);
    for (int i = 0; i < 2; i++) {
        void *webp;
        size_t size;
        ag_image *source = i == 0 ? &photo : &im;
        if (i == 1)
            CHECK_OK(ag_image_decode_file(GEN "rgba.png", NULL, &im, &err), &err);
        CHECK_OK(ag_image_encode(source, AG_FORMAT_WEBP, 80, &webp, &size, &err), &err);
        int rc = check_webp_like_libvips(webp, size, i == 0 ? "lossy photo" : "lossy rgba");
        ag_free(webp);
        CHECK(rc == 0);
    }
    ag_image_fini(&im);
    ag_image_fini(&photo);
    return 0;
}

/* Cut anywhere, a WebP file fails cleanly; the whole file still decodes. */
IMAGE_TEST(test_webp_truncated) {
    ag_error err = {0};
    ag_image im;
    size_t size;
    uint8_t *data = read_bytes(GEN "anim_offset.webp", &size);
    CHECK(data != NULL);
    int bad = 0;
    for (size_t n = 1; n < size; n++) {
        if (ag_image_decode(data, n, "cut", NULL, &im, &err) == AG_OK) {
            fprintf(stderr, "  %zu of %zu bytes decoded\n", n, size);
            ag_image_fini(&im);
            bad = 1;
        }
    }
    int rc = ag_image_decode(data, size, "whole", NULL, &im, &err);
    ag_image_fini(&im);
    free(data);
    CHECK(!bad);
    CHECK_OK(rc, &err);
    return 0;
}

IMAGE_TEST(test_tiff_heif) {
    ag_error err = {0};
    ag_image im;
    CHECK_OK(ag_image_decode_file(GEN "rgb.tif", NULL, &im, &err), &err);
    CHECK(im.width == 40 && im.height == 30 && im.bands == 3);
    CHECK(all_rgb_near(&im, 50, 100, 150, 0));
    ag_image_fini(&im);
    const char *heif[] = {GEN "rgb.heic", GEN "rgb.avif"};
    for (int i = 0; i < 2; i++) {
        CHECK_OK(ag_image_decode_file(heif[i], NULL, &im, &err), &err);
        CHECK(im.width == 64 && im.height == 48 && im.bands == 3);
        CHECK(rgb_near(&im, 32, 24, 50, 100, 150, 8));
        ag_image_fini(&im);
    }
    return 0;
}

IMAGE_TEST(test_min_side) {
    ag_error err = {0};
    ag_image im;
    int rc = ag_image_decode_file(GEN "size_1x1.png", NULL, &im, &err);
    CHECK_MSG(rc == AG_E_ARG && strstr(err.message, "image is 1x1;"), "%s", err.message);
    rc = ag_image_decode_file(GEN "size_7x7.png", NULL, &im, &err);
    CHECK_MSG(rc == AG_E_ARG, "rc %d", rc);
    CHECK_MSG(
        strstr(err.message, "size_7x7.png: image is 7x7; both sides must be at least 8 pixels"),
        "%s", err.message);
    if (check_size(GEN "size_8x8.png", NULL, 8, 8, 3) ||
        check_size(GEN "thin_10000x8.png", NULL, 10000, 8, 3))
        return 1;
    /* Resizing can make a side too small: 10000x8 to fit 1000 is 1000x1. */
    ag_decode_options o = {.max_side = 1000};
    rc = ag_image_decode_file(GEN "thin_10000x8.png", &o, &im, &err);
    CHECK_MSG(rc == AG_E_ARG && strstr(err.message, "1000x1"), "%s", err.message);
    return 0;
}

IMAGE_TEST(test_bad_options) {
    ag_error err = {0};
    ag_image im;
    ag_decode_options o = {.max_side = -1};
    CHECK(ag_image_decode_file(DATA "chelsea.png", &o, &im, &err) == AG_E_ARG);
    o = (ag_decode_options){.portrait = 1, .portrait_size = 4};
    CHECK(ag_image_decode_file(DATA "chelsea.png", &o, &im, &err) == AG_E_ARG);
    o.portrait_size = 100000;
    CHECK(ag_image_decode_file(DATA "chelsea.png", &o, &im, &err) == AG_E_ARG);
    return 0;
}

/* ---- encoding ---------------------------------------------------------------------------- */

static int roundtrip(const ag_image *im, ag_format format, int quality, int bands_back,
                     double max_diff) {
    ag_error err = {0};
    void *data;
    size_t size;
    CHECK_OK(ag_image_encode(im, format, quality, &data, &size, &err), &err);
    CHECK(size > 0);
    ag_image back;
    CHECK_OK(ag_image_decode(data, size, "roundtrip", NULL, &back, &err), &err);
    ag_free(data);
    CHECK(back.width == im->width && back.height == im->height && back.bands == bands_back);
    if (bands_back == im->bands) {
        double diff = mean_abs_diff(im, &back);
        CHECK_MSG(diff <= max_diff, "format %d: mean abs diff %.2f > %.2f", format, diff, max_diff);
    }
    ag_image_fini(&back);
    return 0;
}

IMAGE_TEST(test_encode_roundtrip) {
    ag_error err = {0};
    ag_image im;
    CHECK_OK(ag_image_decode_file(DATA "chelsea.png", NULL, &im, &err), &err);
    if (roundtrip(&im, AG_FORMAT_PNG, 0, 3, 0.0) || roundtrip(&im, AG_FORMAT_JPEG, 90, 3, 4.0) ||
        roundtrip(&im, AG_FORMAT_WEBP, 90, 3, 4.0))
        return 1;
    void *data;
    size_t size;
    CHECK(ag_image_encode(&im, AG_FORMAT_JPEG, 0, &data, &size, &err) == AG_E_ARG);
    CHECK(ag_image_encode(&im, AG_FORMAT_WEBP, 101, &data, &size, &err) == AG_E_ARG);
    CHECK(ag_image_encode(&im, (ag_format)7, 90, &data, &size, &err) == AG_E_ARG);
    CHECK(data == NULL && size == 0);
    ag_image_fini(&im);
    ag_image bad = {.width = 8, .height = 8, .bands = 2, .pixels = (uint8_t[128]){0}};
    CHECK(ag_image_encode(&bad, AG_FORMAT_PNG, 90, &data, &size, &err) == AG_E_ARG);
    return 0;
}

IMAGE_TEST(test_encode_alpha) {
    ag_error err = {0};
    ag_image im;
    CHECK_OK(ag_image_decode_file(GEN "rgba.png", NULL, &im, &err), &err);
    if (roundtrip(&im, AG_FORMAT_PNG, 0, 4, 0.0) || roundtrip(&im, AG_FORMAT_WEBP, 100, 4, 3.0))
        return 1;
    /* JPEG: flattened over white, so the transparent half comes back white. */
    void *data;
    size_t size;
    CHECK_OK(ag_image_encode(&im, AG_FORMAT_JPEG, 95, &data, &size, &err), &err);
    ag_image back;
    CHECK_OK(ag_image_decode(data, size, "flat.jpg", NULL, &back, &err), &err);
    ag_free(data);
    CHECK(back.bands == 3);
    CHECK(rgb_near(&back, 5, 5, 255, 255, 255, 4));
    ag_image_fini(&back);
    ag_image_fini(&im);
    return 0;
}

/* Output carries no metadata: the orientation is in the pixels, and EXIF may hold GPS. */
IMAGE_TEST(test_encode_strips_metadata) {
    ag_error err = {0};
    ag_image im;
    CHECK_OK(ag_image_decode_file(GEN "orient6.jpg", NULL, &im, &err), &err);
    void *data;
    size_t size;
    CHECK_OK(ag_image_encode(&im, AG_FORMAT_JPEG, 90, &data, &size, &err), &err);
    CHECK(memmem(data, size, "Exif", 4) == NULL);
    int w, h;
    CHECK_OK(ag_image_probe(data, size, &w, &h, &err), &err);
    CHECK(w == 32 && h == 48);
    ag_free(data);
    ag_image_fini(&im);
    return 0;
}

IMAGE_TEST(test_format_helpers) {
    CHECK(ag_format_parse("png") == AG_FORMAT_PNG);
    CHECK(ag_format_parse("PNG") == AG_FORMAT_PNG);
    CHECK(ag_format_parse("Jpg") == AG_FORMAT_JPEG);
    CHECK(ag_format_parse("jpeg") == AG_FORMAT_JPEG);
    CHECK(ag_format_parse("WebP") == AG_FORMAT_WEBP);
    CHECK(ag_format_parse("gif") == -1);
    CHECK(ag_format_parse("") == -1);
    CHECK(ag_format_parse(NULL) == -1);
    CHECK(ag_format_from_path("out/photo.JPG") == AG_FORMAT_JPEG);
    CHECK(ag_format_from_path("a.b/photo.webp") == AG_FORMAT_WEBP);
    CHECK(ag_format_from_path("x.png") == AG_FORMAT_PNG);
    CHECK(ag_format_from_path("a.png/noext") == -1);
    CHECK(ag_format_from_path("png") == -1);
    CHECK(strcmp(ag_format_mime(AG_FORMAT_PNG), "image/png") == 0);
    CHECK(strcmp(ag_format_mime(AG_FORMAT_JPEG), "image/jpeg") == 0);
    CHECK(strcmp(ag_format_mime(AG_FORMAT_WEBP), "image/webp") == 0);
    for (int f = AG_FORMAT_PNG; f <= AG_FORMAT_WEBP; f++)
        CHECK(ag_format_parse(ag_format_extension((ag_format)f)) == f);
    return 0;
}

/* ---- saving ------------------------------------------------------------------------------ */

/* Names in `dir`, excluding . and ..; returns the count and the first name. */
static int list_dir(const char *dir, char *first, size_t first_size) {
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (n++ == 0 && first)
            snprintf(first, first_size, "%s", e->d_name);
    }
    closedir(d);
    return n;
}

static int remove_tree(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "chmod -R u+w '%s' && rm -rf '%s'", dir, dir);
    return system(cmd);
}

static int small_image(ag_image *im) {
    ag_error err = {0};
    CHECK_OK(ag_image_decode_file(GEN "size_8x8.png", NULL, im, &err), &err);
    return 0;
}

IMAGE_TEST(test_save_file) {
    char dir[] = "/tmp/ag_test_image.XXXXXX";
    CHECK(mkdtemp(dir));
    ag_image im;
    if (small_image(&im))
        return 1;
    char path[600], name[256];
    snprintf(path, sizeof path, "%s/out.webp", dir);
    ag_error err = {0};
    CHECK_OK(ag_image_save_file(&im, path, AG_FORMAT_WEBP, 90, &err), &err);
    CHECK_OK(ag_image_save_file(&im, path, AG_FORMAT_WEBP, 80, &err), &err); /* overwrite */
    CHECK(list_dir(dir, name, sizeof name) == 1 && strcmp(name, "out.webp") == 0);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0644);
    ag_image back;
    CHECK_OK(ag_image_decode_file(path, NULL, &back, &err), &err);
    CHECK(back.width == 8 && back.height == 8);
    ag_image_fini(&back);
    ag_image_fini(&im);
    CHECK(remove_tree(dir) == 0);
    return 0;
}

IMAGE_TEST(test_save_file_failures) {
    char dir[] = "/tmp/ag_test_image.XXXXXX";
    CHECK(mkdtemp(dir));
    ag_image im;
    if (small_image(&im))
        return 1;
    char path[600];
    ag_error err = {0};
    /* Missing directory. */
    snprintf(path, sizeof path, "%s/missing/out.png", dir);
    int rc = ag_image_save_file(&im, path, AG_FORMAT_PNG, 0, &err);
    CHECK_MSG(rc == AG_E_IO && strstr(err.message, path) && strstr(err.message, "No such file"),
              "%s", err.message);
    /* The target is a directory: the temporary file is written, the rename fails, and the
     * temporary file must be gone. (Works as root, unlike a read-only directory.) */
    snprintf(path, sizeof path, "%s/taken", dir);
    CHECK(mkdir(path, 0755) == 0);
    rc = ag_image_save_file(&im, path, AG_FORMAT_PNG, 0, &err);
    CHECK_MSG(rc == AG_E_IO && strstr(err.message, path), "%s", err.message);
    char name[256];
    CHECK(list_dir(dir, name, sizeof name) == 1 && strcmp(name, "taken") == 0);
    CHECK(list_dir(path, NULL, 0) == 0);
    /* A read-only directory (only meaningful when not root, who may write anyway). */
    if (geteuid() != 0) {
        char ro[300];
        snprintf(ro, sizeof ro, "%s/ro", dir);
        CHECK(mkdir(ro, 0555) == 0);
        snprintf(path, sizeof path, "%s/out.png", ro);
        rc = ag_image_save_file(&im, path, AG_FORMAT_PNG, 0, &err);
        CHECK_MSG(rc == AG_E_IO && strstr(err.message, path), "%s", err.message);
        CHECK(list_dir(ro, NULL, 0) == 0);
    }
    /* Encoding fails first: nothing is created. */
    ag_image bad = im;
    bad.bands = 5;
    snprintf(path, sizeof path, "%s/bad.png", dir);
    CHECK(ag_image_save_file(&bad, path, AG_FORMAT_PNG, 0, &err) == AG_E_ARG);
    CHECK(access(path, F_OK) != 0);
    ag_image_fini(&im);
    CHECK(remove_tree(dir) == 0);
    return 0;
}

/* ---- threads ----------------------------------------------------------------------------- */

typedef struct worker {
    ag_image image;
    int rc;
} worker;

static void *decode_worker(void *arg) {
    worker *w = arg;
    ag_error err = {0};
    ag_decode_options o = {.max_side = 300};
    w->rc = ag_image_decode_file(DATA "rocket.jpg", &o, &w->image, &err);
    void *data = NULL;
    size_t size;
    if (w->rc == AG_OK)
        w->rc = ag_image_encode(&w->image, AG_FORMAT_JPEG, 85, &data, &size, &err);
    ag_free(data);
    return NULL;
}

/* The server decodes and encodes from several workers at once. */
IMAGE_TEST(test_threads) {
    enum { N = 6 };
    worker workers[N];
    pthread_t threads[N];
    memset(workers, 0, sizeof workers);
    for (int i = 0; i < N; i++)
        CHECK(pthread_create(&threads[i], NULL, decode_worker, &workers[i]) == 0);
    for (int i = 0; i < N; i++)
        CHECK(pthread_join(threads[i], NULL) == 0);
    for (int i = 0; i < N; i++) {
        CHECK(workers[i].rc == AG_OK);
        CHECK(workers[i].image.width == 300 && workers[i].image.height == 200);
        CHECK(memcmp(workers[i].image.pixels, workers[0].image.pixels, 300 * 200 * 3) == 0);
    }
    for (int i = 0; i < N; i++)
        ag_image_fini(&workers[i].image);
    return 0;
}

/* Threads of this process named like libvips' own workers ("libvips worker"). */
static int libvips_worker_threads(void) {
    DIR *dir = opendir("/proc/self/task");
    if (!dir)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        char path[300], comm[64] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        if (fgets(comm, sizeof comm, f) && strncmp(comm, "libvips worker", 14) == 0)
            n++;
        fclose(f);
    }
    closedir(dir);
    return n;
}

/* Encoding, and decoding every format (rotated, enlarged), run on the caller's thread and
 * never hand work to libvips' thread set, whose 8.14 version can lose a task given to a
 * worker as it retires after 15 s idle (see encode.c). First in the suite, so no earlier
 * test made a worker. */
IMAGE_TEST(test_no_libvips_threads) {
    ag_error err = {0};
    ag_image im, photo;
    static const char *const inputs[] = {
        GEN "orient6.jpg",  GEN "orient6.webp", GEN "a98.webp",   GEN "anim_offset.webp",
        GEN "anim.webp",    GEN "anim.gif",     GEN "rgb.tif",    GEN "rgb.heic",
        GEN "cmyk_icc.jpg", GEN "grey16.png",   GEN "palette.png"};
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++) {
        size_t size;
        int w, h;
        uint8_t *data = read_bytes(inputs[i], &size);
        CHECK(data && ag_image_probe(data, size, &w, &h, &err) == AG_OK);
        free(data);
        CHECK_OK(ag_image_decode_file(inputs[i], NULL, &im, &err), &err);
        ag_image_fini(&im);
    }
    ag_decode_options enlarge = {.portrait = 1, .portrait_size = 600};
    CHECK_OK(ag_image_decode_file(DATA "chelsea.png", &enlarge, &im, &err), &err);
    ag_image_fini(&im);
    CHECK_OK(ag_image_decode_file(GEN "rgba.png", NULL, &im, &err), &err);
    CHECK_OK(ag_image_decode_file(DATA "rocket.jpg", NULL, &photo, &err), &err);
    static const ag_format formats[] = {AG_FORMAT_PNG, AG_FORMAT_JPEG, AG_FORMAT_WEBP};
    for (int i = 0; i < 6; i++) {
        void *data;
        size_t size;
        ag_image back;
        CHECK_OK(ag_image_encode(i < 3 ? &im : &photo, formats[i % 3], 80, &data, &size, &err),
                 &err);
        int rc = ag_image_decode(data, size, "encoded", NULL, &back, &err);
        ag_free(data);
        CHECK_OK(rc, &err);
        ag_image_fini(&back);
    }
    ag_image_fini(&im);
    ag_image_fini(&photo);
    int n = libvips_worker_threads();
    CHECK_MSG(n == 0, "%d libvips worker thread(s) exist", n);
    return 0;
}

int main(int argc, char **argv) {
    ag_error err = {0};
    if (ag_image_startup(argv[0], &err) != 0) {
        fprintf(stderr, "ag_image_startup: %s\n", err.message);
        return 1;
    }
    static const test_case tests[] = {
        TEST(test_no_libvips_threads), /* first: before anything else made threads */
        TEST(test_decode_photos),
        TEST(test_decode_truncated_jpeg),
        TEST(test_decode_truncated_png),
        TEST(test_decode_not_an_image),
        TEST(test_probe),
        TEST(test_max_pixels),
        TEST(test_max_side),
        TEST(test_max_side_shrink_on_load),
        TEST(test_portrait),
        TEST(test_portrait_enlarge),
        TEST(test_orientation),
        TEST(test_grey),
        TEST(test_grey_alpha),
        TEST(test_cmyk),
        TEST(test_16bit),
        TEST(test_palette),
        TEST(test_rgba),
        TEST(test_animated),
        TEST(test_webp),
        TEST(test_webp_decoder_bytes),
        TEST(test_webp_truncated),
        TEST(test_tiff_heif),
        TEST(test_min_side),
        TEST(test_bad_options),
        TEST(test_encode_roundtrip),
        TEST(test_encode_alpha),
        TEST(test_encode_strips_metadata),
        TEST(test_format_helpers),
        TEST(test_save_file),
        TEST(test_save_file_failures),
        TEST(test_threads),
    };
    int rc = test_run_all(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
    ag_image_shutdown();
    return rc;
}
