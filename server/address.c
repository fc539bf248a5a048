/*
 * address.c - client addresses as text: the canonical form of an IPv4 or IPv6 literal, the
 * key the per-client bounds use (an IPv6 client's /64), and the client an X-Forwarded-For
 * header names behind the --trusted-proxy peers (client.c
 * reads the header; these are the parts without a connection, for the unit tests).
 */
#include "server.h"

#include <arpa/inet.h>
#include <stdio.h>
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

void ag_client_key(const char *address, int prefix_bits, char out[AG_CLIENT_BYTES]) {
    unsigned char a[16];
    char net[AG_CLIENT_BYTES];
    snprintf(out, AG_CLIENT_BYTES, "%s", address);
    if (!strchr(address, ':') || inet_pton(AF_INET6, address, a) != 1)
        return; /* IPv4, or "?" */
    static const unsigned char v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (!memcmp(a, v4_mapped, sizeof v4_mapped) || prefix_bits >= 128)
        return; /* an IPv4 client on a dual-stack socket is one address */
    for (int bit = prefix_bits; bit < 128; bit++)
        a[bit / 8] &= (unsigned char)~(0x80u >> (bit % 8));
    size_t len = inet_ntop(AF_INET6, a, net, sizeof net) ? strlen(net) : 0;
    if (len && len + 5 <= AG_CLIENT_BYTES)
        snprintf(out, AG_CLIENT_BYTES, "%s/%d", net, prefix_bits & 127);
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
