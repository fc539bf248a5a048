/*
 * make_attack_images.c - writes the small hostile and worst-case images the hardening tests
 * (tests/stability/hardening.py) send to the server. Each file is a few kB to a few hundred
 * kB on disk however large its decoded frame, so none is committed: the test makes them.
 *
 *   make_attack_images DIR MAX_PIXELS
 *
 * writes into DIR:
 *   tiff_f32x32.tif      4096 x 4096, 32 float32 samples per pixel, deflate, every strip the
 *                        same compressed row (33 kB; 2 GiB decoded): refused 415
 *   tiff_f32x4.tif       the same with 4 samples: 256 MiB decoded, refused 413
 *   jpeg_scans.jpg       a valid progressive JPEG of 2,090 scans (the most libjpeg allows):
 *                        refused before decoding
 *   tiff_f32x32_limit.tif  the first at MAX_PIXELS pixels: within the pixel limit, 32 times
 *                        over the bytes one
 * and the worst case of each format that the limit MAX_PIXELS still accepts, i.e. the file
 * whose decoder holds the most (about MAX_PIXELS x 4 bytes):
 *   worst_tiff.tif       one strip of 16-bit RGBA, EXIF-style orientation 6 (rotated copy)
 *   worst_png.png        Adam7-interlaced 16-bit RGBA (read whole)
 *   worst_jpeg.jpg       progressive 4:4:4 RGB (whole coefficient buffer), orientation 6
 *   worst_gif.gif        a 1x1 frame on a MAX_PIXELS canvas (the canvas is decoded)
 *   worst_webp.webp      lossless, MAX_PIXELS / 2 (libwebp's ARGB and our RGBA frame)
 *   worst_heif.heic      8-bit RGBA HEVC at MAX_PIXELS / 2 (libheif's planes plus libvips'
 *                        interleaved copy), written by libvips' heifsave (skipped, saying
 *                        so, where libheif has no HEVC encoder)
 *
 * Offline and test tool only; needs libjpeg, libwebp, zlib and libvips.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <jpeglib.h> /* after stdio.h, which it needs */
#include <string.h>
#include <vips/vips.h>
#include <webp/encode.h>
#include <zlib.h>

static void die(const char *what) {
    fprintf(stderr, "make_attack_images: %s\n", what);
    exit(1);
}

static void *xcalloc(size_t n) {
    void *p = calloc(1, n ? n : 1);
    if (!p)
        die("out of memory");
    return p;
}

static FILE *open_out(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        die(path);
    return f;
}

static uint8_t *deflate_zeros(size_t n, size_t *out_size) {
    uint8_t *raw = xcalloc(n);
    uLongf cap = compressBound((uLong)n);
    uint8_t *z = xcalloc(cap);
    if (compress2(z, &cap, raw, (uLong)n, 9) != Z_OK)
        die("zlib");
    free(raw);
    *out_size = cap;
    return z;
}

/* ---- TIFF, little-endian, written by hand so that every field is ours to choose ---------- */

typedef struct tiff_entry {
    uint16_t tag, type;
    uint32_t count, value;
} tiff_entry;

static void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* rows_per_strip rows per strip; every strip points at the same compressed block of zeros. */
static void write_tiff(const char *dir, const char *name, uint32_t width, uint32_t height,
                       uint16_t spp, uint16_t bits, uint16_t sample_format, uint32_t rows_per_strip,
                       uint16_t orientation) {
    size_t strip_raw = (size_t)width * spp * (bits / 8) * rows_per_strip, zsize;
    uint8_t *z = deflate_zeros(strip_raw, &zsize);
    uint32_t strips = (height + rows_per_strip - 1) / rows_per_strip;
    /* Layout: header (8) | chunk | bits[spp] | formats[spp] | extra[spp] (zeros) |
     * offsets[strips] | counts[strips] | IFD */
    uint32_t at_chunk = 8, at_bits = at_chunk + (uint32_t)zsize;
    at_bits += at_bits & 1;
    uint32_t at_fmt = at_bits + 2u * spp, at_extra = at_fmt + 2u * spp,
             at_off = at_extra + 2u * spp;
    at_off = (at_off + 3) & ~3u;
    uint32_t at_cnt = at_off + 4 * strips, at_ifd = at_cnt + 4 * strips;
    tiff_entry e[16];
    int n = 0;
    uint16_t photometric = spp >= 3 ? 2 : 1;
    e[n++] = (tiff_entry){256, 4, 1, width};
    e[n++] = (tiff_entry){257, 4, 1, height};
    e[n++] = (tiff_entry){258, 3, spp, spp == 1 ? bits : at_bits};
    e[n++] = (tiff_entry){259, 3, 1, 8}; /* deflate */
    e[n++] = (tiff_entry){262, 3, 1, photometric};
    e[n++] = (tiff_entry){273, 4, strips, strips == 1 ? at_chunk : at_off};
    if (orientation)
        e[n++] = (tiff_entry){274, 3, 1, orientation};
    e[n++] = (tiff_entry){277, 3, 1, spp};
    e[n++] = (tiff_entry){278, 4, 1, rows_per_strip};
    e[n++] = (tiff_entry){279, 4, strips, strips == 1 ? (uint32_t)zsize : at_cnt};
    e[n++] = (tiff_entry){284, 3, 1, 1}; /* chunky */
    uint16_t extra = photometric == 2 ? (uint16_t)(spp - 3) : (uint16_t)(spp - 1);
    /* ExtraSamples: RGBA's fourth is unassociated alpha (2); the rest unspecified (0). */
    if (extra == 1)
        e[n++] = (tiff_entry){338, 3, 1, photometric == 2 ? 2 : 0};
    else if (extra > 1)
        e[n++] = (tiff_entry){338, 3, extra, at_extra};
    e[n++] = (tiff_entry){339, 3, spp, spp == 1 ? sample_format : at_fmt};
    size_t total = at_ifd + 2 + 12 * (size_t)n + 4;
    uint8_t *f = xcalloc(total);
    memcpy(f, "II*\0", 4);
    put32(f + 4, at_ifd);
    memcpy(f + at_chunk, z, zsize);
    for (int i = 0; i < spp; i++) {
        put16(f + at_bits + 2 * i, bits);
        put16(f + at_fmt + 2 * i, sample_format);
    }
    for (uint32_t i = 0; i < strips; i++) {
        put32(f + at_off + 4 * i, at_chunk);
        put32(f + at_cnt + 4 * i, (uint32_t)zsize);
    }
    uint8_t *ifd = f + at_ifd;
    put16(ifd, (uint16_t)n);
    for (int i = 0; i < n; i++) {
        uint8_t *p = ifd + 2 + 12 * i;
        uint32_t value = e[i].value;
        put16(p, e[i].tag);
        put16(p + 2, e[i].type);
        put32(p + 4, e[i].count);
        if (e[i].type == 3 && e[i].count == 1)
            put16(p + 8, (uint16_t)value);
        else
            put32(p + 8, value);
    }
    FILE *out = open_out(dir, name);
    fwrite(f, 1, total, out);
    fclose(out);
    free(f);
    free(z);
}

/* ---- PNG, Adam7-interlaced 16-bit RGBA of zeros -------------------------------------- */

static void png_chunk(FILE *f, const char *type, const uint8_t *data, uint32_t n) {
    uint8_t len[4] = {(uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
    fwrite(len, 1, 4, f);
    fwrite(type, 1, 4, f);
    if (n)
        fwrite(data, 1, n, f);
    uLong crc = crc32(0, (const Bytef *)type, 4);
    crc = crc32(crc, data, n);
    uint8_t c[4] = {(uint8_t)(crc >> 24), (uint8_t)(crc >> 16), (uint8_t)(crc >> 8), (uint8_t)crc};
    fwrite(c, 1, 4, f);
}

static void write_png_interlaced(const char *dir, const char *name, uint32_t w, uint32_t h) {
    static const int x0[7] = {0, 4, 0, 2, 0, 1, 0}, y0[7] = {0, 0, 4, 0, 2, 0, 1};
    static const int dx[7] = {8, 8, 4, 4, 2, 2, 1}, dy[7] = {8, 8, 8, 4, 4, 2, 2};
    size_t raw = 0;
    for (int p = 0; p < 7; p++) {
        size_t pw = w > (uint32_t)x0[p] ? (w - x0[p] + dx[p] - 1) / dx[p] : 0;
        size_t ph = h > (uint32_t)y0[p] ? (h - y0[p] + dy[p] - 1) / dy[p] : 0;
        if (pw && ph)
            raw += ph * (1 + pw * 8);
    }
    size_t zsize;
    uint8_t *z = deflate_zeros(raw, &zsize);
    FILE *f = open_out(dir, name);
    fwrite("\x89PNG\r\n\x1a\n", 1, 8, f);
    uint8_t ihdr[13] = {(uint8_t)(w >> 24),
                        (uint8_t)(w >> 16),
                        (uint8_t)(w >> 8),
                        (uint8_t)w,
                        (uint8_t)(h >> 24),
                        (uint8_t)(h >> 16),
                        (uint8_t)(h >> 8),
                        (uint8_t)h,
                        16,
                        6,
                        0,
                        0,
                        1};
    png_chunk(f, "IHDR", ihdr, 13);
    png_chunk(f, "IDAT", z, (uint32_t)zsize);
    png_chunk(f, "IEND", NULL, 0);
    fclose(f);
    free(z);
}

/* ---- GIF: a 1x1 frame on a large logical screen -------------------------------------- */

static void write_gif_canvas(const char *dir, const char *name, uint16_t w, uint16_t h) {
    FILE *f = open_out(dir, name);
    uint8_t head[13] = {
        'G',  'I', 'F', '8', '9', 'a', (uint8_t)w, (uint8_t)(w >> 8), (uint8_t)h, (uint8_t)(h >> 8),
        0x80, 0,   0};
    fwrite(head, 1, 13, f);
    fwrite("\xff\x00\x00\x00\x00\xff", 1, 6, f); /* 2-colour table */
    fwrite("\x2c\0\0\0\0\x01\0\x01\0\0", 1, 10, f);
    /* LZW, minimum code size 2: clear (4), index 0, end (5) in 3-bit codes, LSB first. */
    fwrite("\x02\x02\x44\x01\x00", 1, 5, f);
    fputc(0x3b, f);
    fclose(f);
}

/* ---- JPEG through libjpeg ------------------------------------------------------------ */

static const uint8_t exif_orient6[] = {'E', 'x', 'i', 'f', 0, 0,    'M',  'M', 0, 0x2a, 0,
                                       0,   0,   8,   0,   1, 0x01, 0x12, 0,   3, 0,    0,
                                       0,   1,   0,   6,   0, 0,    0,    0,   0, 0};

/* nscans 0: jpeg_simple_progression; else the longest script libjpeg accepts (every
 * coefficient of every component on its own, refined bit by bit from Al = 10). */
static void write_jpeg(const char *dir, const char *name, int w, int h, int longest, int orient6) {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    FILE *f = open_out(dir, name);
    jpeg_stdio_dest(&c, f);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 90, TRUE);
    for (int i = 0; i < 3; i++)
        c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
    jpeg_scan_info *scans = NULL;
    if (longest) {
        enum { AL = 10 };
        scans = xcalloc(sizeof *scans * (size_t)(AL + 1) * (1 + 63 * 3));
        int n = 0;
        for (int al = AL; al >= 0; al--) {
            jpeg_scan_info *s = &scans[n++];
            s->comps_in_scan = 3;
            for (int k = 0; k < 3; k++)
                s->component_index[k] = k;
            s->Ss = s->Se = 0;
            s->Ah = al == AL ? 0 : al + 1;
            s->Al = al;
        }
        for (int comp = 0; comp < 3; comp++)
            for (int k = 1; k < 64; k++)
                for (int al = AL; al >= 0; al--) {
                    jpeg_scan_info *s = &scans[n++];
                    s->comps_in_scan = 1;
                    s->component_index[0] = comp;
                    s->Ss = s->Se = k;
                    s->Ah = al == AL ? 0 : al + 1;
                    s->Al = al;
                }
        c.scan_info = scans;
        c.num_scans = n;
    } else {
        jpeg_simple_progression(&c);
    }
    jpeg_start_compress(&c, TRUE);
    if (orient6)
        jpeg_write_marker(&c, JPEG_APP0 + 1, exif_orient6, sizeof exif_orient6);
    JSAMPLE *row = xcalloc((size_t)w * 3);
    for (int x = 0; x < w * 3; x++)
        row[x] = 128;
    while (c.next_scanline < c.image_height)
        jpeg_write_scanlines(&c, &row, 1);
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    fclose(f);
    free(row);
    free(scans);
}

static void write_webp(const char *dir, const char *name, int w, int h) {
    uint8_t *rgba = xcalloc((size_t)w * h * 4), *out = NULL;
    size_t n = WebPEncodeLosslessRGBA(rgba, w, h, w * 4, &out);
    if (!n)
        die("webp");
    FILE *f = open_out(dir, name);
    fwrite(out, 1, n, f);
    fclose(f);
    WebPFree(out);
    free(rgba);
}

static void write_heif(const char *dir, const char *name, int side) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    VipsImage *black = NULL, *rgba = NULL;
    if (vips_black(&black, side, side, "bands", 4, NULL) != 0 ||
        vips_cast_uchar(black, &rgba, NULL) != 0 ||
        vips_heifsave(rgba, path, "compression", VIPS_FOREIGN_HEIF_COMPRESSION_HEVC, "Q", 30,
                      NULL) != 0) {
        fprintf(stderr, "make_attack_images: no HEIF (%s)\n", vips_error_buffer());
        vips_error_clear();
        remove(path);
    }
    if (rgba)
        g_object_unref(rgba);
    if (black)
        g_object_unref(black);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fputs("usage: make_attack_images DIR MAX_PIXELS\n", stderr);
        return 2;
    }
    const char *dir = argv[1];
    double max_px = atof(argv[2]);
    if (max_px < 4096)
        die("MAX_PIXELS too small");
    write_tiff(dir, "tiff_f32x32.tif", 4096, 4096, 32, 32, 3, 1, 0);
    write_tiff(dir, "tiff_f32x4.tif", 4096, 4096, 4, 32, 3, 1, 0);
    write_jpeg(dir, "jpeg_scans.jpg", 256, 256, 1, 0);

    /* 16-bit RGBA: 8 bytes a pixel, so max_px / 2 pixels hold max_px x 4 bytes. */
    int side8 = (int)floor(sqrt(max_px / 2));
    write_tiff(dir, "worst_tiff.tif", (uint32_t)side8, (uint32_t)side8, 4, 16, 1, (uint32_t)side8,
               6);
    write_png_interlaced(dir, "worst_png.png", (uint32_t)side8, (uint32_t)side8);
    /* 4:4:4 coefficients: 6 bytes a pixel (padded to 8 x 8 blocks). */
    int side6 = (int)floor(sqrt(max_px * 4 / 6)) / 8 * 8;
    write_jpeg(dir, "worst_jpeg.jpg", side6, side6, 0, 1);
    int side4 = (int)floor(sqrt(max_px));
    if (side4 > 65535)
        side4 = 65535;
    /* Within the pixel limit, 32 times over it in bytes. */
    write_tiff(dir, "tiff_f32x32_limit.tif", (uint32_t)side4, (uint32_t)side4, 32, 32, 3, 1, 0);
    write_gif_canvas(dir, "worst_gif.gif", (uint16_t)side4, (uint16_t)side4);
    /* libwebp holds 8 bytes a pixel (decode.c): max_px / 2 pixels hold max_px x 4 bytes. */
    write_webp(dir, "worst_webp.webp", side8 > 16383 ? 16383 : side8,
               side8 > 16383 ? 16383 : side8);
    if (VIPS_INIT(argv[0]) == 0)
        write_heif(dir, "worst_heif.heic", side8);
    return 0;
}
