/*
 * test_model_files.c - the model file parsers: PyTorch state_dicts in both layouts (fixtures
 * written by tools/make_pt_fixtures.py), hand-made pickles that probe the pickle reader's
 * refusals, safetensors buffers built here, and the tensor set. Every test checks that the
 * library's allocation count returns to where it started.
 */
#include "../src/model/model_internal.h"
#include "test.h"

#include <dirent.h>

#define FIXTURES AG_SOURCE_DIR "/tests/fixtures/pt/"

typedef int (*parse_fn)(const uint8_t *, size_t, const char *, ag_tensor_set *, ag_error *);

static int read_fixture(const char *path, uint8_t **data, size_t *size) {
    ag_error err = {0};
    int rc = ag_read_file(path, (size_t)1 << 30, data, size, &err);
    if (rc != 0)
        fprintf(stderr, "  %s\n", err.message);
    return rc;
}

/* Parses a buffer that must be refused with `code`; the message must name the label and
 * contain `needle`, and the set must come back empty. */
static int expect_refusal(parse_fn parse, const uint8_t *data, size_t size, int code,
                          const char *needle) {
    ag_tensor_set set = {0};
    ag_error err = {0};
    int rc = parse(data, size, "probe.bin", &set, &err);
    CHECK_MSG(rc == code, "returned %d (%s), wanted %d", rc, err.message, code);
    CHECK_MSG(err.code == code, "err.code %d", err.code);
    CHECK_MSG(strncmp(err.message, "probe.bin: ", 11) == 0, "message '%s'", err.message);
    CHECK_MSG(strstr(err.message, needle), "message '%s' lacks '%s'", err.message, needle);
    CHECK(set.count == 0 && set.blob_count == 0 && set.meta_count == 0);
    ag_tensor_set_fini(&set);
    return 0;
}

static int expect_file_refusal(const char *name, int code, const char *needle) {
    char path[512];
    snprintf(path, sizeof path, FIXTURES "%s", name);
    uint8_t *data = NULL;
    size_t size = 0;
    CHECK(read_fixture(path, &data, &size) == 0);
    ag_tensor_set set = {0};
    ag_error err = {0};
    int rc = ag_pytorch_parse(data, size, name, &set, &err);
    ag_free(data);
    CHECK_MSG(rc == code, "%s: returned %d (%s), wanted %d", name, rc, err.message, code);
    CHECK_MSG(strncmp(err.message, name, strlen(name)) == 0, "message '%s'", err.message);
    CHECK_MSG(strstr(err.message, needle), "message '%s' lacks '%s'", err.message, needle);
    CHECK(set.count == 0 && set.blob_count == 0);
    return 0;
}

static int expect_tensor(const ag_tensor_set *set, const char *name, ag_dtype dtype, int ndim,
                         const int64_t *shape, const void *values, size_t nbytes) {
    const ag_tensor_ref *t = ag_tensor_set_find(set, name);
    CHECK_MSG(t, "no tensor '%s'", name);
    CHECK_MSG(t->dtype == dtype && t->ndim == ndim, "'%s': dtype %d ndim %d", name, t->dtype,
              t->ndim);
    for (int i = 0; i < ndim; i++)
        CHECK_MSG(t->shape[i] == shape[i], "'%s': dim %d is %lld", name, i, (long long)t->shape[i]);
    CHECK_MSG(t->nbytes == nbytes, "'%s': %zu bytes", name, t->nbytes);
    const void *elements;
    void *tmp;
    ag_error err = {0};
    CHECK_OK(ag_tensor_ref_elements(t, &elements, &tmp, &err), &err);
    int same = nbytes == 0 || memcmp(elements, values, nbytes) == 0;
    ag_free(tmp);
    CHECK_MSG(same, "'%s': wrong values", name);
    return 0;
}

/* ---- the reference state_dict of tools/make_pt_fixtures.py ----------------------------- */

static int check_reference(const ag_tensor_set *set) {
    float w[12], t[6] = {0, 3, 1, 4, 2, 5}, a[4] = {102, 103, 104, 105};
    float b[4] = {106, 107, 108, 109}, e[6] = {7, 8, 7, 8, 7, 8}, bias[2] = {0.25f, -0.75f};
    float scalar = 3.5f;
    uint16_t half[3] = {0x3c00, 0xc000, 0x3800}, bf16[2] = {0x3fc0, 0xc040};
    double f64[2] = {0.1, 2.0};
    int8_t i8[3] = {-128, 0, 127};
    for (int i = 0; i < 12; i++)
        w[i] = (float)i * 0.5f - 1.0f;
    CHECK(set->count == 12);
    CHECK(strcmp(set->tensors[0].name, "conv.weight") == 0); /* file order kept */
    CHECK(expect_tensor(set, "conv.weight", AG_DTYPE_F32, 4, (int64_t[]){2, 3, 1, 2}, w,
                        sizeof w) == 0);
    CHECK(expect_tensor(set, "conv.bias", AG_DTYPE_F32, 1, (int64_t[]){2}, bias, 8) == 0);
    CHECK(expect_tensor(set, "half", AG_DTYPE_F16, 1, (int64_t[]){3}, half, 6) == 0);
    CHECK(expect_tensor(set, "bf16", AG_DTYPE_BF16, 1, (int64_t[]){2}, bf16, 4) == 0);
    CHECK(expect_tensor(set, "f64", AG_DTYPE_F64, 1, (int64_t[]){2}, f64, 16) == 0);
    CHECK(expect_tensor(set, "i8", AG_DTYPE_I8, 1, (int64_t[]){3}, i8, 3) == 0);
    CHECK(expect_tensor(set, "transposed", AG_DTYPE_F32, 2, (int64_t[]){3, 2}, t, 24) == 0);
    CHECK(expect_tensor(set, "shared_a", AG_DTYPE_F32, 1, (int64_t[]){4}, a, 16) == 0);
    CHECK(expect_tensor(set, "shared_b", AG_DTYPE_F32, 2, (int64_t[]){2, 2}, b, 16) == 0);
    CHECK(expect_tensor(set, "expanded", AG_DTYPE_F32, 2, (int64_t[]){3, 2}, e, 24) == 0);
    CHECK(expect_tensor(set, "scalar", AG_DTYPE_F32, 0, NULL, &scalar, 4) == 0);
    CHECK(expect_tensor(set, "empty", AG_DTYPE_F32, 2, (int64_t[]){0, 3}, NULL, 0) == 0);
    /* Both views of one storage point into it, not into copies. */
    const ag_tensor_ref *sa = ag_tensor_set_find(set, "shared_a");
    CHECK((const char *)ag_tensor_set_find(set, "shared_b")->data == (const char *)sa->data + 16);
    CHECK(strcmp(ag_tensor_set_meta_get(set, "format"), "pytorch") == 0);
    return 0;
}

static int parse_fixture(const char *name, uint8_t **data, size_t *size, ag_tensor_set *set) {
    char path[512];
    snprintf(path, sizeof path, FIXTURES "%s", name);
    ag_error err = {0};
    CHECK(read_fixture(path, data, size) == 0);
    CHECK_OK(ag_pytorch_parse(*data, *size, name, set, &err), &err);
    return 0;
}

static int check_reference_file(const char *name, const char *serialization) {
    uint8_t *data = NULL;
    ag_tensor_set set = {0};
    size_t size = 0;
    CHECK(parse_fixture(name, &data, &size, &set) == 0);
    int rc = check_reference(&set);
    const char *s = ag_tensor_set_meta_get(&set, "serialization");
    CHECK_MSG(rc == 0, "in %s", name);
    CHECK(s && strcmp(s, serialization) == 0);
    ag_tensor_set_fini(&set);
    ag_free(data);
    return 0;
}

LEAK_CHECKED(test_zip_state) {
    return check_reference_file("state_zip.pt", "zip");
}
LEAK_CHECKED(test_legacy_state) {
    return check_reference_file("state_legacy.pt", "legacy");
}
LEAK_CHECKED(test_zip_protocol4) {
    return check_reference_file("state_proto4_zip.pt", "zip");
}
LEAK_CHECKED(test_legacy_protocol4) {
    return check_reference_file("state_proto4_legacy.pt", "legacy");
}
LEAK_CHECKED(test_zip_deflate) {
    return check_reference_file("state_deflate_zip.pt", "zip");
}

/* Legacy tensors point straight into the file; zip ones into storages of the set. */
LEAK_CHECKED(test_legacy_points_into_file) {
    uint8_t *data = NULL;
    ag_tensor_set set = {0};
    size_t size = 0;
    CHECK(parse_fixture("state_legacy.pt", &data, &size, &set) == 0);
    const uint8_t *w = ag_tensor_set_find(&set, "conv.weight")->data;
    const uint8_t *t = ag_tensor_set_find(&set, "transposed")->data;
    CHECK(w > data && w + 48 <= data + size);
    /* Views are kept as views, gathered only when a model builder reads them. */
    CHECK(t >= data && t < data + size && ag_tensor_set_find(&set, "transposed")->strided);
    CHECK(ag_tensor_set_find(&set, "expanded")->strided);
    CHECK(set.blob_count == 0);
    ag_tensor_set_fini(&set);
    ag_free(data);
    return 0;
}

/* nn.Module "Tiny" of make_pt_fixtures.py, in several wrappings. */
static int check_tiny_file(const char *name) {
    float w[6] = {0, 0.25f, 0.5f, 0.75f, 1, 1.25f}, b[3] = {1, 2, 3};
    float g[3] = {0.5f, 1.5f, 2.5f}, beta[3] = {-1, 0, 1};
    uint8_t *data = NULL;
    ag_tensor_set set = {0};
    size_t size = 0;
    CHECK(parse_fixture(name, &data, &size, &set) == 0);
    CHECK_MSG(set.count == 4, "%s: %d tensors", name, set.count);
    CHECK(expect_tensor(&set, "conv.weight", AG_DTYPE_F32, 4, (int64_t[]){3, 2, 1, 1}, w, 24) == 0);
    CHECK(expect_tensor(&set, "conv.bias", AG_DTYPE_F32, 1, (int64_t[]){3}, b, 12) == 0);
    CHECK(expect_tensor(&set, "norm.weight", AG_DTYPE_F32, 1, (int64_t[]){3}, g, 12) == 0);
    CHECK(expect_tensor(&set, "norm.bias", AG_DTYPE_F32, 1, (int64_t[]){3}, beta, 12) == 0);
    ag_tensor_set_fini(&set);
    ag_free(data);
    return 0;
}

LEAK_CHECKED(test_module_prefix_zip) {
    return check_tiny_file("module_prefix_zip.pt");
}
LEAK_CHECKED(test_module_prefix_legacy) {
    return check_tiny_file("module_prefix_legacy.pt");
}
LEAK_CHECKED(test_parameters_zip) {
    return check_tiny_file("params_zip.pt");
}

LEAK_CHECKED(test_refused_files) {
    static const struct {
        const char *name;
        int code;
        const char *needle;
    } cases[] = {
        {"whole_module_zip.pt", AG_E_UNSUPPORTED, "class '__main__.Tiny', not a state_dict"},
        {"whole_module_legacy.pt", AG_E_UNSUPPORTED, "class '__main__.Tiny', not a state_dict"},
        {"checkpoint_zip.pt", AG_E_UNSUPPORTED, "entry 'epoch' holds a Python int"},
        {"long_zip.pt", AG_E_UNSUPPORTED, "torch.LongStorage"},
        {"evil_reduce_zip.pt", AG_E_UNSUPPORTED, "system'"},
        {"evil_reduce_legacy.pt", AG_E_UNSUPPORTED, "system'"},
        {"bigendian_zip.pt", AG_E_UNSUPPORTED, "little-endian"},
        {"truncated_zip.pt", AG_E_FORMAT, "zip"},
        {"truncated_legacy.pt", AG_E_FORMAT, "truncated"},
        {"crc_zip.pt", AG_E_FORMAT, "'state_zip/data/0' is corrupt: CRC error"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK(expect_file_refusal(cases[i].name, cases[i].code, cases[i].needle) == 0);
    return 0;
}

/* Every input the fuzzers once crashed on (tests/fixtures/pt/fuzz_*): refused or parsed,
 * but without a crash or a leak. */
LEAK_CHECKED(test_fuzz_regressions) {
    DIR *dir = opendir(FIXTURES);
    CHECK(dir);
    struct dirent *entry;
    int seen = 0;
    while ((entry = readdir(dir))) {
        if (strncmp(entry->d_name, "fuzz_", 5) != 0)
            continue;
        char path[512];
        snprintf(path, sizeof path, FIXTURES "%s", entry->d_name);
        uint8_t *data = NULL;
        size_t size = 0;
        if (read_fixture(path, &data, &size) != 0) {
            closedir(dir);
            return 1;
        }
        bool st = strstr(entry->d_name, ".safetensors") != NULL;
        ag_tensor_set set = {0};
        ag_error err = {0};
        int rc =
            (st ? ag_safetensors_parse : ag_pytorch_parse)(data, size, entry->d_name, &set, &err);
        if (rc != 0 && strncmp(err.message, entry->d_name, strlen(entry->d_name)) != 0)
            rc = 1000;
        ag_tensor_set_fini(&set);
        ag_free(data);
        seen++;
        if (rc == 1000) {
            closedir(dir);
            CHECK_MSG(0, "%s: message '%s' does not name the file", entry->d_name, err.message);
        }
    }
    closedir(dir);
    printf("  %d fuzz regression inputs\n", seen);
    return 0;
}

/* tests/fixtures/random_{zip,legacy}.pt: one generator state_dict saved both ways. */
LEAK_CHECKED(test_random_zip_equals_legacy) {
    const char *zip_path = AG_SOURCE_DIR "/tests/fixtures/random_zip.pt";
    const char *legacy_path = AG_SOURCE_DIR "/tests/fixtures/random_legacy.pt";
    FILE *probe_zip = fopen(zip_path, "rb"), *probe_legacy = fopen(legacy_path, "rb");
    if (probe_zip)
        fclose(probe_zip);
    if (probe_legacy)
        fclose(probe_legacy);
    if (!probe_zip || !probe_legacy) {
        printf("  note: tests/fixtures/random_{zip,legacy}.pt not there yet; skipped\n");
        return 0;
    }
    uint8_t *zdata = NULL, *ldata = NULL;
    size_t zsize = 0, lsize = 0;
    ag_tensor_set zset = {0}, lset = {0};
    ag_error err = {0};
    CHECK(read_fixture(zip_path, &zdata, &zsize) == 0);
    CHECK(read_fixture(legacy_path, &ldata, &lsize) == 0);
    CHECK_OK(ag_pytorch_parse(zdata, zsize, "random_zip.pt", &zset, &err), &err);
    CHECK_OK(ag_pytorch_parse(ldata, lsize, "random_legacy.pt", &lset, &err), &err);
    CHECK(zset.count == lset.count && zset.count > 0);
    size_t params = 0;
    for (int i = 0; i < zset.count; i++) {
        const ag_tensor_ref *z = &zset.tensors[i], *l = &lset.tensors[i];
        CHECK_MSG(strcmp(z->name, l->name) == 0, "%s vs %s", z->name, l->name);
        CHECK(z->dtype == l->dtype && z->ndim == l->ndim && z->nbytes == l->nbytes);
        CHECK(memcmp(z->shape, l->shape, sizeof z->shape) == 0);
        CHECK_MSG(memcmp(z->data, l->data, z->nbytes) == 0, "'%s' differs", z->name);
        params += z->nbytes / ag_dtype_size(z->dtype);
    }
    printf("  %d tensors, %zu parameters identical in both layouts\n", zset.count, params);
    ag_tensor_set_fini(&zset);
    ag_tensor_set_fini(&lset);
    ag_free(zdata);
    ag_free(ldata);
    return 0;
}

/* ---- hand-made legacy files ------------------------------------------------------------ */

typedef struct buf {
    uint8_t bytes[1 << 17];
    size_t len;
} buf;

static void put(buf *b, const void *p, size_t n) {
    if (b->len + n <= sizeof b->bytes) {
        memcpy(b->bytes + b->len, p, n);
        b->len += n;
    }
}
static void op(buf *b, int code) {
    uint8_t c = (uint8_t)code;
    put(b, &c, 1);
}
static void op_str(buf *b, const char *s) { /* SHORT_BINUNICODE */
    op(b, 0x8c);
    op(b, (int)strlen(s));
    put(b, s, strlen(s));
}
static void op_global(buf *b, const char *module, const char *name) {
    op(b, 'c');
    put(b, module, strlen(module));
    op(b, '\n');
    put(b, name, strlen(name));
    op(b, '\n');
}
static void op_int(buf *b, int64_t v) { /* BININT */
    uint32_t u = (uint32_t)v;
    op(b, 'J');
    put(b, &u, 4);
}

/* The magic number, protocol version and sys_info pickles. */
static void legacy_head(buf *b) {
    static const uint8_t magic[10] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
    op(b, 0x80), op(b, 2), op(b, 0x8a), op(b, 10), put(b, magic, 10), op(b, '.');
    op(b, 0x80), op(b, 2), op(b, 'M'), op(b, 0xe9), op(b, 0x03), op(b, '.');
    op(b, 0x80), op(b, 2), op(b, '}'), op(b, '.');
}

typedef struct fake_tensor {
    const char *name;
    int ndim;
    int64_t offset, size[5], stride[5];
    int64_t view[2]; /* pre-1.0 storage view (offset, size) when view[1] > 0 */
} fake_tensor;

/* A legacy file of one tensor on storage '0' of `numel` floats 0, 1, 2, ... */
static void legacy_file(buf *b, const fake_tensor *t, int numel) {
    b->len = 0;
    legacy_head(b);
    op(b, 0x80), op(b, 2);
    op_global(b, "collections", "OrderedDict"), op(b, ')'), op(b, 'R');
    op_str(b, t->name);
    op_global(b, "torch._utils", "_rebuild_tensor_v2");
    op(b, '('), op(b, '('), op_str(b, "storage"), op_global(b, "torch", "FloatStorage");
    op_str(b, "0"), op_str(b, "cpu"), op_int(b, numel);
    if (t->view[1] > 0)
        op_str(b, "v"), op_int(b, t->view[0]), op_int(b, t->view[1]), op(b, 0x87);
    else
        op(b, 'N');
    op(b, 't'), op(b, 'Q');
    op_int(b, t->offset);
    op(b, '(');
    for (int i = 0; i < t->ndim; i++)
        op_int(b, t->size[i]);
    op(b, 't'), op(b, '(');
    for (int i = 0; i < t->ndim; i++)
        op_int(b, t->stride[i]);
    op(b, 't'), op(b, 0x89), op(b, '}'), op(b, 't'), op(b, 'R'), op(b, 's'), op(b, '.');
    op(b, 0x80), op(b, 2), op(b, ']'), op_str(b, "0"), op(b, 'a'), op(b, '.');
    uint64_t count = (uint64_t)numel;
    put(b, &count, 8);
    for (int i = 0; i < numel; i++) {
        float v = (float)i;
        put(b, &v, 4);
    }
}

static buf scratch;

LEAK_CHECKED(test_crafted_tensors) {
    ag_tensor_set set = {0};
    ag_error err = {0};
    /* A valid one first, so the refusals below are about what they change. */
    legacy_file(&scratch, &(fake_tensor){"module.w", 2, 1, {2, 2}, {1, 2}, {0, 0}}, 6);
    CHECK_OK(ag_pytorch_parse(scratch.bytes, scratch.len, "probe.bin", &set, &err), &err);
    CHECK(expect_tensor(&set, "w", AG_DTYPE_F32, 2, (int64_t[]){2, 2}, (float[]){1, 3, 2, 4}, 16) ==
          0);
    ag_tensor_set_fini(&set);

    /* A view of elements 2..4 of the storage, then a view reaching past it. */
    legacy_file(&scratch, &(fake_tensor){"w", 1, 1, {2}, {1}, {2, 3}}, 6);
    CHECK_OK(ag_pytorch_parse(scratch.bytes, scratch.len, "probe.bin", &set, &err), &err);
    CHECK(expect_tensor(&set, "w", AG_DTYPE_F32, 1, (int64_t[]){2}, (float[]){3, 4}, 8) == 0);
    ag_tensor_set_fini(&set);
    legacy_file(&scratch, &(fake_tensor){"w", 1, 0, {2}, {1}, {5, 3}}, 6);
    CHECK(expect_refusal(ag_pytorch_parse, scratch.bytes, scratch.len, AG_E_FORMAT,
                         "bad storage view") == 0);
    legacy_file(&scratch, &(fake_tensor){"w", 1, 2, {2}, {1}, {2, 3}}, 6);
    CHECK(expect_refusal(ag_pytorch_parse, scratch.bytes, scratch.len, AG_E_FORMAT,
                         "storage of 12 bytes") == 0);

    legacy_file(&scratch, &(fake_tensor){"w", 1, 5, {2}, {1}, {0, 0}}, 6);
    CHECK(expect_refusal(ag_pytorch_parse, scratch.bytes, scratch.len, AG_E_FORMAT,
                         "reach past its storage of 24 bytes") == 0);
    legacy_file(&scratch, &(fake_tensor){"w", 2, 0, {3, 2}, {2, 3}, {0, 0}}, 6);
    CHECK(expect_refusal(ag_pytorch_parse, scratch.bytes, scratch.len, AG_E_FORMAT, "reach past") ==
          0);
    legacy_file(&scratch, &(fake_tensor){"w", 1, 0, {2}, {-1}, {0, 0}}, 6);
    CHECK(expect_refusal(ag_pytorch_parse, scratch.bytes, scratch.len, AG_E_FORMAT,
                         "not a non-negative int") == 0);
    /* A 5th axis only as a leading 1 (StyleGAN2's modulated conv weights), which is dropped. */
    legacy_file(&scratch, &(fake_tensor){"w", 5, 0, {2, 1, 1, 1, 1}, {1, 1, 1, 1, 1}, {0, 0}}, 6);
    CHECK(expect_refusal(ag_pytorch_parse, scratch.bytes, scratch.len, AG_E_UNSUPPORTED,
                         "5 dimensions") == 0);
    /* An expanded tensor far larger than its storage must not be gathered. */
    legacy_file(&scratch, &(fake_tensor){"w", 2, 0, {1 << 30, 1 << 30}, {0, 0}, {0, 0}}, 6);
    CHECK(expect_refusal(ag_pytorch_parse, scratch.bytes, scratch.len, AG_E_LIMIT, "byte limit") ==
          0);
    char long_name[120];
    memset(long_name, 'x', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    legacy_file(&scratch, &(fake_tensor){long_name, 1, 0, {2}, {1}, {0, 0}}, 6);
    CHECK(expect_refusal(ag_pytorch_parse, scratch.bytes, scratch.len, AG_E_FORMAT,
                         "longer than 95 bytes") == 0);
    /* The data section ends early: the element count is checked against the file. */
    legacy_file(&scratch, &(fake_tensor){"w", 1, 0, {2}, {1}, {0, 0}}, 6);
    CHECK(expect_refusal(ag_pytorch_parse, scratch.bytes, scratch.len - 1, AG_E_FORMAT,
                         "runs past the end of the file") == 0);
    return 0;
}

/* A legacy file whose state_dict pickle is `body` (without PROTO and STOP). */
static void legacy_with(buf *b, const uint8_t *body, size_t len) {
    b->len = 0;
    legacy_head(b);
    op(b, 0x80), op(b, 2);
    put(b, body, len);
    op(b, '.');
    op(b, 0x80), op(b, 2), op(b, ']'), op(b, '.');
}

static int refuse_body(const char *body, size_t len, int code, const char *needle) {
    legacy_with(&scratch, (const uint8_t *)body, len);
    return expect_refusal(ag_pytorch_parse, scratch.bytes, scratch.len, code, needle);
}

#define REFUSE(body, code, needle) refuse_body(body, sizeof(body) - 1, code, needle)

LEAK_CHECKED(test_crafted_pickles) {
    CHECK(REFUSE("\xff", AG_E_FORMAT, "opcode 0xff at offset 2") == 0);
    CHECK(REFUSE("t", AG_E_FORMAT, "no MARK") == 0);
    CHECK(REFUSE("Na", AG_E_FORMAT, "stack underflow") == 0);
    CHECK(REFUSE("N(\x85", AG_E_FORMAT, "stack underflow") == 0);
    CHECK(REFUSE("]NNs", AG_E_FORMAT, "adds items to a Python list") == 0);
    CHECK(REFUSE("}NNNu", AG_E_FORMAT, "no MARK") == 0);
    CHECK(REFUSE("}(NNNu", AG_E_FORMAT, "odd number") == 0);
    CHECK(REFUSE("h\x07", AG_E_FORMAT, "memo key 7 was never stored") == 0);
    CHECK(REFUSE("Nr\xff\xff\xff\xff", AG_E_LIMIT, "memo key") == 0);
    CHECK(REFUSE("X\xff\xff\xff\x7f", AG_E_FORMAT, "truncated") == 0);
    CHECK(REFUSE("\x8a\x05\x01", AG_E_FORMAT, "truncated") == 0);
    CHECK(REFUSE("cos\nsystem\n", AG_E_UNSUPPORTED, "holds a Python class") == 0);
    CHECK(REFUSE("cos\nsystem\n)R", AG_E_UNSUPPORTED, "class 'os.system'") == 0);
    CHECK(REFUSE("\x8c\x02os\x8c\x06system\x93)\x81", AG_E_UNSUPPORTED, "class 'os.system'") == 0);
    CHECK(REFUSE("\x8c\x02osN\x93", AG_E_FORMAT, "STACK_GLOBAL needs two strings") == 0);
    CHECK(REFUSE("cbuiltins\neval", AG_E_FORMAT, "not terminated") == 0);
    CHECK(REFUSE("ccollections\nOrderedDict\n)\x85R", AG_E_FORMAT, "with arguments") == 0);
    CHECK(REFUSE("ctorch._utils\n_rebuild_tensor_v2\n)R", AG_E_FORMAT, "0 arguments") == 0);
    CHECK(REFUSE("ctorch._utils\n_rebuild_parameter\nN\x85R", AG_E_FORMAT, "without a tensor") ==
          0);
    CHECK(REFUSE("]", AG_E_UNSUPPORTED, "holds a Python list, not a state_dict") == 0);
    CHECK(REFUSE("NNb", AG_E_FORMAT, "BUILD on a Python None") == 0);
    CHECK(REFUSE("}\x8a\x02\xff\xffK\x01s", AG_E_FORMAT, "key is a Python int") == 0);
    CHECK(REFUSE("}\x8c\x01kNs", AG_E_UNSUPPORTED, "entry 'k' holds a Python None") == 0);
    CHECK(REFUSE("}\x8c\x01kG\x3f\xf0\x00\x00\x00\x00\x00\x00s", AG_E_UNSUPPORTED,
                 "entry 'k' holds a Python float") == 0);
    CHECK(REFUSE("NQ", AG_E_FORMAT, "persistent id") == 0);
    CHECK(REFUSE("\x80\x09", AG_E_UNSUPPORTED, "protocol 9") == 0);
    static char marks[70000];
    memset(marks, '(', sizeof marks);
    CHECK(refuse_body(marks, sizeof marks, AG_E_LIMIT, "open MARKs") == 0);

    /* One valid persistent id, turned into 4097 storages references. */
    static buf body;
    body.len = 0;
    op(&body, '('), op_str(&body, "storage"), op_global(&body, "torch", "FloatStorage");
    op_str(&body, "0"), op_str(&body, "cpu"), op_int(&body, 1), op(&body, 't'), op(&body, 'q');
    op(&body, 0);
    for (int i = 0; i < 4097; i++)
        op(&body, 'h'), op(&body, 0), op(&body, 'Q'), op(&body, '0');
    op(&body, '}');
    legacy_with(&scratch, body.bytes, body.len);
    CHECK(expect_refusal(ag_pytorch_parse, scratch.bytes, scratch.len, AG_E_LIMIT,
                         "more than 4096 persistent ids") == 0);

    /* BUILD on a dict (a state_dict's _metadata), DUP, POP_MARK and framing are accepted. */
    static const char fine[] = "}2(NN1\x95\x00\x00\x00\x00\x00\x00\x00\x00}\x94N0Nb0";
    legacy_with(&scratch, (const uint8_t *)fine, sizeof fine - 1);
    ag_tensor_set set = {0};
    ag_error err = {0};
    CHECK_OK(ag_pytorch_parse(scratch.bytes, scratch.len, "probe.bin", &set, &err), &err);
    CHECK(set.count == 0);
    ag_tensor_set_fini(&set);
    return 0;
}

LEAK_CHECKED(test_not_pytorch) {
    static const uint8_t text[] = "hello, world";
    CHECK(expect_refusal(ag_pytorch_parse, text, sizeof text, AG_E_FORMAT, "not a PyTorch file") ==
          0);
    CHECK(expect_refusal(ag_pytorch_parse, text, 0, AG_E_FORMAT, "not a PyTorch file") == 0);
    static const uint8_t dict_pickle[] = {0x80, 2, '}', '.'};
    CHECK(expect_refusal(ag_pytorch_parse, dict_pickle, sizeof dict_pickle, AG_E_FORMAT,
                         "no PyTorch magic number") == 0);
    static const uint8_t zip_head[] = {'P', 'K', 3, 4, 0, 0};
    CHECK(expect_refusal(ag_pytorch_parse, zip_head, sizeof zip_head, AG_E_FORMAT, "zip") == 0);
    return 0;
}

/* ---- safetensors ----------------------------------------------------------------------- */

/* An 8-byte header length, the JSON header and `data_len` data bytes. */
static void safetensors_file(buf *b, const char *header, const void *data, size_t data_len) {
    uint64_t n = strlen(header);
    b->len = 0;
    put(b, &n, 8);
    put(b, header, strlen(header));
    put(b, data, data_len);
}

LEAK_CHECKED(test_safetensors_round_trip) {
    float a[4] = {1.5f, -2, 0, 1e-3f};
    uint16_t h[3] = {0x3c00, 0xc000, 0x3800};
    uint8_t data[22];
    memcpy(data, a, 16);
    memcpy(data + 16, h, 6);
    safetensors_file(&scratch,
                     "{\"__metadata__\":{\"format\":\"pt\",\"style\":\"Hayao\"},"
                     "\"block.0.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],"
                     "\"data_offsets\":[0,16]},"
                     "\"b\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[16,22]},"
                     "\"s\":{\"dtype\":\"I8\",\"shape\":[],\"data_offsets\":[21,22]},"
                     "\"z\":{\"dtype\":\"BF16\",\"shape\":[0,4],\"data_offsets\":[22,22]}}   ",
                     data, sizeof data);
    ag_tensor_set set = {0};
    ag_error err = {0};
    CHECK_OK(ag_safetensors_parse(scratch.bytes, scratch.len, "m.safetensors", &set, &err), &err);
    CHECK(set.count == 4 && set.blob_count == 0);
    CHECK(strcmp(set.tensors[0].name, "block.0.weight") == 0);
    CHECK(expect_tensor(&set, "block.0.weight", AG_DTYPE_F32, 2, (int64_t[]){2, 2}, a, 16) == 0);
    CHECK(expect_tensor(&set, "b", AG_DTYPE_F16, 1, (int64_t[]){3}, h, 6) == 0);
    CHECK(expect_tensor(&set, "s", AG_DTYPE_I8, 0, NULL, data + 21, 1) == 0);
    CHECK(expect_tensor(&set, "z", AG_DTYPE_BF16, 2, (int64_t[]){0, 4}, NULL, 0) == 0);
    /* Tensors point into the buffer, not copies. */
    CHECK(ag_tensor_set_find(&set, "b")->data == scratch.bytes + scratch.len - 6);
    CHECK(strcmp(ag_tensor_set_meta_get(&set, "style"), "Hayao") == 0);
    CHECK(strcmp(ag_tensor_set_meta_get(&set, "format"), "pt") == 0);
    CHECK(ag_tensor_set_meta_get(&set, "licence") == NULL);
    ag_tensor_set_fini(&set);
    return 0;
}

/* tiny.safetensors: written by Python's json module, padded with spaces. */
LEAK_CHECKED(test_safetensors_file) {
    uint8_t *data = NULL;
    size_t size = 0;
    ag_tensor_set set = {0};
    ag_error err = {0};
    CHECK(read_fixture(FIXTURES "tiny.safetensors", &data, &size) == 0);
    CHECK_OK(ag_safetensors_parse(data, size, "tiny.safetensors", &set, &err), &err);
    CHECK(set.count == 5);
    CHECK(expect_tensor(&set, "block.0.weight", AG_DTYPE_F32, 2, (int64_t[]){2, 3},
                        (float[]){-2, -1, 0, 1, 2, 3}, 24) == 0);
    CHECK(expect_tensor(&set, "half", AG_DTYPE_F16, 1, (int64_t[]){3},
                        (uint16_t[]){0x3c00, 0xc000, 0x3800}, 6) == 0);
    CHECK(expect_tensor(&set, "bf16", AG_DTYPE_BF16, 1, (int64_t[]){2},
                        (uint16_t[]){0x3fc0, 0xc040}, 4) == 0);
    CHECK(expect_tensor(&set, "f64", AG_DTYPE_F64, 1, (int64_t[]){1}, (double[]){0.1}, 8) == 0);
    CHECK(expect_tensor(&set, "i8", AG_DTYPE_I8, 4, (int64_t[]){1, 1, 1, 2}, (int8_t[]){-5, 7},
                        2) == 0);
    CHECK(strcmp(ag_tensor_set_meta_get(&set, "style"), "Test") == 0);
    ag_tensor_set_fini(&set);
    ag_free(data);
    return 0;
}

static int refuse_header(const char *header, size_t data_len, int code, const char *needle) {
    static const uint8_t zeros[64];
    safetensors_file(&scratch, header, zeros, data_len);
    return expect_refusal(ag_safetensors_parse, scratch.bytes, scratch.len, code, needle);
}

LEAK_CHECKED(test_safetensors_corrupt) {
    CHECK(refuse_header("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,99]}}", 50,
                        AG_E_FORMAT, "'t': data_offsets [0, 99] outside the file (50 data") == 0);
    CHECK(refuse_header("{\"t\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
                        AG_E_FORMAT, "shape needs 12 bytes") == 0);
    CHECK(refuse_header("{\"t\":{\"dtype\":\"F32\",\"shape\":[4503599627370496,4503599627370496],"
                        "\"data_offsets\":[0,8]}}",
                        8, AG_E_FORMAT, "needs more than") == 0);
    CHECK(refuse_header("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8,
                        AG_E_FORMAT, "outside the file") == 0);
    CHECK(refuse_header("{\"t\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8,
                        AG_E_UNSUPPORTED, "tensor 't': dtype 'I64' is not supported") == 0);
    CHECK(refuse_header("{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],"
                        "\"data_offsets\":[0,4]}}",
                        8, AG_E_UNSUPPORTED, "5 dimensions") == 0);
    CHECK(refuse_header("{\"t\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 8,
                        AG_E_FORMAT, "shape entry 0") == 0);
    CHECK(refuse_header("{\"t\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 8,
                        AG_E_FORMAT, "shape entry 0") == 0);
    CHECK(refuse_header("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 8,
                        AG_E_FORMAT, "data_offsets") == 0);
    CHECK(refuse_header("{\"t\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 8, AG_E_FORMAT,
                        "no 'dtype'") == 0);
    CHECK(refuse_header("{\"t\":[1,2]}", 8, AG_E_FORMAT, "not a JSON object") == 0);
    CHECK(refuse_header("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                        "\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                        8, AG_E_FORMAT, "'t' appears twice") == 0);
    CHECK(refuse_header("{\"t\":{\"dtype\":\"F32\",", 8, AG_E_FORMAT, "not valid JSON") == 0);
    CHECK(refuse_header("[1,2]", 8, AG_E_FORMAT, "header is not a JSON object") == 0);
    CHECK(refuse_header("{\"__metadata__\":{\"n\":1}}", 0, AG_E_FORMAT,
                        "metadata 'n' is not a string") == 0);
    char name[200];
    snprintf(name, sizeof name,
             "{\"%0120d\":{\"dtype\":\"F32\",\"shape\":[1],"
             "\"data_offsets\":[0,4]}}",
             0);
    CHECK(refuse_header(name, 8, AG_E_FORMAT, "longer than 95 bytes") == 0);

    /* The header length itself. */
    uint8_t head[16] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    CHECK(expect_refusal(ag_safetensors_parse, head, 10, AG_E_FORMAT,
                         "header length 100 runs past the end of the file (size 10)") == 0);
    memset(head, 0xff, 8);
    CHECK(expect_refusal(ag_safetensors_parse, head, 10, AG_E_FORMAT, "runs past the end") == 0);
    CHECK(expect_refusal(ag_safetensors_parse, head, 5, AG_E_FORMAT, "too short") == 0);
    size_t big = ((size_t)17 << 20) + 8;
    uint8_t *huge = calloc(1, big);
    CHECK(huge);
    uint64_t n = big - 8;
    memcpy(huge, &n, 8);
    int rc = expect_refusal(ag_safetensors_parse, huge, big, AG_E_LIMIT, "byte limit");
    free(huge);
    CHECK(rc == 0);
    return 0;
}

/* ---- the tensor set -------------------------------------------------------------------- */

LEAK_CHECKED(test_tensor_set_bounds) {
    ag_tensor_set set = {0};
    ag_error err = {0};
    static const float one = 1;
    ag_tensor_ref ref = {.dtype = AG_DTYPE_F32, .ndim = 1, .shape = {1}, .data = &one, .nbytes = 4};
    for (int i = 0; i < 4096; i++) {
        snprintf(ref.name, sizeof ref.name, "t%d", i);
        CHECK_OK(ag_tensor_set_add(&set, &ref, &err), &err);
    }
    strcpy(ref.name, "one too many");
    CHECK(ag_tensor_set_add(&set, &ref, &err) == AG_E_LIMIT);
    CHECK(ag_tensor_set_find(&set, "t4095")->data == &one);
    CHECK(ag_tensor_set_find(&set, "t4096") == NULL);
    ag_tensor_set_fini(&set);
    CHECK(set.count == 0 && set.tensors == NULL);
    ag_tensor_set_fini(&set); /* twice is harmless */
    ag_tensor_set_fini(NULL);

    memset(ref.name, 'n', sizeof ref.name); /* no terminating NUL */
    CHECK(ag_tensor_set_add(&set, &ref, &err) == AG_E_FORMAT);
    strcpy(ref.name, "w");
    ref.nbytes = 8; /* does not match the shape */
    CHECK(ag_tensor_set_add(&set, &ref, &err) == AG_E_FORMAT);
    ref.nbytes = 4;
    ref.ndim = 5;
    CHECK(ag_tensor_set_add(&set, &ref, &err) == AG_E_UNSUPPORTED);

    char key[16];
    for (int i = 0; i < AG_META_MAX; i++) {
        snprintf(key, sizeof key, "k%d", i);
        CHECK_OK(ag_tensor_set_meta(&set, key, "v", &err), &err);
    }
    CHECK_OK(ag_tensor_set_meta(&set, "k3", "replaced", &err), &err);
    CHECK(strcmp(ag_tensor_set_meta_get(&set, "k3"), "replaced") == 0);
    CHECK(ag_tensor_set_meta(&set, "extra", "v", &err) == AG_E_LIMIT);

    void *blob = ag_malloc(100);
    CHECK_OK(ag_tensor_set_own(&set, blob, &err), &err);
    ag_tensor_set_fini(&set);

    CHECK(ag_dtype_size(AG_DTYPE_F32) == 4 && ag_dtype_size(AG_DTYPE_F16) == 2);
    CHECK(ag_dtype_size(AG_DTYPE_BF16) == 2 && ag_dtype_size(AG_DTYPE_F64) == 8);
    CHECK(ag_dtype_size(AG_DTYPE_I8) == 1);
    return 0;
}

TEST_MAIN(TEST(test_zip_state), TEST(test_legacy_state), TEST(test_zip_protocol4),
          TEST(test_legacy_protocol4), TEST(test_zip_deflate), TEST(test_legacy_points_into_file),
          TEST(test_module_prefix_zip), TEST(test_module_prefix_legacy), TEST(test_parameters_zip),
          TEST(test_refused_files), TEST(test_fuzz_regressions),
          TEST(test_random_zip_equals_legacy), TEST(test_crafted_tensors),
          TEST(test_crafted_pickles), TEST(test_not_pytorch), TEST(test_safetensors_round_trip),
          TEST(test_safetensors_file), TEST(test_safetensors_corrupt), TEST(test_tensor_set_bounds))
