/*
 * gate.c - the public listener's front door. The gate thread accepts every connection and
 * waits (epoll, edge-triggered) until its first request head is complete, reading it with
 * MSG_PEEK so the bytes stay in the socket; then it judges the head strictly (head.c) and
 * either hands the connection to libmicrohttpd (MHD_add_connection), which reads the same
 * bytes, or answers it itself: a JSON error with a request id, logged and counted like any
 * other request, then a lingering close so the answer is not lost to a reset.
 *
 * Why: libmicrohttpd 0.9.75 answers an oversized head with HTML or not at all (a 2 KB URL of
 * 490 arguments exhausted its pool and hung until the timeout), joins an obsolete line fold
 * into the header name and cuts a value at a NUL, so none of that can be refused after it
 * has parsed the head. Later requests on a kept-alive connection are parsed by
 * libmicrohttpd alone (framing_check in http.c still applies to them).
 *
 * Bounds: at most --max-connections connections wait here (then the gate stops accepting
 * and the kernel's backlog holds the rest, as before), each at most --timeout seconds; one
 * shared peek buffer of GATE_MAX_HEAD bytes. The thread runs at the HTTP thread's niceness.
 */
#include "server.h"

#include <errno.h>
#include <microhttpd.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#define GATE_MAX_HEAD (16 * 1024)
#define GATE_MAX_TARGET 8192
#define GATE_MAX_ARGS 32
#define GATE_MAX_FIELDS 64
#define GATE_LINGER_US 2000000u

typedef struct ag_gate ag_gate;

typedef struct gate_conn {
    int fd;      /* -1: free */
    int closing; /* answered; reading what the client still sends until EOF or the deadline */
    uint64_t deadline_us;
    uint64_t start_us;
    struct sockaddr_storage addr;
    socklen_t addr_len;
} gate_conn;

struct ag_gate {
    ag_server *server;
    pthread_t thread;
    int started;
    int epoll_fd, wake_fd, listen_fd;
    int listening; /* listen_fd is in the epoll set (off while every slot is taken) */
    atomic_int stop;
    int capacity, count;
    gate_conn *conns;
    char peek[GATE_MAX_HEAD + 1];
};

static int gate_error(ag_error *err, int code, const char *what) {
    err->code = code;
    snprintf(err->message, sizeof err->message, "%s: %s", what, strerror(errno));
    return code;
}

static const ag_head_limits gate_limits = {GATE_MAX_HEAD, GATE_MAX_TARGET, GATE_MAX_ARGS,
                                           GATE_MAX_FIELDS};

static void conn_close(ag_gate *g, gate_conn *c) {
    /* Read out what was only peeked at: closing with unread bytes would send a reset, not
     * the end of the stream. */
    char sink[4096];
    for (int i = 0; i < 8 && recv(c->fd, sink, sizeof sink, MSG_DONTWAIT) > 0; i++) {
    }
    epoll_ctl(g->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    g->count--;
}

static void listen_toggle(ag_gate *g, int on) {
    if (on == g->listening)
        return;
    struct epoll_event ev = {.events = on ? EPOLLIN : 0, .data.ptr = NULL};
    epoll_ctl(g->epoll_fd, EPOLL_CTL_MOD, g->listen_fd, &ev);
    g->listening = on;
}

/* Hand a connection whose head passed (or any, when draining) to libmicrohttpd. */
static void hand_over(ag_gate *g, gate_conn *c) {
    epoll_ctl(g->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
    /* On failure (its connection limit) MHD closes the socket itself. */
    if (MHD_add_connection(g->server->daemon, c->fd, (struct sockaddr *)&c->addr, c->addr_len) ==
        MHD_YES)
        atomic_fetch_add(&g->server->connections_added, 1);
    c->fd = -1;
    g->count--;
}

/* Answer a refused head: JSON error, logged and counted, then linger. */
static void refuse(ag_gate *g, gate_conn *c, const ag_head_verdict *v) {
    ag_server *s = g->server;
    ag_request r;
    memset(&r, 0, sizeof r);
    r.start_us = c->start_us;
    r.status = v->status;
    r.error_code = v->code;
    r.route = ag_http_route_of(v->target);
    snprintf(r.method, sizeof r.method, "%.7s", v->method[0] ? v->method : "-");
    ag_http_new_request_id(s, r.id);
    char body[320], head[512];
    size_t body_len = ag_json_error(body, sizeof body, v->code, v->message);
    const char *reason = v->status == 414   ? "URI Too Long"
                         : v->status == 431 ? "Request Header Fields Too Large"
                         : v->status == 505 ? "HTTP Version Not Supported"
                                            : "Bad Request";
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nX-Request-Id: %s\r\n"
                     "X-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\n"
                     "Connection: close\r\nContent-Length: %zu\r\n\r\n",
                     v->status, reason, r.id, body_len);
    /* Small enough for any socket buffer: one try, never blocking the gate. */
    if (send(c->fd, head, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) == n)
        (void)send(c->fd, body, body_len, MSG_NOSIGNAL | MSG_DONTWAIT);
    shutdown(c->fd, SHUT_WR);
    c->closing = 1;
    c->deadline_us = ag_now_us() + GATE_LINGER_US;
    uint64_t end = ag_now_us();
    r.total_ms = (double)(end - r.start_us) / 1000.0;
    ag_metrics_count_request(&s->metrics, r.route, r.status, end - r.start_us, 0, body_len);
    if (!s->config.quiet)
        ag_log_request(s->config.log_format, &r, 0, body_len, ag_process_rss_bytes());
}

/* The client sent more: judge the head again, or drain a refused one. */
static void on_readable(ag_gate *g, gate_conn *c) {
    if (c->closing) {
        char sink[4096];
        ssize_t k;
        while ((k = recv(c->fd, sink, sizeof sink, MSG_DONTWAIT)) > 0) {
        }
        if (k == 0 || (errno != EAGAIN && errno != EINTR))
            conn_close(g, c);
        return;
    }
    ssize_t k = recv(c->fd, g->peek, GATE_MAX_HEAD + 1, MSG_PEEK | MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) {
        conn_close(g, c); /* gone before finishing its head: nothing to answer */
        return;
    }
    if (k < 0)
        return;
    ag_head_verdict v;
    int rc = ag_head_check(g->peek, (size_t)k, &gate_limits, &v);
    if (rc > 0)
        hand_over(g, c);
    else if (rc < 0)
        refuse(g, c, &v);
    /* 0: incomplete; the next bytes wake us again (edge-triggered) */
}

static void accept_all(ag_gate *g) {
    while (g->count < g->capacity) {
        gate_conn *c = NULL;
        for (int i = 0; i < g->capacity && !c; i++)
            if (g->conns[i].fd < 0)
                c = &g->conns[i];
        c->addr_len = sizeof c->addr;
        int fd = accept4(g->listen_fd, (struct sockaddr *)&c->addr, &c->addr_len,
                         SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            return; /* EAGAIN: the backlog is empty (or a transient error) */
        c->fd = fd;
        c->closing = 0;
        c->start_us = ag_now_us();
        c->deadline_us = c->start_us + (uint64_t)g->server->config.timeout_s * 1000000u;
        g->count++;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = c};
        if (epoll_ctl(g->epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            close(fd);
            c->fd = -1;
            g->count--;
            continue;
        }
        on_readable(g, c); /* the head may be there already */
    }
    listen_toggle(g, 0); /* full: the kernel's backlog waits */
}

static void expire(ag_gate *g) {
    uint64_t now = ag_now_us();
    for (int i = 0; i < g->capacity; i++)
        if (g->conns[i].fd >= 0 && now >= g->conns[i].deadline_us)
            conn_close(g, &g->conns[i]); /* idle past --timeout, as MHD would */
}

static void *gate_main(void *arg) {
    ag_gate *g = arg;
    struct epoll_event events[64];
    while (!atomic_load(&g->stop)) {
        int n = epoll_wait(g->epoll_fd, events, 64, 100);
        for (int i = 0; i < n; i++) {
            if (events[i].data.ptr == NULL)
                accept_all(g);
            else if (events[i].data.ptr != (void *)g)
                on_readable(g, events[i].data.ptr);
        }
        expire(g);
        if (g->count < g->capacity)
            listen_toggle(g, 1);
    }
    return NULL;
}

int ag_gate_start(ag_server *s, int listen_fd, ag_error *err) {
    ag_gate *g = ag_calloc(1, sizeof *g);
    if (!g)
        return gate_error(err, AG_E_NOMEM, "out of memory for the gate");
    g->server = s;
    g->listen_fd = listen_fd;
    g->capacity = s->config.max_connections;
    g->conns = ag_calloc((size_t)g->capacity, sizeof *g->conns);
    g->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    g->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    s->gate = g;
    if (!g->conns || g->epoll_fd < 0 || g->wake_fd < 0)
        return gate_error(err, AG_E_NOMEM, "cannot set up the gate");
    for (int i = 0; i < g->capacity; i++)
        g->conns[i].fd = -1;
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

int ag_gate_stop(ag_server *s, int hand_over_waiting) {
    ag_gate *g = s->gate;
    if (!g)
        return 0;
    if (g->started) {
        atomic_store(&g->stop, 1);
        uint64_t one = 1;
        if (write(g->wake_fd, &one, sizeof one) < 0) {
            /* the counter is full: a wake-up is pending anyway */
        }
        pthread_join(g->thread, NULL);
        g->started = 0;
    }
    int handed = 0;
    for (int i = 0; g->conns && i < g->capacity; i++) {
        gate_conn *c = &g->conns[i];
        if (c->fd < 0)
            continue;
        if (hand_over_waiting && !c->closing && s->daemon) {
            hand_over(g, c);
            handed++;
        } else {
            conn_close(g, c);
        }
    }
    if (g->epoll_fd >= 0)
        close(g->epoll_fd);
    if (g->wake_fd >= 0)
        close(g->wake_fd);
    ag_free(g->conns);
    ag_free(g);
    s->gate = NULL;
    return handed;
}
