/*
 * queue.c - the bounded FIFO between the HTTP thread and the workers: a ring of (item,
 * deadline) under one mutex, sized once at start-up. Admission control happens before a
 * request ever gets here, so a push never finds it full; expiry (504) and shutdown
 * (cancel) take entries out from the middle, which is why it is a ring we can compact.
 */
#include "server.h"

#include <string.h>

int ag_queue_init(ag_queue *q, int capacity) {
    memset(q, 0, sizeof *q);
    if (capacity < 1)
        capacity = 1;
    q->ring = ag_calloc((size_t)capacity, sizeof *q->ring);
    if (!q->ring)
        return -1;
    q->capacity = capacity;
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->nonempty, NULL);
    return 0;
}

void ag_queue_fini(ag_queue *q) {
    if (!q->ring)
        return;
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->nonempty);
    ag_free(q->ring);
    q->ring = NULL;
}

static int push(ag_queue *q, void *item, uint64_t deadline_us, int kind) {
    pthread_mutex_lock(&q->lock);
    if (q->closed || q->count == q->capacity) {
        pthread_mutex_unlock(&q->lock);
        return -1;
    }
    ag_queue_entry *e = &q->ring[(q->head + q->count) % q->capacity];
    e->item = item;
    e->deadline_us = deadline_us;
    e->kind = kind;
    q->count++;
    pthread_cond_signal(&q->nonempty);
    pthread_mutex_unlock(&q->lock);
    return 0;
}

int ag_queue_push(ag_queue *q, void *item, uint64_t deadline_us) {
    return push(q, item, deadline_us, AG_QUEUE_REQUEST);
}

int ag_queue_push_frame(ag_queue *q, void *task) {
    return push(q, task, UINT64_MAX, AG_QUEUE_FRAME);
}

void *ag_queue_pop(ag_queue *q, uint64_t *deadline_us) {
    return ag_queue_pop_kind(q, deadline_us, NULL);
}

void *ag_queue_pop_kind(ag_queue *q, uint64_t *deadline_us, int *kind) {
    void *item = NULL;
    pthread_mutex_lock(&q->lock);
    while (q->count == 0 && !q->closed)
        pthread_cond_wait(&q->nonempty, &q->lock);
    if (q->count > 0) {
        ag_queue_entry *e = &q->ring[q->head];
        item = e->item;
        if (deadline_us)
            *deadline_us = e->deadline_us;
        if (kind)
            *kind = e->kind;
        q->head = (q->head + 1) % q->capacity;
        q->count--;
    }
    pthread_mutex_unlock(&q->lock);
    return item;
}

void *ag_queue_pop_request_if(ag_queue *q, int (*take)(const void *item), uint64_t *deadline_us) {
    void *item = NULL;
    pthread_mutex_lock(&q->lock);
    ag_queue_entry *e = q->count > 0 ? &q->ring[q->head] : NULL;
    if (e && e->kind == AG_QUEUE_REQUEST && take(e->item)) {
        item = e->item;
        *deadline_us = e->deadline_us;
        q->head = (q->head + 1) % q->capacity;
        q->count--;
    }
    pthread_mutex_unlock(&q->lock);
    return item;
}

/* Keep the entries for which keep() is true, in order; move the others to out (up to max;
 * entries beyond max stay). Called with the lock held. */
static int compact(ag_queue *q, int (*keep)(const ag_queue_entry *e, uint64_t now), uint64_t now,
                   void **out, int max) {
    int kept = 0, taken = 0;
    for (int i = 0; i < q->count; i++) {
        ag_queue_entry e = q->ring[(q->head + i) % q->capacity];
        /* A job's frame is no request: it never expires, and its runner waits for it. */
        if (taken < max && e.kind == AG_QUEUE_REQUEST && !keep(&e, now))
            out[taken++] = e.item;
        else
            q->ring[(q->head + kept++) % q->capacity] = e;
    }
    q->count = kept;
    return taken;
}

static int keep_unexpired(const ag_queue_entry *e, uint64_t now) {
    return e->deadline_us > now;
}
static int keep_none(const ag_queue_entry *e, uint64_t now) {
    (void)e;
    (void)now;
    return 0;
}

int ag_queue_take_expired(ag_queue *q, uint64_t now_us, void **out, int max) {
    pthread_mutex_lock(&q->lock);
    int n = compact(q, keep_unexpired, now_us, out, max);
    pthread_mutex_unlock(&q->lock);
    return n;
}

int ag_queue_take_all(ag_queue *q, void **out, int max) {
    pthread_mutex_lock(&q->lock);
    int n = compact(q, keep_none, 0, out, max);
    pthread_mutex_unlock(&q->lock);
    return n;
}

void ag_queue_close(ag_queue *q) {
    pthread_mutex_lock(&q->lock);
    q->closed = 1;
    pthread_cond_broadcast(&q->nonempty);
    pthread_mutex_unlock(&q->lock);
}

int ag_queue_depth(ag_queue *q) {
    pthread_mutex_lock(&q->lock);
    int n = q->count;
    pthread_mutex_unlock(&q->lock);
    return n;
}

int ag_queue_position(ag_queue *q, int (*match)(const void *item, const void *arg),
                      const void *arg) {
    int pos = 0;
    pthread_mutex_lock(&q->lock);
    for (int i = 0; i < q->count; i++) {
        const ag_queue_entry *e = &q->ring[(q->head + i) % q->capacity];
        if (e->kind == AG_QUEUE_REQUEST && match(e->item, arg)) {
            pos = i + 1;
            break;
        }
    }
    pthread_mutex_unlock(&q->lock);
    return pos;
}

int ag_queue_remove(ag_queue *q, const void *item) {
    int removed = 0;
    pthread_mutex_lock(&q->lock);
    for (int i = 0, kept = 0; i < q->count; i++) {
        ag_queue_entry e = q->ring[(q->head + i) % q->capacity];
        if (!removed && e.item == item)
            removed = 1;
        else
            q->ring[(q->head + kept++) % q->capacity] = e;
    }
    q->count -= removed;
    pthread_mutex_unlock(&q->lock);
    return removed;
}
