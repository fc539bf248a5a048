/*
 * fuse_cache.c - the faces of the images POST /api/v1/fuse has seen, per client, so that
 * moving the page's ratio slider (which posts the same two images again with another
 * ratio) only re-blends: the detector and FaceMesh run once per uploaded image, then each
 * fusion is a decode and the blend.
 *
 * An entry is keyed by the client's address and a 128-bit SipHash (two keys drawn at
 * start-up) of the image's bytes plus their length, and holds the first
 * AG_FUSE_CACHE_FACES faces found (and how many there were). Client and content are both in
 * the key, so one client's landmarks are never served to another, and a guessed hash finds
 * nothing of anyone else's. Bounds: --fuse-cache-entries in all (the table is allocated
 * once at start-up: in the memory bound's cache term), --fuse-cache-per-client per address
 * (a client over it loses its own least recently used entry, not other clients'), and
 * --fuse-cache-ttl seconds since last use. Lookups scan the table (a few hundred entries:
 * microseconds) under one mutex; nothing is allocated per request.
 */
#include "server.h"

#include <stdio.h>
#include <string.h>
#include <sys/random.h>

typedef struct fuse_entry {
    int live;
    uint64_t hash[2];
    size_t size;
    char client[AG_FUSE_CLIENT_BYTES];
    uint64_t used_us;
    int found;  /* faces the detector found */
    int stored; /* of them kept: min(found, AG_FUSE_CACHE_FACES) */
    ag_face faces[AG_FUSE_CACHE_FACES];
} fuse_entry;

struct ag_fuse_cache {
    pthread_mutex_t lock;
    uint8_t key[2][16];
    fuse_entry *entries;
    int capacity, per_client;
    uint64_t ttl_us;
    ag_metrics *metrics;
};

size_t ag_fuse_cache_bytes(int capacity) {
    return sizeof(ag_fuse_cache) + (size_t)capacity * sizeof(fuse_entry);
}

int ag_fuse_cache_create(int capacity, int per_client, double ttl_s, ag_metrics *metrics,
                         ag_fuse_cache **out) {
    *out = NULL;
    if (capacity <= 0)
        return 0;
    ag_fuse_cache *c = ag_calloc(1, sizeof *c);
    fuse_entry *e = ag_calloc((size_t)capacity, sizeof *e);
    if (!c || !e || getrandom(c->key, sizeof c->key, 0) != (ssize_t)sizeof c->key) {
        ag_free(c);
        ag_free(e);
        return -1;
    }
    pthread_mutex_init(&c->lock, NULL);
    c->entries = e;
    c->capacity = capacity;
    c->per_client = per_client > 0 ? per_client : 1;
    c->ttl_us = (uint64_t)(ttl_s * 1e6);
    c->metrics = metrics;
    *out = c;
    return 0;
}

void ag_fuse_cache_destroy(ag_fuse_cache *c) {
    if (!c)
        return;
    pthread_mutex_destroy(&c->lock);
    ag_free(c->entries);
    ag_free(c);
}

static int expired(const ag_fuse_cache *c, const fuse_entry *e, uint64_t now) {
    return c->ttl_us && now - e->used_us > c->ttl_us;
}

static int matches(const fuse_entry *e, const char *client, const uint64_t hash[2], size_t size) {
    return e->live && e->size == size && e->hash[0] == hash[0] && e->hash[1] == hash[1] &&
           !strcmp(e->client, client);
}

static void drop(ag_fuse_cache *c, fuse_entry *e) {
    e->live = 0;
    atomic_fetch_add(&c->metrics->fuse_cache_evictions, 1);
    atomic_fetch_sub(&c->metrics->fuse_cache_entries, 1);
}

int ag_fuse_cache_get(ag_fuse_cache *c, const char *client, const void *data, size_t size, int want,
                      ag_face *faces, int *found) {
    if (!c)
        return 0;
    uint64_t hash[2] = {ag_siphash24(c->key[0], data, size), ag_siphash24(c->key[1], data, size)};
    uint64_t now = ag_now_us();
    int hit = 0;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->capacity && !hit; i++) {
        fuse_entry *e = &c->entries[i];
        if (!matches(e, client, hash, size))
            continue;
        if (expired(c, e, now)) {
            drop(c, e);
            break;
        }
        /* The face asked for is kept, or it is known that there is none. */
        if (want <= e->stored || e->found < want) {
            memcpy(faces, e->faces, sizeof *faces * (size_t)e->stored);
            *found = e->found;
            e->used_us = now;
            hit = 1;
        }
    }
    pthread_mutex_unlock(&c->lock);
    atomic_fetch_add(hit ? &c->metrics->fuse_cache_hits : &c->metrics->fuse_cache_misses, 1);
    return hit;
}

/* The slot for a new entry of `client`: a free or expired one while the client is under its
 * share, else its own least recently used; when the table is full, the least recently used
 * of all. */
static fuse_entry *slot_for(ag_fuse_cache *c, const char *client, uint64_t now) {
    fuse_entry *free_slot = NULL, *oldest = NULL, *oldest_own = NULL;
    int own = 0;
    for (int i = 0; i < c->capacity; i++) {
        fuse_entry *e = &c->entries[i];
        if (e->live && expired(c, e, now))
            drop(c, e);
        if (!e->live) {
            free_slot = free_slot ? free_slot : e;
            continue;
        }
        if (!oldest || e->used_us < oldest->used_us)
            oldest = e;
        if (!strcmp(e->client, client)) {
            own++;
            if (!oldest_own || e->used_us < oldest_own->used_us)
                oldest_own = e;
        }
    }
    fuse_entry *e = own >= c->per_client ? oldest_own : free_slot ? free_slot : oldest;
    if (e->live)
        drop(c, e);
    return e;
}

void ag_fuse_cache_put(ag_fuse_cache *c, const char *client, const void *data, size_t size,
                       const ag_face *faces, int found) {
    if (!c)
        return;
    uint64_t hash[2] = {ag_siphash24(c->key[0], data, size), ag_siphash24(c->key[1], data, size)};
    uint64_t now = ag_now_us();
    pthread_mutex_lock(&c->lock);
    fuse_entry *e = NULL;
    for (int i = 0; i < c->capacity && !e; i++)
        if (matches(&c->entries[i], client, hash, size))
            e = &c->entries[i]; /* a face beyond the kept ones was asked for: refreshed */
    if (!e) {
        e = slot_for(c, client, now);
        atomic_fetch_add(&c->metrics->fuse_cache_entries, 1);
    }
    e->live = 1;
    e->hash[0] = hash[0], e->hash[1] = hash[1];
    e->size = size;
    snprintf(e->client, sizeof e->client, "%s", client);
    e->used_us = now;
    e->found = found;
    e->stored = found < AG_FUSE_CACHE_FACES ? found : AG_FUSE_CACHE_FACES;
    memcpy(e->faces, faces, sizeof *faces * (size_t)e->stored);
    pthread_mutex_unlock(&c->lock);
}
