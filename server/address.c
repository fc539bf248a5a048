/*
 * address.c - client addresses as text: the canonical form of an IPv4 or IPv6 literal, and
 * the client an X-Forwarded-For header names behind the --trusted-proxy peers (client.c
 * reads the header; these are the parts without a connection, for the unit tests).
 */
#include "server.h"

#include <arpa/inet.h>
#include <string.h>

int ag_client_address(const char *text, size_t len, char out[AG_CLIENT_BYTES]) {
    char buf[AG_CLIENT_BYTES];
    while (len && (*text == ' ' || *text == '\t'))
        text++, len--;
    while (len && (text[len - 1] == ' ' || text[len - 1] == '\t'))
        len--;
    if (!len || len >= sizeof buf)
        return 0;
    memcpy(buf, text, len);
    buf[len] = '\0';
    unsigned char a[16];
    int family = strchr(buf, ':') ? AF_INET6 : AF_INET;
    if (inet_pton(family, buf, a) != 1)
        return 0;
    return inet_ntop(family, a, out, AG_CLIENT_BYTES) != NULL;
}

int ag_trusted_proxy(const ag_server_config *c, const char *address) {
    for (int i = 0; i < c->trusted_proxy_count; i++)
        if (!strcmp(c->trusted_proxies[i], address))
            return 1;
    return 0;
}

void ag_forwarded_client(const ag_server_config *c, const char *xff, char out[AG_CLIENT_BYTES]) {
    /* Right to left: the first hop that is not one of ours is the client. */
    for (const char *end = xff + strlen(xff); end > xff;) {
        const char *start = end;
        while (start > xff && start[-1] != ',')
            start--;
        char hop[AG_CLIENT_BYTES];
        if (!ag_client_address(start, (size_t)(end - start), hop))
            return; /* malformed: *out stays the proxy's address */
        if (!ag_trusted_proxy(c, hop)) {
            memcpy(out, hop, AG_CLIENT_BYTES);
            return;
        }
        end = start > xff ? start - 1 : start;
    }
}
