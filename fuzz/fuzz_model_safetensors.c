/*
 * fuzz_model_safetensors.c - libFuzzer target for ag_safetensors_parse (header length, JSON
 * header, offsets). Build and run with fuzz/run.sh.
 */
#include "../src/model/model_internal.h"

#include "oracle.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Tensor bytes are folded in here so the reads below cannot be optimised away. */
static volatile uint8_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t before = ag_allocated_bytes();
    ag_tensor_set set = {0};
    ag_error err = {0};
    int rc = ag_safetensors_parse(data, size, "fuzz.safetensors", &set, &err);
    AG_ASSERT(rc == AG_OK ||
              (err.code == rc && strncmp(err.message, "fuzz.safetensors: ", 18) == 0));
    AG_ASSERT(rc == AG_OK || set.count == 0);
    if (rc == AG_OK)
        fuzz_check_model(&set, NULL, "fuzz.safetensors");
    /* Read every tensor byte so that ASan checks each one lies in memory we may read. */
    for (int i = 0; i < set.count; i++) {
        const uint8_t *bytes = set.tensors[i].data;
        for (size_t j = 0; j < set.tensors[i].nbytes; j++)
            sink ^= bytes[j];
    }
    ag_tensor_set_fini(&set);
    AG_ASSERT(ag_allocated_bytes() == before);
    return 0;
}
