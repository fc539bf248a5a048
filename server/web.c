/*
 * web.c - the web page, served from bytes embedded at build time (server/web.mk turns
 * the files of server/web/ into $(BUILD)/gen/web_assets.c). Lookup is an exact match against that
 * table: there is no file system path to traverse, so "/../etc/passwd" is just a 404.
 */
#include "server.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define MAX_ASSETS 32

static char etags[MAX_ASSETS][24];
static pthread_once_t etags_once = PTHREAD_ONCE_INIT;

/* FNV-1a 64 of each asset: stable across builds of the same bytes, so browsers revalidate
 * with If-None-Match and get 304 until the page changes. */
static void compute_etags(void) {
    for (int i = 0; i < ag_web_asset_count && i < MAX_ASSETS; i++) {
        uint64_t h = 0xcbf29ce484222325ULL;
        for (size_t j = 0; j < ag_web_assets[i].size; j++) {
            h ^= ag_web_assets[i].data[j];
            h *= 0x100000001b3ULL;
        }
        snprintf(etags[i], sizeof etags[i], "\"%016llx\"", (unsigned long long)h);
    }
}

const ag_web_asset *ag_web_find(const char *path) {
    for (int i = 0; i < ag_web_asset_count; i++)
        if (!strcmp(path, ag_web_assets[i].path))
            return &ag_web_assets[i];
    return NULL;
}

const char *ag_web_etag(const ag_web_asset *asset) {
    pthread_once(&etags_once, compute_etags);
    long i = asset - ag_web_assets;
    return i >= 0 && i < MAX_ASSETS ? etags[i] : "\"0\"";
}
