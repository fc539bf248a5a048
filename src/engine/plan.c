/*
 * plan.c - the plan for one image size (ag_engine_prepare): every node's shape, each group's
 * geometry and bands, which conv overwrites its source as it goes (in place), the kernels of
 * the kinds (kinds.c), and one arena holding every activation at offsets from ag_arena_plan.
 */
#include "state.h"

#include "../util/util_internal.h"

#include <limits.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- geometry and sizes ---------------------------------------------------------------- */

static size_t y_bytes(const ag_engine *e, int gi) {
    ag_shape s = e->exec[gi].out;
    return (size_t)s.h * s.w * s.c * ag_engine_elem_bytes(e, gi);
}

static void plan_geometry(ag_engine *e) {
    const ag_graph *g = &e->model->graph;
    for (int gi = 0; gi < e->group_count; gi++) {
        const ag_group *gr = &e->groups[gi];
        const ag_node *head = &g->nodes[gr->head];
        ag_group_exec *x = &e->exec[gi];
        x->out = e->shapes[gr->head];
        x->in = e->shapes[head->src[0] >= 0 ? head->src[0] : gr->head]; /* const: none */
        x->run_cut = 0; /* cut_runs starts afresh for each size */
        x->hp = x->in.h + head->pad[0] + head->pad[1];
        x->wp = x->in.w + head->pad[2] + head->pad[3];
    }
}

int ag_engine_plan_add(ag_engine *e, size_t bytes, int first, int last) {
    AG_ASSERT(e->buffer_count < e->buffer_capacity);
    ag_arena_buffer b = {bytes, first, last, 0};
    e->buffers[e->buffer_count] = b;
    return e->buffer_count++;
}

/*
 * The rows of group gi's source that band b reads, [*lo, *hi]: its padded input rows, the
 * padding reflected or zero inside the map, and through an absorbed resize the bilinear
 * taps' rows, widened by one row on each side whatever the coordinate mode.
 */
static void band_source_rows(const ag_engine *e, int gi, int b, int *lo, int *hi) {
    const ag_node *head = ag_engine_head(e, gi);
    const ag_group_exec *x = &e->exec[gi];
    int first = ag_band_first_row(x, b);
    int u0 = first * head->stride - head->pad[0];
    int u1 = u0 + (x->band_rows - 1) * head->stride + head->k - 1;
    u0 = u0 < 0 ? 0 : u0; /* a reflected row lies inside the band's own rows */
    u1 = u1 > x->in.h - 1 ? x->in.h - 1 : u1;
    if (e->groups[gi].kind == AG_BAND_RESIZE) {
        long hs = e->exec[e->groups[gi].src].out.h, h = x->in.h;
        u0 = (int)((long)u0 * hs / h) - 1;
        u1 = (int)(((long)u1 + 1) * hs / h) + 1;
        u0 = u0 < 0 ? 0 : u0;
        u1 = u1 > (int)hs - 1 ? (int)hs - 1 : u1;
    }
    *lo = u0, *hi = u1;
}

/*
 * Where group gi's output may start relative to its source's (delta, in bytes) for it to
 * overwrite the source as it goes, in the band order given: no band may read a source row
 * that a band before it has written over. A band's source rows are copied into the band
 * buffer before its conv writes, so a band may overwrite its own. Top-down, the output
 * trails the source by the smallest such lag (a conv that reads faster than it writes:
 * same size or a stride 2); bottom-up, it leads it (an upsampling conv, which writes faster
 * than it reads: its top rows read source rows nobody needs any more by then).
 */
static long long in_place_delta(const ag_engine *e, int gi, int bottom_up) {
    const ag_group_exec *x = &e->exec[gi];
    long long ib = (long long)(y_bytes(e, gi - 1) / (size_t)e->exec[gi - 1].out.h);
    long long ob = (long long)(y_bytes(e, gi) / (size_t)x->out.h);
    long long delta = bottom_up ? LLONG_MIN : LLONG_MAX;
    long long written_lo = LLONG_MAX, written_hi = LLONG_MIN; /* rows * ob, before delta */
    for (int i = 0; i < x->bands; i++) {
        int b = ag_band_in_order(x->bands, i, bottom_up), lo, hi;
        band_source_rows(e, gi, b, &lo, &hi);
        if (i > 0 && !bottom_up && lo * ib - written_hi < delta) /* delta + written <= read */
            delta = lo * ib - written_hi;
        if (i > 0 && bottom_up && (hi + 1) * ib - written_lo > delta) /* written >= read end */
            delta = (hi + 1) * ib - written_lo;
        int first = ag_band_first_row(x, b);
        written_lo = first * ob < written_lo ? first * ob : written_lo;
        written_hi =
            (first + x->band_rows) * ob > written_hi ? (first + x->band_rows) * ob : written_hi;
    }
    if (x->bands == 1)
        delta = 0;
    return bottom_up ? delta : (delta > 0 ? 0 : delta);
}

/* Bytes spanned by a source of `in` bytes at 0 and an output of `out` bytes at delta. */
static long long span_bytes(long long in, long long out, long long delta) {
    long long lo = delta < 0 ? delta : 0, hi = delta + out > in ? delta + out : in;
    return hi - lo;
}

/*
 * Whether group gi can overwrite its source (the group just before, read for the last time
 * here, band by band from its raw or resized map) and in which band order: the one whose
 * span is smaller, if smaller than two separate buffers. Sets *delta.
 */
static int in_place(ag_engine *e, int gi, long long *delta) {
    const ag_group *gr = &e->groups[gi];
    ag_group_exec *x = &e->exec[gi];
    x->bottom_up = 0;
    if (gi == 0 || gr->src != gi - 1 || !gr->banded || e->groups[gi - 1].last_use != gi ||
        gr->residual == gi - 1 || /* its chain, materialised after the step, reads the source */
        (gr->kind != AG_BAND_RAW && gr->kind != AG_BAND_RESIZE))
        return 0;
    long long in = (long long)y_bytes(e, gi - 1), out = (long long)y_bytes(e, gi);
    long long down = in_place_delta(e, gi, 0), up = in_place_delta(e, gi, 1);
    long long span_down = span_bytes(in, out, down), span_up = span_bytes(in, out, up);
    if ((span_down < span_up ? span_down : span_up) >= in + out)
        return 0;
    x->bottom_up = span_up < span_down;
    *delta = x->bottom_up ? up : down;
    return 1;
}

/* Group outputs: a run of convs each overwriting the one before shares one buffer. */
static void plan_outputs(ag_engine *e) {
    int n = e->group_count;
    for (int first = 0, last; first < n; first = last + 1) {
        long long lo = 0, hi = (long long)y_bytes(e, first), delta;
        int live_until = e->groups[first].last_use;
        ag_group_exec *x = e->exec;
        x[first].bottom_up = x[first].run_joined = 0;
        x[first].run_at = 0;
        for (last = first; last + 1 < n && !x[last + 1].run_cut && in_place(e, last + 1, &delta);
             last++) {
            long long at = x[last + 1].run_at = x[last].run_at + delta;
            long long end = at + (long long)y_bytes(e, last + 1);
            x[last + 1].run_joined = 1;
            lo = at < lo ? at : lo;
            hi = end > hi ? end : hi;
            live_until = e->groups[last + 1].last_use > live_until ? e->groups[last + 1].last_use
                                                                   : live_until;
        }
        int id = ag_engine_plan_add(e, (size_t)(hi - lo), first, live_until);
        for (int i = first; i <= last; i++) {
            x[i].buffer = id;
            x[i].offset = (size_t)(x[i].run_at - lo);
        }
    }
}

/* Bytes of one element of group gi's band: fp32, bf16, or u8 for an int8 conv. */
static size_t band_elem_bytes(const ag_engine *e, int gi) {
    return e->groups[gi].int8                                ? 1
           : ag_mode_bf16_maps(e) || e->groups[gi].bf16_band ? 2
                                                             : sizeof(float);
}

/* Rows per band for group gi: the band buffer stays near AG_BAND_BYTES. */
int ag_engine_band_rows_for(const ag_engine *e, int gi) {
    const ag_node *head = ag_engine_head(e, gi);
    const ag_group_exec *x = &e->exec[gi];
    size_t act = band_elem_bytes(e, gi);
    size_t in_row = (size_t)x->wp * x->in.c * act * (size_t)head->stride;
    /* The target is for fp32: bf16 bands keep the rows (the synchronisations) and halve
     * the bytes. int8 keeps its memory small: every band buffer (u8 in, fp32 in, a q8 conv's
     * fp32 out) holds a quarter of it, the rows of a u8 band at the fp32 target. */
    size_t target =
        ag_mode_int8_maps(e) ? e->band_bytes_target / 4 : e->band_bytes_target * act / 4;
    int rows = (int)(target / (in_row ? in_row : 1));
    size_t out_row = sizeof(float) * (size_t)x->out.w * x->out.c;
    if (e->groups[gi].q8 && (int)(target / out_row) < rows)
        rows = (int)(target / out_row);
    rows = rows < 4 ? 4 : rows;
    if (rows >= x->out.h)
        return x->out.h;
    /* Spread the rows evenly over the bands so the last one, moved up to end at the last
     * row, recomputes fewer rows than there are bands (not most of a band). */
    int bands = (x->out.h + rows - 1) / rows;
    return (x->out.h + bands - 1) / bands;
}

size_t ag_engine_band_input_bytes(const ag_engine *e, int gi, int rows) {
    const ag_node *head = ag_engine_head(e, gi);
    return (size_t)((rows - 1) * head->stride + head->k) * e->exec[gi].wp * e->exec[gi].in.c *
           band_elem_bytes(e, gi);
}

/* ---- the oneDNN plan ------------------------------------------------------------------- */

/* int8: the row pairs of the q8 maps, and the fp32 rows a q8 conv band or materialising
 * writes before they are quantised. */
static void plan_q8(ag_engine *e) {
    size_t tmp = 0;
    for (int gi = 0; gi < e->group_count; gi++) {
        ag_group_exec *x = &e->exec[gi];
        x->row_q_id = -1;
        if (!e->groups[gi].q8)
            continue;
        size_t row = sizeof(float) * (size_t)x->out.w * x->out.c;
        size_t band = row * (size_t)x->band_rows, rows = row * (size_t)e->threads;
        size_t pairs = sizeof(float) * 2 * (size_t)x->out.c * (size_t)x->out.h;
        x->row_q_id = ag_engine_plan_add(e, pairs, gi, e->groups[gi].last_use);
        tmp = band > tmp ? band : tmp;
        tmp = e->groups[gi].materialize && rows > tmp ? rows : tmp;
    }
    e->q8_tmp_id = tmp ? ag_engine_plan_add(e, tmp, 0, e->group_count) : -1;
}

/* int8: a min and a max per channel per thread for the statistics pass (ag_stats_rows). */
static size_t range_slots_bytes(const ag_engine *e) {
    int C = 1;
    for (int gi = 0; gi < e->group_count; gi++)
        C = e->exec[gi].out.c > C ? e->exec[gi].out.c : C;
    return sizeof(float) * 2 * (size_t)C * (size_t)e->threads;
}

/* The group outputs, the band, oneDNN's scratchpad, the statistics, resize taps, and the
 * scratch of LADE statistics and generic ops (only for graphs that have them). */
static void plan_onednn(ag_engine *e, size_t band, size_t scratch) {
    const ag_graph *g = &e->model->graph;
    int n = e->group_count;
    size_t taps = 0, generic = 0, lade = 0;
    int max_rows = 1;
    for (int gi = 0; gi < n; gi++) {
        const ag_group *gr = &e->groups[gi];
        const ag_group_exec *x = &e->exec[gi];
        if (gr->resize >= 0)
            taps += (size_t)x->in.h + x->in.w;
        if (ag_engine_head(e, gi)->op != AG_OP_CONV) {
            size_t s = ag_node_scratch_floats(ag_engine_head(e, gi), e->shapes, gr->head);
            generic = s > generic ? s : generic;
        }
        if (gr->norm >= 0 && g->nodes[gr->norm].op == AG_OP_LADE) {
            size_t s = 4096 * (size_t)x->out.c;
            lade = s > lade ? s : lade;
        }
        max_rows = x->out.h > max_rows ? x->out.h : max_rows;
    }
    e->partials_id = ag_engine_plan_add(e, 2 * (size_t)max_rows * sizeof(double), 0, n);
    e->pad_id = ag_engine_plan_add(e, sizeof(ag_resize_tap) * (taps ? taps : 1), 0, n);
    plan_outputs(e);
    e->band_id = ag_engine_plan_add(e, band, 0, n);
    e->scratch_id = ag_engine_plan_add(e, scratch, 0, n);
    e->band_u8_id = e->band_u8_bytes ? ag_engine_plan_add(e, e->band_u8_bytes, 0, n) : -1;
    e->range_id = ag_mode_int8_maps(e) ? ag_engine_plan_add(e, range_slots_bytes(e), 0, n) : -1;
    plan_q8(e);
    e->lade_id =
        lade || generic
            ? ag_engine_plan_add(e, sizeof(float) * (lade > generic ? lade : generic), 0, n)
            : -1;
}

/* Bytes times steps live, over every buffer: what a plan holds, not only at its peak. */
static double plan_area(const ag_engine *e) {
    double area = 0;
    for (int i = 0; i < e->buffer_count; i++)
        area +=
            (double)e->buffers[i].bytes * (e->buffers[i].last_step - e->buffers[i].first_step + 1);
    return area;
}

/*
 * A run of in-place groups holds its largest member's bytes from its first step to its
 * last: a run that shrinks (an encoder) or grows (an upsampling conv) may do better cut in
 * two. Toggle a cut at each member in turn and keep the toggle when the arena shrinks, or
 * stays and the plan holds less (which opens the way to cuts that need another first); a
 * few passes, as plans are cheap. Leaves the plan made with the cuts kept.
 */
static void cut_runs(ag_engine *e, size_t band, size_t scratch) {
    size_t best = ag_arena_plan(e->buffers, e->buffer_count);
    double best_area = plan_area(e);
    for (int pass = 0, changed = 1; pass < 4 && changed; pass++) {
        changed = 0;
        for (int gi = 1; gi < e->group_count; gi++) {
            ag_group_exec *x = &e->exec[gi];
            if (!x->run_joined && !x->run_cut)
                continue;
            x->run_cut = !x->run_cut;
            e->buffer_count = 0;
            plan_onednn(e, band, scratch);
            size_t bytes = ag_arena_plan(e->buffers, e->buffer_count);
            double area = plan_area(e);
            if (bytes < best || (bytes == best && area < best_area))
                best = bytes, best_area = area, changed = 1;
            else
                x->run_cut = !x->run_cut;
        }
    }
    e->buffer_count = 0;
    plan_onednn(e, band, scratch);
}

/* Resize taps, q8 row pairs and the kernels' buffers, cut from the arena once it exists. */
static void bind_onednn(ag_engine *e) {
    const ag_graph *g = &e->model->graph;
    ag_resize_tap *taps = ag_engine_buffer(e, e->pad_id);
    for (int gi = 0; gi < e->group_count; gi++) {
        ag_group_exec *x = &e->exec[gi];
        const ag_group *gr = &e->groups[gi];
        if (gr->resize < 0)
            continue;
        const ag_node *r = &g->nodes[gr->resize];
        ag_resize_mode mode = e->resize != AG_RESIZE_DEFAULT ? e->resize : r->mode;
        ag_shape src = e->exec[gr->src].out;
        x->row_taps = taps;
        x->col_taps = taps + x->in.h;
        if (r->op == AG_OP_NEAREST) {
            ag_nearest_taps(x->row_taps, src.h, x->in.h);
            ag_nearest_taps(x->col_taps, src.w, x->in.w);
        } else {
            ag_resize_taps(x->row_taps, src.h, x->in.h, mode);
            ag_resize_taps(x->col_taps, src.w, x->in.w, mode);
        }
        taps += x->in.h + x->in.w;
    }
    e->partials = ag_engine_buffer(e, e->partials_id);
    for (int gi = 0; gi < e->group_count; gi++)
        e->exec[gi].row_q = e->groups[gi].q8 ? ag_engine_buffer(e, e->exec[gi].row_q_id) : NULL;
    ag_engine_bind_kernels(e);
}

/* ---- prepare --------------------------------------------------------------------------- */

static int check_size(const ag_engine *e, int width, int height, ag_error *err) {
    int min = e->model->info.min_side > AG_MIN_SIDE ? e->model->info.min_side : AG_MIN_SIDE;
    if (width < min || height < min)
        return ag_error_set(err, AG_E_ARG,
                            "image is %dx%d; both sides must be at least %d pixels for model %s",
                            width, height, min, e->model->info.name);
    if ((size_t)width * height > AG_MAX_PIXELS)
        return ag_error_set(err, AG_E_LIMIT, "image is %dx%d; more than %d pixels", width, height,
                            AG_MAX_PIXELS);
    return AG_OK;
}

static int allocate_arena(ag_engine *e, size_t bytes, ag_error *err) {
    ag_free(e->arena_block);
    e->arena = e->arena_block = NULL;
    e->arena_bytes = 0;
    e->arena_block = ag_malloc(bytes + AG_ARENA_ALIGN);
    if (!e->arena_block)
        return ag_error_set(err, AG_E_NOMEM, "out of memory for a %zu MB activation arena",
                            bytes >> 20);
    e->arena = (uint8_t *)(((uintptr_t)e->arena_block + AG_ARENA_ALIGN - 1) &
                           ~(uintptr_t)(AG_ARENA_ALIGN - 1));
    e->arena_bytes = bytes;
    ag_advise_huge_pages(e->arena, bytes);
    return AG_OK;
}

int ag_engine_prepare(ag_engine *e, int width, int height, ag_error *err) {
    if (e->planned_w == width && e->planned_h == height)
        return AG_OK;
    const ag_graph *g = &e->model->graph;
    int rc = check_size(e, width, height, err);
    if (rc == AG_OK)
        rc = ag_graph_shapes(g, width, height, e->shapes, err);
    if (rc)
        return rc;

    e->planned_w = e->planned_h = 0;
    e->buffer_count = 0;
    omp_set_num_threads(e->threads);
    if (e->options.backend == AG_BACKEND_ONEDNN) {
        size_t band = 0, scratch = 0;
        plan_geometry(e);
        rc = ag_engine_create_kernels(e, &scratch, &band, err);
        if (rc)
            return rc;
        plan_onednn(e, band, scratch);
        cut_runs(e, band, scratch);
    } else {
        rc = ag_reference_plan(e, err);
        if (rc)
            return rc;
    }
    size_t arena_bytes = ag_arena_plan(e->buffers, e->buffer_count);
    if (getenv("AG_PLAN_DEBUG"))
        for (int i = 0; i < e->buffer_count; i++)
            if (e->buffers[i].bytes > (1u << 20))
                fprintf(stderr, "plan: buffer %d %zu MB steps %d-%d at %zu MB\n", i,
                        e->buffers[i].bytes >> 20, e->buffers[i].first_step,
                        e->buffers[i].last_step, e->buffers[i].offset >> 20);
    if (e->measure_only) {
        e->arena_bytes = arena_bytes;
        return AG_OK;
    }
    rc = allocate_arena(e, arena_bytes, err);
    if (rc)
        return rc;
    if (e->options.backend == AG_BACKEND_ONEDNN)
        bind_onednn(e);
    e->planned_w = width, e->planned_h = height;
    return AG_OK;
}
