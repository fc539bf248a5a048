/*
 * cache.c - optional LRU cache of encoded results (--cache-mb), bounded in bytes: every
 * entry counts its header plus its bytes, and inserting evicts from the cold end until the
 * total fits. The key is a keyed SipHash-2-4 of the input bytes (random key per process, so
 * nobody can craft a collision with someone else's photo) plus a hash of the model name and
 * options, and the input size. Hits copy the bytes out, so an entry is never referenced by a
 * response that MHD is still sending and eviction needs no reference counts.
 */
#include "server.h"

#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

typedef struct cache_entry {
    ag_cache_key key;
    struct cache_entry *chain;       /* hash bucket list */
    struct cache_entry *prev, *next; /* LRU list: head is the most recently used */
    size_t size;
    int width, height;
    uint8_t data[]; /* (size) */
} cache_entry;

struct ag_cache {
    pthread_mutex_t lock;
    uint8_t key[16];
    cache_entry **buckets;
    size_t bucket_count; /* power of two */
    cache_entry *head, *tail;
    size_t bytes, capacity;
    int entries;
    uint64_t hits, misses, insertions, evictions;
};

/* ---- SipHash-2-4 (Aumasson and Bernstein), 64-bit output -------------------------------- */

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                   \
    do {                                                                                           \
        v0 += v1;                                                                                  \
        v1 = ROTL(v1, 13);                                                                         \
        v1 ^= v0;                                                                                  \
        v0 = ROTL(v0, 32);                                                                         \
        v2 += v3;                                                                                  \
        v3 = ROTL(v3, 16);                                                                         \
        v3 ^= v2;                                                                                  \
        v0 += v3;                                                                                  \
        v3 = ROTL(v3, 21);                                                                         \
        v3 ^= v0;                                                                                  \
        v2 += v1;                                                                                  \
        v1 = ROTL(v1, 17);                                                                         \
        v1 ^= v2;                                                                                  \
        v2 = ROTL(v2, 32);                                                                         \
    } while (0)

static uint64_t load_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

uint64_t ag_siphash24(const uint8_t key[16], const void *data, size_t size) {
    const uint8_t *in = data;
    uint64_t k0 = load_le64(key), k1 = load_le64(key + 8);
    uint64_t v0 = 0x736f6d6570736575ULL ^ k0, v1 = 0x646f72616e646f6dULL ^ k1;
    uint64_t v2 = 0x6c7967656e657261ULL ^ k0, v3 = 0x7465646279746573ULL ^ k1;
    size_t blocks = size / 8;
    for (size_t i = 0; i < blocks; i++) {
        uint64_t m = load_le64(in + 8 * i);
        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t b = (uint64_t)size << 56;
    const uint8_t *tail = in + 8 * blocks;
    for (size_t i = 0; i < (size & 7); i++)
        b |= (uint64_t)tail[i] << (8 * i);
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

/* ---- the cache ------------------------------------------------------------------------- */

int ag_cache_create(size_t capacity_bytes, ag_cache **out) {
    *out = NULL;
    if (capacity_bytes == 0)
        return 0;
    ag_cache *c = ag_calloc(1, sizeof *c);
    if (!c)
        return AG_E_NOMEM;
    /* About one bucket per 64 KiB of capacity (results are tens of KiB to MiB). */
    size_t n = 64;
    while (n < capacity_bytes / 65536 && n < ((size_t)1 << 20))
        n <<= 1;
    c->buckets = ag_calloc(n, sizeof *c->buckets);
    if (!c->buckets) {
        ag_free(c);
        return AG_E_NOMEM;
    }
    c->bucket_count = n;
    size_t table = n * sizeof *c->buckets + sizeof *c;
    c->capacity = capacity_bytes > table ? capacity_bytes - table : 0;
    if (getrandom(c->key, sizeof c->key, 0) != (ssize_t)sizeof c->key) {
        /* Fall back to time and address entropy; collisions stay improbable, just not
         * adversarially hard. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t a = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30), b = (uintptr_t)c;
        memcpy(c->key, &a, 8);
        memcpy(c->key + 8, &b, 8);
    }
    pthread_mutex_init(&c->lock, NULL);
    *out = c;
    return 0;
}

void ag_cache_destroy(ag_cache *c) {
    if (!c)
        return;
    cache_entry *e = c->head;
    while (e) {
        cache_entry *next = e->next;
        ag_free(e);
        e = next;
    }
    pthread_mutex_destroy(&c->lock);
    ag_free(c->buckets);
    ag_free(c);
}

void ag_cache_key_make(const ag_cache *c, const void *data, size_t size, const char *model,
                       const ag_convert_options *o, ag_cache_key *key) {
    char opts[160];
    int n =
        snprintf(opts, sizeof opts, "%s|p%d|s%d|m%d|f%d|q%d", model, o->portrait, o->side_by_side,
                 o->max_side, (int)o->format, o->format == AG_FORMAT_PNG ? 0 : o->quality);
    if (n < 0 || (size_t)n >= sizeof opts)
        n = (int)sizeof opts - 1;
    key->hash[0] = ag_siphash24(c->key, data, size);
    key->hash[1] = ag_siphash24(c->key, opts, (size_t)n);
    key->input_size = size;
}

static size_t bucket_of(const ag_cache *c, const ag_cache_key *k) {
    return (size_t)(k->hash[0] ^ (k->hash[1] * 0x9e3779b97f4a7c15ULL)) & (c->bucket_count - 1);
}

static int key_equal(const ag_cache_key *a, const ag_cache_key *b) {
    return a->hash[0] == b->hash[0] && a->hash[1] == b->hash[1] && a->input_size == b->input_size;
}

static void lru_unlink(ag_cache *c, cache_entry *e) {
    if (e->prev)
        e->prev->next = e->next;
    else
        c->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void lru_push_front(ag_cache *c, cache_entry *e) {
    e->prev = NULL;
    e->next = c->head;
    if (c->head)
        c->head->prev = e;
    c->head = e;
    if (!c->tail)
        c->tail = e;
}

static cache_entry *lookup(ag_cache *c, const ag_cache_key *key) {
    for (cache_entry *e = c->buckets[bucket_of(c, key)]; e; e = e->chain)
        if (key_equal(&e->key, key))
            return e;
    return NULL;
}

static void remove_entry(ag_cache *c, cache_entry *e) {
    cache_entry **pp = &c->buckets[bucket_of(c, &e->key)];
    while (*pp != e)
        pp = &(*pp)->chain;
    *pp = e->chain;
    lru_unlink(c, e);
    c->bytes -= sizeof *e + e->size;
    c->entries--;
    ag_free(e);
}

int ag_cache_get(ag_cache *c, const ag_cache_key *key, uint8_t **data, size_t *size, int *width,
                 int *height) {
    int rc = 0;
    pthread_mutex_lock(&c->lock);
    cache_entry *e = lookup(c, key);
    if (e) {
        uint8_t *copy = ag_malloc(e->size);
        if (copy) {
            memcpy(copy, e->data, e->size);
            *data = copy;
            *size = e->size;
            *width = e->width;
            *height = e->height;
            lru_unlink(c, e);
            lru_push_front(c, e);
            c->hits++;
            rc = 1;
        } else {
            c->misses++;
            rc = -1;
        }
    } else {
        c->misses++;
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

void ag_cache_put(ag_cache *c, const ag_cache_key *key, const uint8_t *data, size_t size, int width,
                  int height) {
    size_t need = sizeof(cache_entry) + size;
    /* One entry may take at most a quarter of the cache, so a few huge results cannot
     * flush everything else. */
    if (size > c->capacity / 4 || need > c->capacity)
        return;
    /* Copy outside the lock; the entry is private until linked. */
    cache_entry *n = ag_malloc(need);
    if (!n)
        return;
    n->key = *key;
    n->chain = n->prev = n->next = NULL;
    n->size = size;
    n->width = width;
    n->height = height;
    memcpy(n->data, data, size);
    pthread_mutex_lock(&c->lock);
    cache_entry *old = lookup(c, key);
    if (old)
        remove_entry(c, old);
    while (c->bytes + need > c->capacity && c->tail) {
        remove_entry(c, c->tail);
        c->evictions++;
    }
    size_t b = bucket_of(c, key);
    n->chain = c->buckets[b];
    c->buckets[b] = n;
    lru_push_front(c, n);
    c->bytes += need;
    c->entries++;
    c->insertions++;
    pthread_mutex_unlock(&c->lock);
}

void ag_cache_get_stats(ag_cache *c, ag_cache_stats *s) {
    memset(s, 0, sizeof *s);
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    s->hits = c->hits;
    s->misses = c->misses;
    s->insertions = c->insertions;
    s->evictions = c->evictions;
    s->bytes = c->bytes;
    s->capacity_bytes = c->capacity;
    s->entries = c->entries;
    pthread_mutex_unlock(&c->lock);
}
