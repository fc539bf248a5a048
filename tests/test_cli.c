/*
 * test_cli.c - end-to-end tests of the `animegan` executable: runs the real binary
 * ($BUILD/animegan, BUILD defaulting to "build") in fresh temporary directories and checks
 * exit statuses, the one-line error messages, and the files left behind (decoded with the
 * library to check sizes and pixels).
 */
#include "animegan.h"
#include "test.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define DATA AG_SOURCE_DIR "/tests/data/"
#define MAX_ARGS 32
#define OUTPUT_BYTES (64 * 1024)

/* ---- running the binary ------------------------------------------------------------------ */

static char log_dir[] = "/tmp/ag_cli_logs_XXXXXX";
static char *temp_dirs[64];
static int temp_dir_count;

static const char *binary(void) {
    static char path[4096];
    const char *build = getenv("BUILD");
    if (!build || !build[0])
        build = "build";
    if (build[0] == '/')
        snprintf(path, sizeof path, "%s/animegan", build);
    else
        snprintf(path, sizeof path, "%s/%s/animegan", AG_SOURCE_DIR, build);
    return path;
}

typedef struct run_result {
    int status; /* exit status, or 128 + signal */
    char out[OUTPUT_BYTES];
    char err[OUTPUT_BYTES];
} run_result;

static run_result result; /* one at a time: large, so not on the stack */

static void read_log(const char *path, char *buf) {
    buf[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f)
        return;
    size_t n = fread(buf, 1, OUTPUT_BYTES - 1, f);
    buf[n] = '\0';
    fclose(f);
}

/* The child: stdout and stderr to files (pipes could fill up), killed if it hangs. */
static void exec_child(char **argv, const char *out_path, const char *err_path) {
    int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
        _exit(126);
    alarm(600);
    execv(argv[0], argv);
    _exit(127);
}

/* Run `animegan ARGS... NULL`; fills `result`. Returns 0 when the child ran at all. */
static int run(const char *first, ...) {
    char *argv[MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = (char *)binary();
    va_list ap;
    va_start(ap, first);
    for (const char *arg = first; arg && argc < MAX_ARGS; arg = va_arg(ap, const char *))
        argv[argc++] = (char *)arg;
    va_end(ap);
    argv[argc] = NULL;

    char out_path[256], err_path[256];
    snprintf(out_path, sizeof out_path, "%s/stdout", log_dir);
    snprintf(err_path, sizeof err_path, "%s/stderr", log_dir);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0)
        exec_child(argv, out_path, err_path);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    read_log(out_path, result.out);
    read_log(err_path, result.err);
    if (result.status == 127)
        fprintf(stderr, "  cannot run %s (build it first)\n", argv[0]);
    return 0;
}

/* Print what the command said, for a failing check's context. */
static void show_result(void) {
    fprintf(stderr, "  exit %d\n  stderr: %s\n", result.status, result.err);
}

static int count_lines(const char *text) {
    int n = 0;
    for (; *text; text++)
        n += *text == '\n';
    return n;
}

/* ---- temporary directories and files ----------------------------------------------------- */

/* A fresh directory, removed when the test binary ends. */
static const char *temp_dir(void) {
    char *dir = strdup("/tmp/ag_cli_XXXXXX");
    if (!dir || !mkdtemp(dir) || temp_dir_count == 64) {
        free(dir);
        return "/nonexistent";
    }
    temp_dirs[temp_dir_count++] = dir;
    return dir;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void remove_temp_dirs(void) {
    for (int i = 0; i < temp_dir_count; i++) {
        nftw(temp_dirs[i], remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        free(temp_dirs[i]);
    }
    nftw(log_dir, remove_entry, 4, FTW_DEPTH | FTW_PHYS);
}

/* "dir/name", kept until the test binary ends (so calls can nest). */
static const char *join(const char *dir, const char *name) {
    static char *paths[1024];
    static int count;
    char *path = NULL;
    if (count == 1024 || asprintf(&path, "%s/%s", dir, name) < 0)
        return "/nonexistent";
    return paths[count++] = path;
}

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static int write_file(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t n = fwrite(data, 1, size, f);
    return fclose(f) == 0 && n == size ? 0 : -1;
}

static int copy_file(const char *from, const char *to) {
    FILE *f = fopen(from, "rb");
    if (!f)
        return -1;
    static char data[4 << 20];
    size_t n = fread(data, 1, sizeof data, f);
    fclose(f);
    return write_file(to, data, n);
}

/*
 * The directory holds exactly the NULL-terminated `names`: no missing output, and no stray
 * partial or temporary file. Prints the listing when it differs.
 */
static int dir_holds(const char *dir, ...) {
    const char *expected[32];
    int n_expected = 0;
    va_list ap;
    va_start(ap, dir);
    for (const char *name; (name = va_arg(ap, const char *)) && n_expected < 32;)
        expected[n_expected++] = name;
    va_end(ap);

    DIR *d = opendir(dir);
    if (!d)
        return fprintf(stderr, "  cannot list %s\n", dir), 0;
    int found = 0, stray = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        int known = 0;
        for (int i = 0; i < n_expected; i++)
            known |= !strcmp(e->d_name, expected[i]);
        found += known;
        if (!known) {
            fprintf(stderr, "  unexpected file in %s: %s\n", dir, e->d_name);
            stray++;
        }
    }
    closedir(d);
    if (found != n_expected)
        fprintf(stderr, "  %s holds %d of the %d expected files\n", dir, found, n_expected);
    return found == n_expected && !stray;
}

/* ---- images ------------------------------------------------------------------------------ */

static int decode(const char *path, ag_image *image) {
    ag_decode_options options = {0};
    ag_error err = {0};
    memset(image, 0, sizeof *image);
    if (ag_image_decode_file(path, &options, image, &err)) {
        fprintf(stderr, "  cannot decode %s: %s\n", path, err.message);
        return -1;
    }
    return 0;
}

static int image_size_is(const char *path, int width, int height) {
    ag_image image;
    if (decode(path, &image))
        return 0;
    int ok = image.width == width && image.height == height;
    if (!ok)
        fprintf(stderr, "  %s is %dx%d, expected %dx%d\n", path, image.width, image.height, width,
                height);
    ag_image_fini(&image);
    return ok;
}

/* Largest per-channel difference of two same-sized RGB images (-1: sizes differ or unreadable). */
static int max_difference(const char *a_path, const char *b_path, long *differing) {
    ag_image a, b;
    int max = -1;
    *differing = 0;
    if (decode(a_path, &a))
        return -1;
    if (decode(b_path, &b) == 0 && a.width == b.width && a.height == b.height && a.bands >= 3 &&
        b.bands >= 3) {
        max = 0;
        for (size_t i = 0; i < (size_t)a.width * (size_t)a.height; i++) {
            int pixel_max = 0;
            for (int c = 0; c < 3; c++) {
                int d = abs(a.pixels[i * a.bands + c] - b.pixels[i * b.bands + c]);
                pixel_max = d > pixel_max ? d : pixel_max;
            }
            *differing += pixel_max > 0;
            max = pixel_max > max ? pixel_max : max;
        }
    } else {
        fprintf(stderr, "  %s (%dx%d) and %s (%dx%d) do not compare\n", a_path, a.width, a.height,
                b_path, b.width, b.height);
    }
    ag_image_fini(&a);
    ag_image_fini(&b);
    return max;
}

static int starts_with(const char *text, const char *prefix) {
    return strncmp(text, prefix, strlen(prefix)) == 0;
}

/* A failure report: non-zero exit, exactly one "animegan: ..." line naming `what`. */
static int one_error_line(int status, const char *what) {
    if (result.status != status || count_lines(result.err) != 1 ||
        !starts_with(result.err, "animegan: ") || !strstr(result.err, what)) {
        fprintf(stderr, "  expected exit %d and one line naming '%s'\n", status, what);
        show_result();
        return 0;
    }
    return 1;
}

/* ---- conversions ------------------------------------------------------------------------- */

static int test_convert_matches_fixture(void) {
    const char *fixture = AG_SOURCE_DIR "/tests/fixtures/astronaut_hayao.png";
    CHECK_MSG(file_exists(fixture), "fixture %s is missing (tools/make_fixtures.py writes it)",
              fixture);
    const char *dir = temp_dir();
    const char *out = join(dir, "out.png");
    CHECK(run("convert", DATA "astronaut.png", "-o", out, "--precision", "fp32", NULL) == 0);
    CHECK_MSG(result.status == 0 && result.err[0] == '\0', "exit %d: %s", result.status,
              result.err);
    long differing;
    int max = max_difference(out, fixture, &differing);
    printf("  astronaut vs PyTorch: max difference %d levels, %ld of %d pixels differ\n", max,
           differing, 512 * 512);
    CHECK(max >= 0 && max <= 1);
    CHECK(dir_holds(dir, "out.png", NULL));
    return 0;
}

static int test_convert_keeps_size(void) {
    const char *dir = temp_dir();
    CHECK(run("convert", DATA "coffee.png", "-o", join(dir, "coffee.png"), NULL) == 0);
    CHECK_MSG(result.status == 0, "exit %d: %s", result.status, result.err);
    CHECK(image_size_is(join(dir, "coffee.png"), 600, 400));
    return 0;
}

static int has_magic(const char *path, const char *magic, size_t offset) {
    unsigned char head[16] = {0};
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    return n >= offset + strlen(magic) && !memcmp(head + offset, magic, strlen(magic));
}

static int test_convert_jpg_and_webp(void) {
    const char *dir = temp_dir();
    const char *jpg = join(dir, "cat.jpg"), *webp = join(dir, "cat.webp");
    CHECK(run("convert", DATA "chelsea.png", "-o", jpg, "--quality", "80", NULL) == 0);
    CHECK_MSG(result.status == 0, "exit %d: %s", result.status, result.err);
    CHECK(run("convert", DATA "chelsea.png", "-o", webp, NULL) == 0);
    CHECK_MSG(result.status == 0, "exit %d: %s", result.status, result.err);
    CHECK(has_magic(jpg, "\xff\xd8\xff", 0));
    CHECK(has_magic(webp, "WEBP", 8));
    CHECK(image_size_is(jpg, 451, 300));
    CHECK(image_size_is(webp, 451, 300));
    CHECK(dir_holds(dir, "cat.jpg", "cat.webp", NULL));
    return 0;
}

static int test_directory_to_directory(void) {
    const char *dir = temp_dir();
    const char *in = join(dir, "photos"), *out = join(dir, "anime/nested");
    CHECK(mkdir(in, 0755) == 0);
    CHECK(copy_file(DATA "coffee.png", join(in, "coffee.png")) == 0);
    CHECK(copy_file(DATA "chelsea.png", join(in, "chelsea.png")) == 0);
    CHECK(write_file(join(in, "notes.txt"), "not an image", 12) == 0);
    CHECK(run("convert", in, "-o", out, "--format", "jpg", NULL) == 0);
    /* stderr is a file here: no progress bar, nothing at all on success. */
    CHECK_MSG(result.status == 0 && result.err[0] == '\0', "exit %d: %s", result.status,
              result.err);
    CHECK(dir_holds(out, "coffee.jpg", "chelsea.jpg", NULL));
    CHECK(image_size_is(join(out, "coffee.jpg"), 600, 400));
    CHECK(image_size_is(join(out, "chelsea.jpg"), 451, 300));
    return 0;
}

static int test_single_file_into_directory(void) {
    const char *dir = temp_dir();
    CHECK(run("convert", DATA "chelsea.png", "-o", dir, "--max-side", "128", NULL) == 0);
    CHECK_MSG(result.status == 0, "exit %d: %s", result.status, result.err);
    CHECK(dir_holds(dir, "chelsea.png", NULL));
    CHECK(image_size_is(join(dir, "chelsea.png"), 128, 85));
    return 0;
}

static int test_batch_skips_bad_file(void) {
    const char *dir = temp_dir();
    const char *out = join(dir, "out");
    CHECK(run("convert", DATA "coffee.png", DATA "truncated.jpg", DATA "chelsea.png", "-o", out,
              "--format", "webp", "--max-side", "150", NULL) == 0);
    CHECK(one_error_line(1, "truncated.jpg"));
    CHECK(dir_holds(out, "coffee.webp", "chelsea.webp", NULL));
    CHECK(image_size_is(join(out, "coffee.webp"), 150, 100));
    return 0;
}

static int test_refuses_to_overwrite_input(void) {
    const char *dir = temp_dir();
    const char *photo = join(dir, "chelsea.png");
    CHECK(copy_file(DATA "chelsea.png", photo) == 0);
    struct stat before, after;
    CHECK(stat(photo, &before) == 0);
    CHECK(run("convert", dir, "-o", dir, NULL) == 0);
    CHECK(one_error_line(1, "overwrite"));
    CHECK(stat(photo, &after) == 0 && after.st_size == before.st_size);
    CHECK(dir_holds(dir, "chelsea.png", NULL));
    return 0;
}

static int test_side_by_side(void) {
    const char *dir = temp_dir();
    const char *out = join(dir, "pair.png");
    CHECK(run("convert", DATA "coffee.png", "-o", out, "--side-by-side", "--max-side", "150",
              NULL) == 0);
    CHECK_MSG(result.status == 0, "exit %d: %s", result.status, result.err);
    CHECK(image_size_is(out, 300, 100));
    return 0;
}

static int test_portrait(void) {
    const char *dir = temp_dir();
    const char *out = join(dir, "face.png"), *small = join(dir, "small.png");
    CHECK(run("convert", DATA "coffee.png", "-o", out, "--portrait", NULL) == 0);
    CHECK_MSG(result.status == 0, "exit %d: %s", result.status, result.err);
    CHECK(image_size_is(out, 512, 512));
    CHECK(run("convert", DATA "coffee.png", "-o", small, "--portrait", "--size", "96", NULL) == 0);
    CHECK_MSG(result.status == 0, "exit %d: %s", result.status, result.err);
    CHECK(image_size_is(small, 96, 96));
    return 0;
}

static int test_max_side(void) {
    const char *dir = temp_dir();
    const char *out = join(dir, "small.png");
    CHECK(run("convert", DATA "coffee.png", "-o", out, "--max-side", "300", NULL) == 0);
    CHECK_MSG(result.status == 0, "exit %d: %s", result.status, result.err);
    CHECK(image_size_is(out, 300, 200));
    return 0;
}

/* Whether `animegan convert input -o dir/output` loaded libavformat: the dynamic loader's
 * own log (LD_DEBUG=files, one file per process in dir) names every object it opens. */
static int convert_loads_libavformat(const char *dir, const char *input, const char *output) {
    setenv("LD_DEBUG", "files", 1);
    setenv("LD_DEBUG_OUTPUT", join(dir, "ld"), 1);
    int ran = run("convert", input, "-o", join(dir, output), "--max-side", "64", NULL);
    unsetenv("LD_DEBUG");
    unsetenv("LD_DEBUG_OUTPUT");
    if (ran != 0 || result.status != 0)
        return -1;
    int found = 0;
    DIR *d = opendir(dir);
    for (struct dirent *ent; d && (ent = readdir(d));) {
        if (strncmp(ent->d_name, "ld.", 3) != 0)
            continue;
        FILE *f = fopen(join(dir, ent->d_name), "r");
        char line[1024];
        while (f && fgets(line, sizeof line, f))
            found |= strstr(line, "libavformat") != NULL;
        if (f)
            fclose(f);
        remove(join(dir, ent->d_name));
    }
    if (d)
        closedir(d);
    return found;
}

/* FFmpeg is loaded for videos only (src/video/libav.c): a photo does not pay its ~20 MB. */
static int test_photo_does_not_load_ffmpeg(void) {
    const char *dir = temp_dir();
    CHECK(convert_loads_libavformat(dir, DATA "rocket.jpg", "rocket.png") == 0);
    CHECK(convert_loads_libavformat(dir, DATA "chelsea.png", "chelsea.webp") == 0);
    /* The check can tell: a GIF may be an animation, which only libavformat can say. */
    CHECK(convert_loads_libavformat(dir, DATA "generated/anim.gif", "anim.png") == 1);
    return 0;
}

/* The options reach the engine: the reference backend agrees with oneDNN. */
static int test_engine_options(void) {
    const char *dir = temp_dir();
    const char *fast = join(dir, "onednn.png"), *slow = join(dir, "reference.png");
    const char *hp = join(dir, "hp.png");
    CHECK(run("convert", DATA "astronaut.png", "-o", fast, "--portrait", "--size", "64",
              "--threads", "1", "--precision", "fp32", NULL) == 0);
    CHECK_MSG(result.status == 0, "exit %d: %s", result.status, result.err);
    CHECK(run("convert", DATA "astronaut.png", "-o", slow, "--portrait", "--size", "64",
              "--backend", "reference", "--precision", "fp32", NULL) == 0);
    CHECK_MSG(result.status == 0, "exit %d: %s", result.status, result.err);
    CHECK(run("convert", DATA "astronaut.png", "-o", hp, "--portrait", "--size", "64", "--upsample",
              "half-pixel", "-q", NULL) == 0);
    CHECK_MSG(result.status == 0, "exit %d: %s", result.status, result.err);
    long differing;
    int max = max_difference(fast, slow, &differing);
    printf("  onednn vs reference at 64x64: max difference %d, %ld pixels differ\n", max,
           differing);
    CHECK(max >= 0 && max <= 2);
    CHECK(image_size_is(hp, 64, 64));
    return 0;
}

/* ---- failures: one line, non-zero exit, nothing written ---------------------------------- */

static int test_missing_input(void) {
    const char *dir = temp_dir();
    CHECK(run("convert", join(dir, "nosuch.png"), "-o", join(dir, "out.png"), NULL) == 0);
    CHECK(one_error_line(1, "nosuch.png"));
    CHECK(dir_holds(dir, NULL));
    return 0;
}

static int test_truncated_input(void) {
    const char *dir = temp_dir();
    CHECK(run("convert", DATA "truncated.jpg", "-o", join(dir, "out.png"), NULL) == 0);
    CHECK(one_error_line(1, "truncated.jpg"));
    CHECK(dir_holds(dir, NULL));
    return 0;
}

static int test_unknown_model(void) {
    const char *dir = temp_dir();
    CHECK(run("convert", DATA "chelsea.png", "-o", join(dir, "out.png"), "--model", "nosuch",
              NULL) == 0);
    CHECK(one_error_line(1, "nosuch"));
    CHECK(dir_holds(dir, NULL));
    return 0;
}

static int test_corrupt_model(void) {
    const char *dir = temp_dir();
    const char *model = join(dir, "broken.safetensors");
    /* A plausible header length followed by garbage: the parser must not trust either. */
    unsigned char junk[4096];
    uint32_t state = 12345;
    for (size_t i = 0; i < sizeof junk; i++) {
        state = state * 1103515245u + 12345u;
        junk[i] = (unsigned char)(state >> 16);
    }
    memcpy(junk, "\x40\x00\x00\x00\x00\x00\x00\x00{\"w\": {\"dtype\": ", 24);
    CHECK(write_file(model, junk, sizeof junk) == 0);
    CHECK(run("convert", DATA "chelsea.png", "-o", join(dir, "out.png"), "--model", model, NULL) ==
          0);
    CHECK(one_error_line(1, "broken.safetensors"));
    CHECK(dir_holds(dir, "broken.safetensors", NULL));
    return 0;
}

static int test_wrong_model(void) {
    const char *dir = temp_dir();
    const char *model = join(dir, "photo.pt");
    CHECK(copy_file(DATA "chelsea.png", model) == 0);
    CHECK(run("convert", DATA "chelsea.png", "-o", join(dir, "out.png"), "--model", model, NULL) ==
          0);
    CHECK(one_error_line(1, "photo.pt"));
    CHECK(dir_holds(dir, "photo.pt", NULL));
    return 0;
}

/* Under a regular file nothing can be created, even as root (chmod would not stop root). */
static int test_unwritable_output(void) {
    const char *dir = temp_dir();
    const char *file = join(dir, "somefile.txt");
    CHECK(write_file(file, "x", 1) == 0);
    CHECK(run("convert", DATA "chelsea.png", "-o", join(file, "out.png"), "--max-side", "64",
              NULL) == 0);
    CHECK(one_error_line(1, "somefile.txt/out.png"));
    CHECK(run("convert", DATA "chelsea.png", DATA "coffee.png", "-o", join(file, "outdir"),
              "--max-side", "64", NULL) == 0);
    CHECK(one_error_line(1, "somefile.txt"));
    CHECK(dir_holds(dir, "somefile.txt", NULL));
    return 0;
}

static int test_unknown_output_extension(void) {
    const char *dir = temp_dir();
    CHECK(run("convert", DATA "chelsea.png", "-o", join(dir, "out.xyz"), NULL) == 0);
    CHECK_MSG(result.status == 2 && strstr(result.err, "out.xyz") &&
                  strstr(result.err, "Try 'animegan convert --help'"),
              "exit %d: %s", result.status, result.err);
    CHECK(dir_holds(dir, NULL));
    return 0;
}

/* ---- command line ------------------------------------------------------------------------ */

static int usage_error(const char *hint) {
    if (result.status != 2 || count_lines(result.err) != 2 ||
        !starts_with(result.err, "animegan: ") || !strstr(result.err, hint)) {
        fprintf(stderr, "  expected exit 2, an error line and \"%s\"\n", hint);
        show_result();
        return 0;
    }
    return 1;
}

static int test_bad_options(void) {
    static const char *const cases[][6] = {
        {"--bogus"},
        {"-x"},
        {"--threads", "abc"},
        {"--threads", "-1"},
        {"--threads", "4x"},
        {"--quality", "0"},
        {"--quality", "101"},
        {"--quality", ""},
        {"--max-side", "-1"},
        {"--max-side", "4"},
        {"--max-side", "99999999999999999999"},
        {"--precision", "fp16"},
        {"--backend", "cuda"},
        {"--upsample", "nearest"},
        {"--format", "gif"},
        {"--size", "256"},
        {"--portrait", "--size", "2"},
        {"--model"},
    };
    const char *dir = temp_dir();
    const char *out = join(dir, "out.png");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *const *c = cases[i];
        CHECK(run("convert", DATA "chelsea.png", "-o", out, c[0], c[1], c[2], NULL) == 0);
        CHECK_MSG(usage_error("Try 'animegan convert --help'"), "case %s %s", c[0],
                  c[1] ? c[1] : "");
    }
    CHECK(run("convert", DATA "chelsea.png", NULL) == 0); /* no -o */
    CHECK(usage_error("Try 'animegan convert --help'"));
    CHECK(run("convert", "-o", out, NULL) == 0); /* no input */
    CHECK(usage_error("Try 'animegan convert --help'"));
    CHECK(run("convert", DATA "chelsea.png", "-o", NULL) == 0);
    CHECK(usage_error("Try 'animegan convert --help'"));
    CHECK(run("bench", "--runs", "0", NULL) == 0);
    CHECK(usage_error("Try 'animegan bench --help'"));
    CHECK(run("bench", "--size", "2", NULL) == 0);
    CHECK(usage_error("Try 'animegan bench --help'"));
    CHECK(run("bench", "--warmup", "x", NULL) == 0);
    CHECK(usage_error("Try 'animegan bench --help'"));
    CHECK(run("bench", "stray", NULL) == 0);
    CHECK(usage_error("Try 'animegan bench --help'"));
    CHECK(run("models", "--bogus", NULL) == 0);
    CHECK(usage_error("Try 'animegan models --help'"));
    CHECK(run("nosuchcommand", NULL) == 0);
    CHECK(usage_error("Try 'animegan --help'"));
    CHECK(run(NULL) == 0);
    CHECK(usage_error("Try 'animegan --help'"));
    CHECK(dir_holds(dir, NULL));
    return 0;
}

/* Every word in `words` appears in the help text printed on stdout with exit 0. */
static int help_mentions(const char *command, const char *const *words) {
    CHECK(run(command, "--help", NULL) == 0);
    CHECK_MSG(result.status == 0 && result.err[0] == '\0', "%s --help: exit %d", command,
              result.status);
    for (; *words; words++)
        CHECK_MSG(strstr(result.out, *words), "'%s --help' does not mention %s", command, *words);
    return 0;
}

static int test_help(void) {
    static const char *const convert[] = {
        "--output",   "--model",     "--threads",    "--precision",  "--backend",
        "--upsample", "--max-side",  "--portrait",   "--size",       "--side-by-side",
        "--quality",  "--format",    "--quiet",      "--help",       "default: hayao",
        "1024",       "default: 90", "default: png", "default: 512", "fp32",
        NULL};
    static const char *const bench[] = {"--size",     "--runs",       "--warmup",    "--input",
                                        "--model",    "--threads",    "--precision", "--backend",
                                        "--upsample", "default: 512", "default: 5",  "default: 1",
                                        NULL};
    static const char *const top[] = {"convert", "models", "bench", "serve", "--version", NULL};
    static const char *const models[] = {"ANIMEGAN_MODEL_PATH", NULL};
    if (help_mentions("convert", convert) || help_mentions("bench", bench) ||
        help_mentions("models", models))
        return 1;
    CHECK(run("--help", NULL) == 0 && result.status == 0);
    for (const char *const *w = top; *w; w++)
        CHECK_MSG(strstr(result.out, *w), "'animegan --help' does not mention %s", *w);
    char first[OUTPUT_BYTES];
    memcpy(first, result.out, sizeof first);
    CHECK(run("help", NULL) == 0 && result.status == 0 && !strcmp(first, result.out));
    CHECK(run("--version", NULL) == 0 && result.status == 0);
    CHECK(strstr(result.out, AG_VERSION));
    return 0;
}

/* ---- help against the option tables (issue 30 item 3) ------------------------------------ */

#define MAX_TABLE 96

typedef struct option_names {
    char name[MAX_TABLE][32];
    int required[MAX_TABLE];
    int count;
} option_names;

/* The long options of `animegan CMD --option-table` ("--name none|required|optional"), or of
 * serve's --options-markdown rows ("| `--name ARG` | ..."). */
static int read_table(const char *command, option_names *t) {
    int serve = !strcmp(command, "serve");
    CHECK(run(command, serve ? "--options-markdown" : "--option-table", NULL) == 0);
    CHECK_MSG(result.status == 0, "%s: exit %d", command, result.status);
    t->count = 0;
    for (const char *p = result.out; (p = strstr(p, serve ? "| `--" : "--")); p++) {
        if (!serve && p != result.out && p[-1] != '\n')
            continue;
        p += serve ? 5 : 2;
        size_t n = strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789-");
        CHECK(n > 0 && n < 32 && t->count < MAX_TABLE);
        snprintf(t->name[t->count], 32, "%.*s", (int)n, p);
        t->required[t->count++] = !strncmp(p + n, " required", 9);
    }
    if (serve) { /* the two the markdown leaves out */
        snprintf(t->name[t->count++], 32, "help");
        snprintf(t->name[t->count++], 32, "options-markdown");
    }
    CHECK_MSG(t->count > 0, "%s: an empty option table", command);
    return 0;
}

static int in_table(const option_names *t, const char *name, size_t n) {
    for (int i = 0; i < t->count; i++)
        if (strlen(t->name[i]) == n && !strncmp(t->name[i], name, n))
            return 1;
    return 0;
}

/* `--name` in `text` as a whole word (not the start of --name-more). */
static int mentions_option(const char *text, const char *name) {
    size_t n = strlen(name);
    for (const char *p = text; (p = strstr(p, "--")); p += 2)
        if (!strncmp(p + 2, name, n) && !isalnum((unsigned char)p[2 + n]) && p[2 + n] != '-')
            return 1;
    return 0;
}

/* Every option of the table is in the help, and every option line of the help (indented,
 * "-x, --name" or "--name") names one of the table's. */
static int help_matches_table(const char *command, const option_names *t) {
    CHECK(run(command, "--help", NULL) == 0 && result.status == 0);
    for (int i = 0; i < t->count; i++)
        CHECK_MSG(mentions_option(result.out, t->name[i]), "'%s --help' does not list --%s",
                  command, t->name[i]);
    for (const char *line = result.out; *line; line += strcspn(line, "\n") + (*line != 0)) {
        size_t indent = strspn(line, " ");
        const char *p = line + indent;
        if (indent == 0 || indent > 7)
            continue;
        if (p[0] == '-' && p[1] != '-' && p[2] == ',' && p[3] == ' ')
            p += 4;
        if (strncmp(p, "--", 2))
            continue;
        size_t n = strspn(p + 2, "abcdefghijklmnopqrstuvwxyz0123456789-");
        CHECK_MSG(in_table(t, p + 2, n), "'%s --help' lists --%.*s, not in its option table",
                  command, (int)n, p + 2);
        if (line[strcspn(line, "\n")] == '\0')
            break;
    }
    return 0;
}

/* restore and upscale share convert's table: each option they leave out is refused (exit 2
 * with a line), where one they take would go on to load the model (exit 1). */
static int refuses_the_rest(const char *command, const option_names *all, const option_names *t) {
    const char *out = join(temp_dir(), "out.png");
    for (int i = 0; i < all->count; i++) {
        if (in_table(t, all->name[i], strlen(all->name[i])))
            continue;
        char option[40];
        snprintf(option, sizeof option, "--%s", all->name[i]);
        CHECK(run(command, DATA "chelsea.png", "-o", out, "-m", "/nonexistent/model.pth", option,
                  all->required[i] ? "1" : NULL, NULL) == 0);
        CHECK_MSG(result.status == 2 && count_lines(result.err) == 2, "%s %s: exit %d: %s", command,
                  option, result.status, result.err);
    }
    return 0;
}

static int test_help_lists_option_table(void) {
    static option_names tables[9], convert;
    CHECK(run("--option-table", NULL) == 0 && result.status == 0);
    char commands[512];
    snprintf(commands, sizeof commands, "%.400sserve\n", result.out);
    CHECK(strstr(commands, "restore\n") && strstr(commands, "upscale\n"));
    CHECK(read_table("convert", &convert) == 0);
    int n = 0;
    for (char *c = strtok(commands, "\n"); c && n < 9; c = strtok(NULL, "\n"), n++) {
        if (read_table(c, &tables[n]) || help_matches_table(c, &tables[n]))
            return 1;
        if ((!strcmp(c, "restore") || !strcmp(c, "upscale")) &&
            refuses_the_rest(c, &convert, &tables[n]))
            return 1;
    }
    CHECK(n == 8);
    /* issue 30: restore takes and lists --precision */
    CHECK(run("restore", "--help", NULL) == 0 && mentions_option(result.out, "precision"));
    CHECK(!strstr(result.out, "runs in fp32"));
    return 0;
}

/* `text` with `before` + word + `after` in it. */
static int has_word(const char *text, const char *before, const char *word, const char *after) {
    char w[96];
    snprintf(w, sizeof w, "%s%s%s", before, word, after);
    return strstr(text, w) != NULL;
}

/* A whole text file, malloc'ed; NULL when it cannot be read. */
static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    long size = f && fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (size >= 0 && fseek(f, 0, SEEK_SET) == 0 && (text = malloc((size_t)size + 1)) != NULL)
        text[fread(text, 1, (size_t)size, f)] = '\0';
    if (f)
        fclose(f);
    return text;
}

/* Issue 29: the steps' options, declared once (ag_step_options), are what every front end
 * takes: each row's --name is in the option table of exactly the commands the row names;
 * its API query parameter is in docs/api.md (the parser is checked by
 * test_server_parsers); its Python keyword is in python/animegan/_core.c's lists. */
static int test_step_options_everywhere(void) {
    static const char *const commands[] = {"convert", "restore", "upscale", "fuse"};
    static option_names tables[4];
    for (int c = 0; c < 4; c++)
        CHECK(read_table(commands[c], &tables[c]) == 0);
    char *api = read_text(AG_SOURCE_DIR "/docs/api.md");
    char *python = read_text(AG_SOURCE_DIR "/python/animegan/_core.c");
    CHECK(api && python);
    int count, rc = 0;
    const ag_step_option *o = ag_step_options(&count);
    for (int i = 0; i < count && !rc; i++) {
        for (int c = 0; c < 4; c++) {
            int listed = in_table(&tables[c], o[i].name, strlen(o[i].name));
            int declared = ag_step_option_of(1 << c, o[i].name) != NULL; /* "size": two rows */
            if (listed != declared)
                rc = fprintf(stderr, "  --%s: %s %s, the step table says %s\n", o[i].name,
                             commands[c], listed ? "takes it" : "does not take it",
                             declared ? "it does" : "it does not");
        }
        const char *q = o[i].query;
        if (q && !has_word(api, "`", q, "`") && !has_word(api, "", q, "="))
            rc = fprintf(stderr, "  docs/api.md does not describe %s\n", q);
        if (o[i].keyword && !has_word(python, "\"", o[i].keyword, "\""))
            rc = fprintf(stderr, "  python: no keyword %s (--%s)\n", o[i].keyword, o[i].name);
        if (o[i].step < 0 || o[i].step >= AG_STEP_COUNT || (i && o[i].step < o[i - 1].step))
            rc = fprintf(stderr, "  --%s: rows are in step order\n", o[i].name);
    }
    free(api);
    free(python);
    CHECK(rc == 0);
    CHECK(ag_step_option_find("fidelity") && !ag_step_option_find("nope"));
    return 0;
}

/* The help lines of --name in `help` (its option line and the indented lines under it) into
 * `block`; 0, or -1 when no option line names it. */
static int help_block(const char *help, const char *name, char *block, size_t cap) {
    size_t n = strlen(name);
    for (const char *line = help; *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : "") {
        const char *p = line + strspn(line, " ");
        if (p - line >= 10)
            continue;
        if (p[0] == '-' && p[1] != '-' && p[2] == ',' && p[3] == ' ') /* "-m, --model" */
            p += 4;
        if (strncmp(p, "--", 2) || strncmp(p + 2, name, n) || !strchr(" ,=[\n", p[2 + n]))
            continue;
        size_t len = 0;
        do { /* the option line, then its continuation lines (deeper) */
            const char *e = strchr(line, '\n');
            size_t l = e ? (size_t)(e - line) + 1 : strlen(line);
            len += (size_t)snprintf(block + len, cap - len, "%.*s", (int)l, line);
            line += l;
        } while (*line && strspn(line, " ") >= 10 && len < cap);
        return 0;
    }
    return -1;
}

/* Whether `block` states [min, max] ("1-64", "-1..1", "0 to 1") and, when the default is in
 * the range, "default: <def>". */
static int block_states_row(const char *block, const ag_step_option *o) {
    const char *f = o->type == AG_OPTION_INT ? "%.0f" : "%g";
    char lo[24], hi[24], range[64], def[48];
    snprintf(lo, sizeof lo, f, o->min), snprintf(hi, sizeof hi, f, o->max);
    int stated = 0;
    static const char *const joins[] = {"-", "..", " to "};
    for (int j = 0; j < 3; j++) {
        snprintf(range, sizeof range, "%s%s%s", lo, joins[j], hi);
        stated |= strstr(block, range) != NULL;
    }
    snprintf(def, sizeof def, "default: ");
    snprintf(def + strlen(def), sizeof def - strlen(def), f, o->def);
    if (o->def >= o->min && o->def <= o->max && !strstr(block, def))
        return 0;
    return stated;
}

/* `text` with every run of spaces and newlines as one space, into `out`. */
static void squeeze(const char *text, char *out, size_t cap) {
    size_t n = 0;
    for (; *text && n + 1 < cap; text++)
        if (!isspace((unsigned char)*text))
            out[n++] = *text;
        else if (n && out[n - 1] != ' ')
            out[n++] = ' ';
    out[n] = '\0';
}

static size_t longest_line(const char *text) {
    size_t longest = 0;
    for (size_t n; *text; text += n + (text[n] != 0))
        if ((n = strcspn(text, "\n")) > longest)
            longest = n;
    return longest;
}

/* Whether `block` (the help lines of row `o`) is the row's: its help text (up to its own
 * "(default: ...)"), for a number its range and default, for a choice the values on the
 * option line ("--mode normal|blend|overlay") and the default. */
static int block_is_row(const char *block, const ag_step_option *o) {
    char flat[1024], help[512], values[128] = "", def[64];
    squeeze(block, flat, sizeof flat);
    squeeze(o->help, help, sizeof help);
    char *own_default = strstr(help, " (default: ");
    if (own_default)
        *own_default = '\0';
    if (!strstr(flat, help))
        return 0;
    if (!o->choices)
        return (o->type != AG_OPTION_INT && o->type != AG_OPTION_FLOAT) ||
               block_states_row(block, o);
    for (int i = 0; o->choices[i]; i++)
        snprintf(values + strlen(values), sizeof values - strlen(values), "%s%s", i ? "|" : "",
                 o->choices[i]);
    snprintf(def, sizeof def, "(default: %s)", o->def >= 0 ? o->choices[(int)o->def] : "");
    return strstr(block, values) && (o->def < 0 || strstr(flat, def));
}

/* Issue 29 item 1: each command's --help is the step table's for its step options: every
 * row the command takes is there, under its --name, with the row's help, range, default and
 * choices (a row changed and not its help fails here: the help is printed from the rows).
 * help_matches_table holds the rest: every --option line names one of the command's. */
static int test_help_states_the_rows(void) {
    static const char *const commands[] = {"convert", "restore", "upscale", "fuse"};
    static char help[4][sizeof result.out];
    char block[1024];
    int count, checked = 0, rc = 0;
    for (int c = 0; c < 4; c++) {
        CHECK(run(commands[c], "--help", NULL) == 0 && result.status == 0);
        snprintf(help[c], sizeof help[c], "%s", result.out);
    }
    const ag_step_option *o = ag_step_options(&count);
    for (int i = 0; i < count; i++)
        for (int c = 0; c < 4; c++) {
            if (!((o[i].commands >> c) & 1))
                continue;
            if (help_block(help[c], o[i].name, block, sizeof block) ||
                !block_is_row(block, &o[i]) || longest_line(block) > 80)
                rc = fprintf(stderr, "  %s --help: --%s is not its row's: \"%s\"\n", commands[c],
                             o[i].name,
                             help_block(help[c], o[i].name, block, sizeof block) ? "" : block);
            checked++;
        }
    CHECK(rc == 0 && checked >= 40);
    return 0;
}

/* Issue 29 item 2: a choice row's values are taken on the CLI and anything else is the row's
 * one refusal (exit 2, "--mode must be normal, blend or overlay, not 'sharpest'"). */
static int test_choices_are_the_rows(void) {
    static const char *const commands[] = {"convert", "restore", "upscale", "fuse"};
    const char *missing = join(temp_dir(), "missing.png"), *out = join(temp_dir(), "c.png");
    int count, checked = 0;
    const ag_step_option *o = ag_step_options(&count);
    for (int i = 0; i < count; i++)
        for (int c = 0; c < 4; c++) {
            if (!o[i].choices || !((o[i].commands >> c) & 1))
                continue;
            int fuse = c == 3;
            char option[64], refusal[256], spelled[48];
            for (int k = 0; o[i].choices[k]; k++) {
                snprintf(option, sizeof option, "--%s=%s", o[i].name, o[i].choices[k]);
                CHECK(run(commands[c], fuse ? "-s" : missing, fuse ? missing : "-o",
                          fuse ? "-T" : out, fuse ? missing : option, fuse ? "-o" : NULL, out,
                          option, NULL) == 0);
                CHECK_MSG(!strstr(result.err, " must be "), "%s %s: %s", commands[c], option,
                          result.err);
            }
            snprintf(option, sizeof option, "--%s=sharpest", o[i].name);
            CHECK(run(commands[c], fuse ? "-s" : missing, fuse ? missing : "-o", fuse ? "-T" : out,
                      fuse ? missing : option, fuse ? "-o" : NULL, out, option, NULL) == 0);
            snprintf(spelled, sizeof spelled, "--%s", o[i].name);
            ag_step_option_refusal(&o[i], spelled, NULL, "sharpest", refusal, sizeof refusal);
            CHECK(usage_error(refusal));
            checked++;
        }
    CHECK(checked >= 3);
    return 0;
}

/* Whether the parenthetical right after a mention of `key` ("`key`" or "`key=") in `doc`
 * states [min, max]: "(0-1)", "(-1..1)", "(side, 64-4096, ...)"; a run of keys may share
 * one: "`brightness`, `contrast`, `saturation` (-1..1)". */
static int doc_states_range(const char *doc, const ag_step_option *o) {
    const char *f = o->type == AG_OPTION_INT ? "%.0f" : "%g";
    char mention[64], lo[24], hi[24], range[64];
    snprintf(lo, sizeof lo, f, o->min), snprintf(hi, sizeof hi, f, o->max);
    snprintf(mention, sizeof mention, "`%s", o->query);
    for (const char *m = strstr(doc, mention); m; m = strstr(m + 1, mention)) {
        const char *open = strchr(m, '('), *close = open ? strchr(open, ')') : NULL;
        if (!close || open - m > 120)
            continue;
        static const char *const joins[] = {"-", "..", " to "};
        for (int j = 0; j < 3; j++) {
            snprintf(range, sizeof range, "%s%s%s", lo, joins[j], hi);
            const char *r = strstr(open, range), *after = r ? r + strlen(range) : NULL;
            if (r && r < close && strchr("( ", r[-1]) && !strchr("0123456789.", *after))
                return 1;
        }
    }
    return 0;
}

/* Issue 29 item 4: docs/api.md states the range of every numeric API parameter of the step
 * table as the row has it, and every value of a choice (upscale's: 0, 2 and 4, the server's
 * upscalers). */
static int test_api_doc_states_ranges(void) {
    char *api = read_text(AG_SOURCE_DIR "/docs/api.md");
    int count, checked = 0, rc = 0;
    CHECK(api != NULL);
    const ag_step_option *o = ag_step_options(&count);
    for (int i = 0; i < count; i++) {
        if (o[i].query && o[i].choices) { /* each value: "`face`" or "upscale=2" */
            for (int k = 0; o[i].choices[k]; k++)
                if (!has_word(api, "`", o[i].choices[k], "`") &&
                    !has_word(api, o[i].query, "=", o[i].choices[k]))
                    rc = fprintf(stderr, "  docs/api.md: %s's value %s is not stated\n", o[i].query,
                                 o[i].choices[k]);
            checked++;
        }
        if (!o[i].query || o[i].choices ||
            (o[i].type != AG_OPTION_INT && o[i].type != AG_OPTION_FLOAT))
            continue;
        if (!doc_states_range(api, &o[i]))
            rc = fprintf(stderr, "  docs/api.md: %s is not followed by (%.10g-%.10g)\n", o[i].query,
                         o[i].min, o[i].max);
        checked++;
    }
    free(api);
    CHECK(rc == 0 && checked >= 10);
    return 0;
}

/* Issue 33 item 9: an image name for several outputs, a style where a checkpoint goes. */
static int test_cli_messages(void) {
    const char *dir = temp_dir();
    const char *out = join(dir, "y.png");
    CHECK(run("convert", DATA "chelsea.png", DATA "coffee.png", "-o", out, NULL) == 0);
    CHECK(usage_error("names an image file") && !file_exists(out));
    CHECK(run("restore", DATA "chelsea.png", "-o", out, "-m", "hayao", NULL) == 0);
    CHECK(one_error_line(1, "a restorer checkpoint (GPEN, GFPGAN, CodeFormer .pth) is expected; "
                            "hayao is a style"));
    CHECK(run("restore", DATA "chelsea.png", "-o", out, "-m", "esrgan-slim-x2", NULL) == 0);
    CHECK(one_error_line(1, "esrgan-slim-x2 is an upscaler"));
    CHECK(dir_holds(dir, NULL));
    return 0;
}

static int test_models_lists_hayao(void) {
    ag_model *model = NULL;
    ag_error err = {0};
    CHECK_OK(ag_model_load(AG_SOURCE_DIR "/models/hayao.safetensors", &model, &err), &err);
    char license[256];
    snprintf(license, sizeof license, "%s", ag_model_get_info(model)->license);
    ag_model_destroy(model);
    CHECK_MSG(license[0], "the bundled hayao model carries no licence text");

    CHECK(run("models", NULL) == 0);
    CHECK_MSG(result.status == 0, "exit %d: %s", result.status, result.err);
    CHECK(starts_with(result.out, "hayao\n") || strstr(result.out, "\nhayao\n"));
    CHECK(strstr(result.out, "licence:"));
    CHECK_MSG(strstr(result.out, license), "licence '%s' not in:\n%s", license, result.out);
    return 0;
}

static int json_number(const cJSON *root, const char *key, double *value) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!cJSON_IsNumber(item)) {
        fprintf(stderr, "  bench JSON lacks the number \"%s\"\n", key);
        return -1;
    }
    *value = item->valuedouble;
    return 0;
}

static int test_bench_json(void) {
    CHECK(run("bench", "--size", "64", "--runs", "2", NULL) == 0);
    CHECK_MSG(result.status == 0, "exit %d: %s", result.status, result.err);
    CHECK_MSG(count_lines(result.out) == 1, "not one line: %s", result.out);
    cJSON *root = cJSON_Parse(result.out);
    CHECK_MSG(root, "not JSON: %s", result.out);
    static const char *const numbers[] = {"size",   "threads", "runs",   "ms_median",   "ms_min",
                                          "ms_max", "gflop",   "gflops", "peak_rss_mb", "arena_mb"};
    double v[10];
    int bad = 0;
    for (int i = 0; i < 10; i++)
        bad |= json_number(root, numbers[i], &v[i]);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *precision = cJSON_GetObjectItemCaseSensitive(root, "precision");
    const cJSON *requested = cJSON_GetObjectItemCaseSensitive(root, "requested");
    const cJSON *backend = cJSON_GetObjectItemCaseSensitive(root, "backend");
    ag_precision_choice automatic; /* the default: auto, resolved for this CPU */
    ag_precision_resolve(AG_PRECISION_AUTO, AG_BACKEND_ONEDNN, NULL, &automatic);
    int strings_ok = cJSON_IsString(model) && !strcmp(model->valuestring, "hayao") &&
                     cJSON_IsString(requested) && !strcmp(requested->valuestring, "auto") &&
                     cJSON_IsString(precision) &&
                     !strcmp(precision->valuestring, ag_precision_name(automatic.precision)) &&
                     cJSON_IsString(backend) && !strcmp(backend->valuestring, "onednn");
    cJSON_Delete(root);
    CHECK(!bad && strings_ok);
    CHECK(v[0] == 64 && v[1] >= 1 && v[2] == 2);
    CHECK(v[4] > 0 && v[4] <= v[3] && v[3] <= v[5]);
    CHECK(v[6] > 0 && v[7] > 0 && v[8] > 0 && v[9] > 0);
    return 0;
}

int main(int argc, char **argv) {
    static const test_case tests[] = {
        TEST(test_convert_matches_fixture),
        TEST(test_convert_keeps_size),
        TEST(test_convert_jpg_and_webp),
        TEST(test_directory_to_directory),
        TEST(test_single_file_into_directory),
        TEST(test_batch_skips_bad_file),
        TEST(test_refuses_to_overwrite_input),
        TEST(test_side_by_side),
        TEST(test_portrait),
        TEST(test_max_side),
        TEST(test_photo_does_not_load_ffmpeg),
        TEST(test_engine_options),
        TEST(test_missing_input),
        TEST(test_truncated_input),
        TEST(test_unknown_model),
        TEST(test_corrupt_model),
        TEST(test_wrong_model),
        TEST(test_unwritable_output),
        TEST(test_unknown_output_extension),
        TEST(test_bad_options),
        TEST(test_help),
        TEST(test_help_lists_option_table),
        TEST(test_step_options_everywhere),
        TEST(test_help_states_the_rows),
        TEST(test_choices_are_the_rows),
        TEST(test_api_doc_states_ranges),
        TEST(test_cli_messages),
        TEST(test_models_lists_hayao),
        TEST(test_bench_json),
    };
    /* A binary deeper than build/ (build/address/animegan) does not find ../models next to
     * itself; the default build keeps testing the executable-relative lookup. */
    const char *build = getenv("BUILD");
    if (build && build[0] && strcmp(build, "build") != 0)
        setenv("ANIMEGAN_MODEL_PATH", AG_SOURCE_DIR "/models", 0);
    ag_error err = {0};
    if (!mkdtemp(log_dir) || ag_image_startup(argv[0], &err)) {
        fprintf(stderr, "cannot start: %s\n", err.message[0] ? err.message : strerror(errno));
        return 1;
    }
    int rc = test_run_all(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
    remove_temp_dirs();
    ag_image_shutdown();
    return rc;
}
