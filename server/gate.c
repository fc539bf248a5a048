/*
 * gate.c - the public listener's front door. The gate thread accepts every connection and
 * owns it until it closes: it relays the client's bytes to libmicrohttpd over a socket pair
 * (MHD_add_connection on one end) and MHD's answers back, and it follows the request
 * stream (each head, then its body by Content-Length or chunks) so that it judges every
 * request's head strictly (head.c) before MHD reads a byte of it: the first on a
 * connection, each later one kept alive, and each pipelined one. A refused head gets a JSON
 * error with a request id, logged and counted like any other request, after the answers to
 * the requests before it, then a lingering close so the answer is not lost to a reset.
 *
 * Why: libmicrohttpd 0.9.75 answers an oversized head with HTML or not at all (a 2 KB URL of
 * 490 arguments exhausted its pool and hung until the timeout), joins an obsolete line fold
 * into the header name and cuts a value at a NUL, so none of that can be refused after it
 * has parsed the head; peeking at a connection's first head only left every later request
 * on it to MHD alone.
 *
 * One request at a time goes to MHD per connection: the next head is judged once MHD has
 * completed the one before (ag_gate_request_done, from the completion callback), so a
 * refusal is written after the answers it follows, and MHD never holds a head the gate has
 * not seen. A client's FIN or reset is passed on (shutdown or close of our end), so the
 * watch in http.c sees a vanished client on MHD's descriptor as before; MHD closing its end
 * closes the client's connection, lingering.
 *
 * Idle connections (between requests, or never used) hold nothing anyone is owed: when
 * every place is taken, a new connection closes the one idle longest (RFC 9112 9.5 lets a
 * server close an idle connection at any time), so clients that connect and wait cannot
 * lock /healthz, /metrics or anyone else out.
 *
 * Draining, the gate takes the backlog and stops accepting; open connections are served
 * as before (MHD answers 503 shutting_down) until MHD stops.
 *
 * Bounds: --max-connections connections, each with a GATE_IN_BYTES and a GATE_OUT_BYTES
 * buffer (in the memory bound's connection term); a head waits at most --timeout seconds
 * from its connection's last answer; the thread runs at the HTTP thread's niceness.
 */
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define GATE_MAX_HEAD AG_GATE_MAX_HEAD
#define GATE_MAX_TARGET 8192
#define GATE_MAX_ARGS 32
#define GATE_MAX_FIELDS 64
#define GATE_IN_BYTES AG_GATE_IN_BYTES
#define GATE_OUT_BYTES AG_GATE_OUT_BYTES
#define GATE_MAX_CHUNK_LINE 1024
#define GATE_LINGER_US 2000000u
#define GATE_LINGER_BYTES (256 * 1024)

enum {
    ST_HEAD,       /* waiting for (or judging) the next head */
    ST_BODY,       /* remaining bytes of a Content-Length body */
    ST_CHUNK_SIZE, /* a chunk-size line */
    ST_CHUNK_DATA, /* remaining bytes of a chunk */
    ST_CHUNK_CRLF, /* the CRLF after a chunk */
    ST_TRAILER,    /* trailer lines up to the empty one */
    ST_STOP,       /* framing we do not follow: MHD has what it needs to refuse it */
    ST_CLOSING     /* answered; reading what the client still sends until EOF or deadline */
};

typedef struct gate_conn {
    int fd;             /* the client; -1: a free place */
    int pfd;            /* our end of the pair MHD has the other end of; -1 before */
    atomic_int mfd;     /* MHD's end (ag_gate_request_done looks it up) */
    atomic_uint done;   /* requests MHD completed on it */
    unsigned forwarded; /* requests whose head went to MHD */
    unsigned seen_done; /* done, as the gate thread last saw it */
    int state;
    int client_eof, client_broken, fin_sent, shut;
    int busy;                               /* counted in ag_gate.busy: not idle */
    int mhd_eof, mhd_unwritable, p_drained; /* MHD's end: closed, refusing bytes, read out */
    uint64_t remaining;                     /* ST_BODY, ST_CHUNK_DATA; ST_CLOSING: bytes dropped */
    uint64_t wait_since_us; /* since when a head is awaited (accept or the last answer) */
    uint64_t last_us;       /* the last byte moved */
    uint64_t deadline_us;   /* ST_CLOSING */
    uint64_t head_start_us; /* the head being read, for the log */
    char *in;               /* client bytes: [0, fwd) cleared for MHD, then unread */
    size_t in_len, fwd, trailer;
    char *out; /* MHD's bytes (or our refusal) for the client */
    size_t out_len;
    struct sockaddr_storage addr;
    socklen_t addr_len;
} gate_conn;

typedef struct ag_gate ag_gate;

struct ag_gate {
    ag_server *server;
    pthread_t thread;
    int started;
    int epoll_fd, wake_fd, listen_fd;
    int listening; /* listen_fd is in the epoll set (off while every place is taken) */
    atomic_int stop, drain, drained, open, busy;
    atomic_int detach, detached; /* ag_gate_detach asked; the thread has seen it */
    int capacity, count;
    gate_conn *conns;
    char *buffers;
};

static int gate_error(ag_error *err, int code, const char *what) {
    err->code = code;
    snprintf(err->message, sizeof err->message, "%s: %s", what, strerror(errno));
    return code;
}

static const ag_head_limits gate_limits = {GATE_MAX_HEAD, GATE_MAX_TARGET, GATE_MAX_ARGS,
                                           GATE_MAX_FIELDS};

static int soft_error(void) {
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

static void close_pair(ag_gate *g, gate_conn *c) {
    if (c->pfd < 0)
        return;
    epoll_ctl(g->epoll_fd, EPOLL_CTL_DEL, c->pfd, NULL);
    close(c->pfd); /* MHD sees the end (or, mid-request, a vanished client) */
    c->pfd = -1;
    atomic_store(&c->mfd, -1);
    c->mhd_eof = 1;
}

static void conn_close(ag_gate *g, gate_conn *c) {
    if (c->busy)
        atomic_fetch_sub(&g->busy, 1);
    c->busy = 0;
    close_pair(g, c);
    epoll_ctl(g->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    g->count--;
    atomic_fetch_sub(&g->open, 1);
}

static void listen_toggle(ag_gate *g, int on) {
    if (on == g->listening)
        return;
    struct epoll_event ev = {.events = on ? EPOLLIN : 0, .data.ptr = NULL};
    epoll_ctl(g->epoll_fd, EPOLL_CTL_MOD, g->listen_fd, &ev);
    g->listening = on;
}

static int in_flight(const gate_conn *c) {
    return c->forwarded != atomic_load(&c->done);
}

/* Nothing asked, nothing owed: a head is awaited and no byte of one has come. */
static int idle(const gate_conn *c) {
    return c->state == ST_HEAD && !in_flight(c) && c->in_len == 0 && c->out_len == 0;
}

/* ---- the two ends ------------------------------------------------------------------------ */

static int watch_fd(ag_gate *g, int fd, gate_conn *c) {
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = c};
    return epoll_ctl(g->epoll_fd, EPOLL_CTL_ADD, fd, &ev);
}

/* The pair for a connection's first head that passed; 0, or -1 (then all is closed). */
static int open_pair(ag_gate *g, gate_conn *c) {
    int sv[2];
    if (atomic_load(&g->detach))
        return -1; /* MHD is stopping (or gone): nothing may be added to it */
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
        return -1;
    /* A stale entry for a descriptor MHD closed and the kernel reuses now is not ours. */
    for (int i = 0; i < g->capacity; i++)
        if (atomic_load(&g->conns[i].mfd) == sv[1])
            atomic_store(&g->conns[i].mfd, -1);
    c->pfd = sv[0];
    atomic_store(&c->mfd, sv[1]);
    if (watch_fd(g, c->pfd, c) != 0) {
        close(sv[1]);
        close_pair(g, c);
        return -1;
    }
    /* Named as what it is, a local socket, MHD skips TCP's options on it (and does not
     * log each refusal); nothing reads the client's address from MHD. On failure (its
     * connection limit) MHD closes its end itself. */
    struct sockaddr_un local = {.sun_family = AF_UNIX};
    if (MHD_add_connection(g->server->daemon, sv[1], (struct sockaddr *)&local,
                           (socklen_t)sizeof local) != MHD_YES) {
        atomic_store(&c->mfd, -1);
        close_pair(g, c);
        return -1;
    }
    return 0;
}

/* Move bytes MHD -> out -> client and client -> in -> MHD as far as the sockets let us.
 * Returns whether anything moved. */
static int move_bytes(gate_conn *c, int from_client) {
    int moved = 0;
    while (c->pfd >= 0 && !c->mhd_eof && c->out_len < GATE_OUT_BYTES) {
        ssize_t k = recv(c->pfd, c->out + c->out_len, GATE_OUT_BYTES - c->out_len, MSG_DONTWAIT);
        if (k > 0) {
            c->out_len += (size_t)k, moved = 1, c->p_drained = 0;
        } else if (k < 0 && soft_error()) {
            c->p_drained = errno != EINTR;
            if (c->p_drained)
                break;
        } else {
            c->mhd_eof = 1, moved = 1; /* MHD closed (or cut) the connection */
        }
    }
    while (c->out_len > 0) {
        ssize_t k = send(c->fd, c->out, c->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) {
            memmove(c->out, c->out + k, c->out_len - (size_t)k);
            c->out_len -= (size_t)k, moved = 1;
        } else if (k < 0 && soft_error()) {
            if (errno != EINTR)
                break;
        } else {
            c->client_broken = 1, c->out_len = 0, moved = 1;
        }
    }
    while (from_client && !c->client_eof && c->in_len < GATE_IN_BYTES) {
        ssize_t k = recv(c->fd, c->in + c->in_len, GATE_IN_BYTES - c->in_len, MSG_DONTWAIT);
        if (k > 0) {
            if (c->in_len == 0 && c->state == ST_HEAD)
                c->head_start_us = ag_now_us();
            c->in_len += (size_t)k, moved = 1;
        } else if (k < 0 && soft_error()) {
            if (errno != EINTR)
                break;
        } else {
            c->client_eof = 1, moved = 1;
            c->client_broken = k < 0; /* a reset */
        }
    }
    while (c->fwd > 0 && c->pfd >= 0 && !c->mhd_eof && !c->mhd_unwritable) {
        ssize_t k = send(c->pfd, c->in, c->fwd, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) {
            memmove(c->in, c->in + k, c->in_len - (size_t)k);
            c->in_len -= (size_t)k, c->fwd -= (size_t)k, moved = 1;
        } else if (k < 0 && soft_error()) {
            if (errno != EINTR)
                break;
        } else {
            c->mhd_unwritable = 1, moved = 1; /* closed: its answer may still be there to read */
        }
    }
    return moved;
}

/* ---- refusing a head ---------------------------------------------------------------------- */

/* A refused head: its JSON error goes out after what MHD sent before, then we linger. */
static void refuse(ag_gate *g, gate_conn *c, const ag_head_verdict *v) {
    ag_server *s = g->server;
    ag_request r;
    memset(&r, 0, sizeof r);
    r.start_us = c->head_start_us ? c->head_start_us : ag_now_us();
    r.status = v->status;
    r.error_code = v->code;
    r.route = ag_http_route_of(v->target);
    snprintf(r.method, sizeof r.method, "%.7s", v->method[0] ? v->method : "-");
    ag_http_new_request_id(s, r.id);
    char body[320];
    size_t body_len = ag_json_error(body, sizeof body, v->code, v->message);
    const char *reason = v->status == 414   ? "URI Too Long"
                         : v->status == 431 ? "Request Header Fields Too Large"
                         : v->status == 505 ? "HTTP Version Not Supported"
                                            : "Bad Request";
    int n = snprintf(c->out, GATE_OUT_BYTES,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nX-Request-Id: %s\r\n"
                     "X-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\n"
                     "Connection: close\r\nContent-Length: %zu\r\n\r\n%.*s",
                     v->status, reason, r.id, body_len, (int)body_len, body);
    c->out_len = n > 0 && n < GATE_OUT_BYTES ? (size_t)n : 0;
    close_pair(g, c); /* nothing is in flight there */
    c->state = ST_CLOSING;
    c->in_len = c->fwd = 0;
    c->remaining = 0;
    c->deadline_us = ag_now_us() + GATE_LINGER_US;
    uint64_t end = ag_now_us();
    r.total_ms = (double)(end - r.start_us) / 1000.0;
    ag_metrics_count_request(&s->metrics, r.route, r.status, end - r.start_us, 0, body_len);
    if (!s->config.quiet)
        ag_log_request(s->config.log_format, &r, 0, body_len, ag_process_rss_bytes());
}

/* ---- following the request stream --------------------------------------------------------- */

/* Clear n unread bytes for MHD. */
static void pass(gate_conn *c, size_t n) {
    c->fwd += n;
}

static const char *unread_line(const gate_conn *c) {
    return memchr(c->in + c->fwd, '\n', c->in_len - c->fwd);
}

/* Framing we cannot follow: what has come goes to MHD (which answers it its own way) and
 * nothing after it, so no later head can reach MHD unseen. */
static int stop(gate_conn *c) {
    c->fwd = c->in_len;
    c->state = ST_STOP;
    return 1;
}

static int judge_head(ag_gate *g, gate_conn *c) {
    if (in_flight(c) || c->fwd > 0 || c->in_len == 0)
        return 0; /* one request at a time; the next head is judged from in[0] */
    ag_head_verdict v;
    int rc = ag_head_check(c->in, c->in_len, &gate_limits, &v);
    if (rc == 0)
        return 0;
    if (rc < 0) {
        /* After every byte MHD wrote for the requests before it. */
        if (c->out_len > 0 || (c->pfd >= 0 && !c->p_drained && !c->mhd_eof))
            return 0;
        refuse(g, c, &v);
        return 1;
    }
    if (c->pfd < 0 && open_pair(g, c) != 0) {
        c->client_broken = 1; /* nowhere to take it: close, as MHD at its limit would */
        return 1;
    }
    c->forwarded++;
    pass(c, v.head_bytes);
    c->head_start_us = 0;
    if (v.body == AG_HEAD_BODY_LENGTH && v.content_length > 0) {
        c->state = ST_BODY;
        c->remaining = v.content_length;
    } else if (v.body == AG_HEAD_BODY_CHUNKED) {
        c->state = ST_CHUNK_SIZE;
    } else if (v.body == AG_HEAD_BODY_UNKNOWN) {
        c->state = ST_STOP;
    }
    return 1;
}

static int chunk_size_line(gate_conn *c) {
    const char *lf = unread_line(c);
    if (!lf)
        return c->in_len - c->fwd > GATE_MAX_CHUNK_LINE ? stop(c) : 0;
    const char *p = c->in + c->fwd;
    uint64_t size = 0;
    int digits = 0;
    for (; digits < 16 && p < lf; p++, digits++) {
        int d = *p >= '0' && *p <= '9'   ? *p - '0'
                : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10
                : *p >= 'A' && *p <= 'F' ? *p - 'A' + 10
                                         : -1;
        if (d < 0)
            break;
        size = size * 16 + (uint64_t)d;
    }
    /* chunk-size [ ";" chunk-ext ] CRLF */
    if (digits == 0 || digits >= 16 || p == lf || lf[-1] != '\r' || (p != lf - 1 && *p != ';'))
        return stop(c);
    pass(c, (size_t)(lf + 1 - (c->in + c->fwd)));
    c->remaining = size;
    c->state = size ? ST_CHUNK_DATA : ST_TRAILER;
    c->trailer = 0;
    return 1;
}

static int trailer_line(gate_conn *c) {
    const char *lf = unread_line(c);
    if (!lf)
        return c->in_len - c->fwd > GATE_MAX_HEAD ? stop(c) : 0;
    size_t n = (size_t)(lf + 1 - (c->in + c->fwd));
    c->trailer += n;
    if (c->trailer > GATE_MAX_HEAD)
        return stop(c);
    int empty = n == 1 || (n == 2 && c->in[c->fwd] == '\r');
    pass(c, n);
    if (empty)
        c->state = ST_HEAD;
    return 1;
}

/* Advance over the unread bytes by the state; returns whether it moved. */
static int follow(ag_gate *g, gate_conn *c) {
    size_t unread = c->in_len - c->fwd;
    switch (c->state) {
    case ST_HEAD: return judge_head(g, c);
    case ST_BODY:
    case ST_CHUNK_DATA: {
        size_t take = unread < c->remaining ? unread : (size_t)c->remaining;
        pass(c, take);
        c->remaining -= take;
        if (c->remaining == 0)
            c->state = c->state == ST_BODY ? ST_HEAD : ST_CHUNK_CRLF;
        return take > 0 || c->remaining == 0;
    }
    case ST_CHUNK_CRLF:
        if (unread < 2)
            return 0;
        if (memcmp(c->in + c->fwd, "\r\n", 2) != 0)
            return stop(c);
        pass(c, 2);
        c->state = ST_CHUNK_SIZE;
        return 1;
    case ST_CHUNK_SIZE: return chunk_size_line(c);
    case ST_TRAILER: return trailer_line(c);
    case ST_CLOSING:
        /* What the client still sends after the answer is dropped, up to a bound: a client
         * pushing a body nobody reads gets the reset MHD would have sent it. */
        c->in_len = c->fwd = 0;
        c->remaining += unread;
        if (c->remaining > GATE_LINGER_BYTES)
            c->client_broken = 1;
        return unread > 0;
    default: return 0;
    }
}

/* ---- a connection's life -------------------------------------------------------------------- */

/* Decide what the ends' state asks for; returns 1 when the connection is gone. */
static int settle(ag_gate *g, gate_conn *c) {
    if (c->client_broken) { /* reset, or a write failed: nobody to answer */
        conn_close(g, c);
        return 1;
    }
    if (c->state == ST_CLOSING || (c->mhd_eof && c->pfd >= 0)) {
        /* MHD closed its end (after its last answer, or cutting a request): linger. */
        if (c->state != ST_CLOSING) {
            close_pair(g, c);
            c->state = ST_CLOSING;
            c->in_len = c->fwd = 0;
            c->remaining = 0; /* from now: bytes dropped while lingering */
            c->deadline_us = ag_now_us() + GATE_LINGER_US;
        }
        if (c->out_len == 0 && !c->shut) {
            shutdown(c->fd, SHUT_WR);
            c->shut = 1;
        }
        if (c->client_eof && c->out_len == 0) {
            conn_close(g, c);
            return 1;
        }
        return 0;
    }
    if (c->client_eof) {
        if (c->pfd >= 0 && !c->fin_sent && c->fwd == 0) {
            shutdown(c->pfd, SHUT_WR); /* the client's FIN, passed on: the watch sees it */
            c->fin_sent = 1;
        }
        if (!in_flight(c) && c->out_len == 0 && c->fwd == 0) {
            conn_close(g, c); /* gone with nothing asked (or a head left unfinished) */
            return 1;
        }
    }
    int busy = !idle(c);
    if (busy != c->busy) /* what the drain waits for */
        atomic_fetch_add(&g->busy, busy ? 1 : -1);
    c->busy = busy;
    return 0;
}

static void pump(ag_gate *g, gate_conn *c) {
    for (int moved = 1; moved;) {
        unsigned done = atomic_load(&c->done);
        if (done != c->seen_done) {
            c->seen_done = done;
            if (!in_flight(c))
                c->wait_since_us = ag_now_us(); /* answered: the next head's time starts */
        }
        moved = move_bytes(c, 1);
        while (!c->client_broken && follow(g, c))
            moved = 1;
        moved |= move_bytes(c, 0);
        if (moved)
            c->last_us = ag_now_us();
        if (settle(g, c))
            return;
    }
}

/* The connection idle longest, to make room; NULL when none is idle. */
static gate_conn *oldest_idle(ag_gate *g) {
    gate_conn *best = NULL;
    for (int i = 0; i < g->capacity; i++) {
        gate_conn *c = &g->conns[i];
        if (c->fd >= 0 && c->state == ST_HEAD && !in_flight(c) && c->fwd == 0 && c->out_len == 0 &&
            (!best || c->wait_since_us < best->wait_since_us))
            best = c;
    }
    return best;
}

static void accept_all(ag_gate *g) {
    for (;;) {
        gate_conn *victim = NULL;
        if (g->count >= g->capacity) {
            victim = atomic_load(&g->drain) ? NULL : oldest_idle(g);
            if (!victim)
                break;
        }
        struct sockaddr_storage addr;
        socklen_t addr_len = sizeof addr;
        int fd = accept4(g->listen_fd, (struct sockaddr *)&addr, &addr_len,
                         SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            return; /* EAGAIN: the backlog is empty (or a transient error) */
        if (victim) {
            conn_close(g, victim);
            atomic_fetch_add(&g->server->metrics.connections_evicted, 1);
        }
        gate_conn *c = NULL;
        for (int i = 0; i < g->capacity && !c; i++)
            if (g->conns[i].fd < 0)
                c = &g->conns[i];
        int one = 1; /* our writes are whole answers: no Nagle delay */
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        char *in = c->in, *out = c->out;
        memset(c, 0, sizeof *c);
        c->in = in, c->out = out;
        c->fd = fd;
        c->pfd = -1;
        atomic_store(&c->mfd, -1);
        c->wait_since_us = c->last_us = ag_now_us();
        c->addr = addr;
        c->addr_len = addr_len;
        g->count++;
        atomic_fetch_add(&g->open, 1);
        if (watch_fd(g, fd, c) != 0) {
            conn_close(g, c);
            continue;
        }
        pump(g, c); /* the head may be there already */
    }
    listen_toggle(g, 0); /* full of busy connections: the kernel's backlog waits */
}

static void expire(ag_gate *g) {
    uint64_t now = ag_now_us(), timeout = (uint64_t)g->server->config.timeout_s * 1000000u;
    for (int i = 0; i < g->capacity; i++) {
        gate_conn *c = &g->conns[i];
        if (c->fd < 0)
            continue;
        int late = c->state == ST_CLOSING ? now >= c->deadline_us
                   : c->out_len > 0       ? now - c->last_us > timeout /* not reading */
                   : c->state == ST_HEAD && !in_flight(c) ? now - c->wait_since_us > timeout
                                                          : 0;
        if (late)
            conn_close(g, c); /* as MHD would at --timeout */
        else if (atomic_load(&c->done) != c->seen_done)
            pump(g, c); /* MHD completed a request: the next head may be judged */
    }
}

/* What the backlog holds is answered (503 shutting_down by MHD); idle connections stay,
 * so a kept-alive probe reads /readyz's 503 rather than a close. */
static void drain_now(ag_gate *g) {
    accept_all(g);
    /* New connections fail at once from here on. Right after the last accept, on this
     * thread: a connection the kernel completes in between is reset with its request sent
     * (found under ASan, where the caller's polling made that window milliseconds). */
    shutdown(g->listen_fd, SHUT_RDWR);
    epoll_ctl(g->epoll_fd, EPOLL_CTL_DEL, g->listen_fd, NULL);
    g->listening = 0;
    atomic_store(&g->drained, 1);
}

static void *gate_main(void *arg) {
    ag_gate *g = arg;
    struct epoll_event events[64];
    int draining = 0;
    while (!atomic_load(&g->stop)) {
        /* Between two passes, never inside open_pair: every later one sees `detach`. */
        if (atomic_load(&g->detach))
            atomic_store(&g->detached, 1);
        int n = epoll_wait(g->epoll_fd, events, 64, 50);
        for (int i = 0; i < n; i++) {
            if (events[i].data.ptr == NULL) {
                if (!draining)
                    accept_all(g);
            } else if (events[i].data.ptr == (void *)g) {
                uint64_t v;
                if (read(g->wake_fd, &v, sizeof v) < 0) {
                    /* nothing pending: another wake-up took it */
                }
            } else if (((gate_conn *)events[i].data.ptr)->fd >= 0) {
                pump(g, events[i].data.ptr);
            }
        }
        if (!draining && atomic_load(&g->drain)) {
            drain_now(g);
            draining = 1;
        }
        expire(g);
        if (!draining && g->count < g->capacity)
            listen_toggle(g, 1);
    }
    return NULL;
}

static void wake(ag_gate *g) {
    uint64_t one = 1;
    if (write(g->wake_fd, &one, sizeof one) < 0) {
        /* the counter is full: a wake-up is pending anyway */
    }
}

/* ---- the interface -------------------------------------------------------------------------- */

int ag_gate_start(ag_server *s, int listen_fd, ag_error *err) {
    ag_gate *g = ag_calloc(1, sizeof *g);
    if (!g)
        return gate_error(err, AG_E_NOMEM, "out of memory for the gate");
    g->server = s;
    g->listen_fd = listen_fd;
    g->capacity = s->config.max_connections;
    g->conns = ag_calloc((size_t)g->capacity, sizeof *g->conns);
    g->buffers = ag_malloc((size_t)g->capacity * (GATE_IN_BYTES + GATE_OUT_BYTES));
    s->gate = g;
    /* Every descriptor is -1 before anything can fail: ag_gate_stop, on the error path,
     * closes what is >= 0, and calloc's 0 is the process's stdin. */
    for (int i = 0; g->conns && i < g->capacity; i++) {
        gate_conn *c = &g->conns[i];
        c->fd = c->pfd = -1;
        atomic_store(&c->mfd, -1);
        c->in = g->buffers ? g->buffers + (size_t)i * (GATE_IN_BYTES + GATE_OUT_BYTES) : NULL;
        c->out = c->in ? c->in + GATE_IN_BYTES : NULL;
    }
    g->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    g->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (!g->conns || !g->buffers || g->epoll_fd < 0 || g->wake_fd < 0)
        return gate_error(err, AG_E_NOMEM, "cannot set up the gate");
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
    struct epoll_event wev = {.events = EPOLLIN, .data.ptr = g};
    if (epoll_ctl(g->epoll_fd, EPOLL_CTL_ADD, listen_fd, &lev) != 0 ||
        epoll_ctl(g->epoll_fd, EPOLL_CTL_ADD, g->wake_fd, &wev) != 0)
        return gate_error(err, AG_E_IO, "cannot set up the gate");
    g->listening = 1;
    if (pthread_create(&g->thread, NULL, gate_main, g) != 0)
        return gate_error(err, AG_E_NOMEM, "cannot start the gate thread");
    g->started = 1;
    return AG_OK;
}

void ag_gate_request_done(ag_server *s, int fd) {
    ag_gate *g = s->gate;
    if (!g || fd < 0)
        return;
    for (int i = 0; i < g->capacity; i++)
        if (atomic_load(&g->conns[i].mfd) == fd) {
            atomic_fetch_add(&g->conns[i].done, 1);
            wake(g);
            return;
        }
}

int ag_gate_drain(ag_server *s) {
    ag_gate *g = s->gate;
    if (!g || !g->started)
        return 0;
    atomic_store(&g->drain, 1);
    wake(g);
    for (int i = 0; i < 200 && !atomic_load(&g->drained); i++)
        usleep(5000);
    return atomic_load(&g->busy);
}

int ag_gate_peer(ag_server *s, int mhd_fd, char *out, size_t cap) {
    ag_gate *g = s->gate;
    for (int i = 0; g && mhd_fd >= 0 && i < g->capacity; i++) {
        const gate_conn *c = &g->conns[i];
        if (atomic_load(&c->mfd) != mhd_fd)
            continue;
        const void *a = c->addr.ss_family == AF_INET6
                            ? (const void *)&((const struct sockaddr_in6 *)&c->addr)->sin6_addr
                            : (const void *)&((const struct sockaddr_in *)&c->addr)->sin_addr;
        return inet_ntop(c->addr.ss_family, a, out, (socklen_t)cap) ? 0 : -1;
    }
    return -1;
}

/* MHD_add_connection on a daemon MHD_stop_daemon is tearing down (or on the NULL left
 * after it) crashed the server at the end of a drain when a kept-alive client's first head
 * came in then (a SEGV; under ASan an abort). */
void ag_gate_detach(ag_server *s) {
    ag_gate *g = s->gate;
    if (!g || !g->started)
        return;
    atomic_store(&g->detach, 1);
    wake(g);
    /* One pass of the thread (epoll_wait's 50 ms at most); bounded all the same. */
    for (int i = 0; i < 5000 && !atomic_load(&g->detached); i++)
        usleep(1000);
}

int ag_gate_busy(ag_server *s) {
    return s->gate ? atomic_load(&s->gate->busy) : 0;
}

void ag_gate_stop(ag_server *s) {
    ag_gate *g = s->gate;
    if (!g)
        return;
    if (g->started) {
        atomic_store(&g->stop, 1);
        wake(g);
        pthread_join(g->thread, NULL);
        g->started = 0;
    }
    for (int i = 0; g->conns && i < g->capacity; i++)
        if (g->conns[i].fd >= 0) {
            move_bytes(&g->conns[i], 0); /* the last answers, as far as they go at once */
            conn_close(g, &g->conns[i]);
        }
    if (g->epoll_fd >= 0)
        close(g->epoll_fd);
    if (g->wake_fd >= 0)
        close(g->wake_fd);
    ag_free(g->buffers);
    ag_free(g->conns);
    ag_free(g);
    s->gate = NULL;
}
