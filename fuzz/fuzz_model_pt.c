/*
 * fuzz_model_pt.c - libFuzzer target for ag_pytorch_parse (zip and legacy torch.save files,
 * the pickle reader). Build and run with fuzz/run.sh.
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
    int rc = ag_pytorch_parse(data, size, "fuzz.pt", &set, &err);
    AG_ASSERT(rc == AG_OK || (err.code == rc && strncmp(err.message, "fuzz.pt: ", 9) == 0));
    AG_ASSERT(rc == AG_OK || set.count == 0);
    if (rc == AG_OK)
        fuzz_check_model(&set, NULL, "fuzz.pt");
    /* Read every tensor byte so that ASan checks each one lies in memory we may read; views
     * through their strides, as the model builder gathers them (those under 16 MiB). */
    for (int i = 0; i < set.count; i++) {
        const ag_tensor_ref *t = &set.tensors[i];
        const void *elements;
        void *tmp;
        if (t->nbytes > ((size_t)16 << 20) ||
            ag_tensor_ref_elements(t, &elements, &tmp, &err) != AG_OK)
            continue;
        for (size_t j = 0; j < t->nbytes; j++)
            sink ^= ((const uint8_t *)elements)[j];
        ag_free(tmp);
    }
    ag_tensor_set_fini(&set);
    AG_ASSERT(ag_allocated_bytes() == before);
    return 0;
}
