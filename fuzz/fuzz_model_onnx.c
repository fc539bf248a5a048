/*
 * fuzz_model_onnx.c - libFuzzer target for ag_onnx_parse: the protobuf reader (onnx_pb.c)
 * and the importer (onnx_import.c) behind it. Build and run with fuzz/run.sh.
 */
#include "../src/graph/graph.h"
#include "../src/model/model_internal.h"

#include "oracle.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Tensor bytes are folded in here so the reads below cannot be optimised away. */
static volatile uint8_t sink;
static ag_graph graph;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t before = ag_allocated_bytes();
    ag_tensor_set set = {0};
    ag_error err = {0};
    int rc = ag_onnx_parse(data, size, "fuzz.onnx", &set, &graph, &err);
    AG_ASSERT(rc == AG_OK || (err.code == rc && strncmp(err.message, "fuzz.onnx: ", 11) == 0));
    AG_ASSERT(rc == AG_OK || (set.count == 0 && set.blob_count == 0 && graph.count == 1));
    if (rc == AG_OK) {
        /* The graph is well formed: inputs before use, tensors inside the set. */
        AG_ASSERT(graph.count >= 2 && graph.count <= AG_GRAPH_MAX_NODES);
        AG_ASSERT(graph.output_count >= 1);
        for (int i = 1; i < graph.count; i++) {
            const ag_node *n = &graph.nodes[i];
            AG_ASSERT(n->src[0] >= 0);
            for (int k = 0; k < AG_NODE_MAX_SRC; k++)
                AG_ASSERT(n->src[k] < i);
            for (int t = 0; t < AG_NODE_TENSORS; t++)
                AG_ASSERT(n->tensor[t] >= -1 && n->tensor[t] < set.count);
        }
    }
    if (rc == AG_OK)
        fuzz_check_model(&set, &graph, "fuzz.onnx");
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
