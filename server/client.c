/*
 * client.c - who a request is from. Per-client bounds (the fusion face cache, the video
 * jobs' turns) key on it. Behind a reverse proxy every connection comes from the proxy, so
 * for the peers named by --trusted-proxy the client is what they appended to
 * X-Forwarded-For: its rightmost entry that is not itself a trusted proxy (entries further
 * left were written by the client and prove nothing). Anyone else's X-Forwarded-For is
 * ignored, so a client cannot pick its own identity. An IPv6 client is its /64 (the prefix
 * --client-ipv6-prefix), as one host is given a whole /64 of addresses.
 */
#include "server.h"

#include <microhttpd.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

typedef struct last_header {
    const char *value;
} last_header;

static enum MHD_Result keep_forwarded(void *cls, enum MHD_ValueKind kind, const char *key,
                                      const char *value) {
    (void)kind;
    if (!strcasecmp(key, "X-Forwarded-For"))
        ((last_header *)cls)->value = value; /* the last one: the nearest proxy's */
    return MHD_YES;
}

void ag_request_client(ag_server *s, struct MHD_Connection *conn, int fd,
                       char out[AG_CLIENT_BYTES]) {
    char peer[AG_CLIENT_BYTES];
    if (ag_gate_peer(s, fd, peer, sizeof peer) != 0 || !ag_client_address(peer, strlen(peer), out))
        snprintf(out, AG_CLIENT_BYTES, "?");
    if (ag_trusted_proxy(&s->config, out)) {
        last_header h = {NULL};
        MHD_get_connection_values(conn, MHD_HEADER_KIND, keep_forwarded, &h);
        if (h.value)
            ag_forwarded_client(&s->config, h.value, out);
    }
    char address[AG_CLIENT_BYTES];
    memcpy(address, out, AG_CLIENT_BYTES);
    ag_client_key(address, s->config.client_ipv6_prefix, out);
}
