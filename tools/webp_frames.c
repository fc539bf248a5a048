/*
 * webp_frames.c - test-time reader of animated WebP files, independent of libanimegan (FFmpeg
 * 5.1 cannot decode them): libwebp's WebPAnimDecoder composites every frame.
 *
 *   webp_frames FILE            prints "loop N" and then one line per frame: its duration in ms
 *   webp_frames FILE K OUT.ppm  also writes frame K (from 0), composited, as a binary PPM
 *
 * Used by tests/video_test.sh. Exit status 1 on a file libwebp cannot decode.
 */
#include <stdio.h>
#include <stdlib.h>
#include <webp/demux.h>

static int write_ppm(const char *path, const uint8_t *rgba, int w, int h) {
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    fprintf(f, "P6\n%d %d\n255\n", w, h);
    for (long i = 0; i < (long)w * h; i++)
        fwrite(rgba + 4 * i, 1, 3, f);
    return fclose(f);
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 4) {
        fprintf(stderr, "usage: webp_frames FILE [K OUT.ppm]\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f)
        return perror(argv[1]), 1;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    rewind(f);
    uint8_t *bytes = size > 0 ? malloc((size_t)size) : NULL;
    if (!bytes || fread(bytes, 1, (size_t)size, f) != (size_t)size)
        return fprintf(stderr, "%s: cannot read\n", argv[1]), 1;
    fclose(f);
    WebPData data = {bytes, (size_t)size};
    WebPAnimDecoderOptions options;
    WebPAnimDecoderOptionsInit(&options);
    options.color_mode = MODE_RGBA;
    WebPAnimDecoder *dec = WebPAnimDecoderNew(&data, &options);
    WebPAnimInfo info;
    if (!dec || !WebPAnimDecoderGetInfo(dec, &info))
        return fprintf(stderr, "%s: not an animated WebP libwebp reads\n", argv[1]), 1;
    printf("loop %u\n", info.loop_count);
    int want = argc == 4 ? atoi(argv[2]) : -1, k = 0, last = 0, rc = 0;
    while (WebPAnimDecoderHasMoreFrames(dec)) {
        uint8_t *rgba;
        int end_ms;
        if (!WebPAnimDecoderGetNext(dec, &rgba, &end_ms)) {
            rc = 1;
            break;
        }
        printf("%d\n", end_ms - last);
        last = end_ms;
        if (k++ == want &&
            write_ppm(argv[3], rgba, (int)info.canvas_width, (int)info.canvas_height) != 0)
            rc = 1;
    }
    WebPAnimDecoderDelete(dec);
    free(bytes);
    return rc || (want >= 0 && want >= k);
}
