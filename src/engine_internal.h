/*
 * engine_internal.h - what the rest of src/ (the pipeline steps: stylize, upscale, restore,
 * the face networks) and the tests use of the engine beyond the public API: its state
 * (src/engine/state.h), ag_engine_run_io and ag_engine_run_raw.
 */
#ifndef AG_ENGINE_INTERNAL_H
#define AG_ENGINE_INTERNAL_H

#include "engine/state.h"

#endif
