/* The raw side of each connection, in front of evhttp.
 *
 * evhttp_set_bevcb gives every accepted connection a filter bufferevent over
 * the socket one. Its input filter holds a request's head back from evhttp
 * until the whole head has arrived, then checks it (srv_head_check): a
 * head evhttp would refuse with its own HTML page, or one that evhttp would
 * read differently from us (Content-Length with Transfer-Encoding), is
 * answered here with Tally's JSON error and the connection is closed. The
 * body of an accepted request (Content-Length bytes) is passed through
 * untouched and the next head is checked again; after a chunked body the
 * rest of the connection is passed through unchecked (evhttp still
 * enforces its limits there, with its own pages).
 *
 * evhttp frees a connection as soon as its answer has moved into the filter,
 * before the socket has sent it, so it must never close one itself: every
 * head reaches it with "Connection: keep-alive", and when the client asked
 * for a close (or spoke HTTP/1.0 without keep-alive) this file closes the
 * socket once the answer has drained. A refused head waits for the answer
 * of a request still in flight before its JSON error goes out.
 *
 * The head has a deadline of its own (header_timeout_s), started by its
 * first byte: evhttp's timeout is per read, so a client sending one byte
 * every few seconds would otherwise hold the connection for as long as it
 * likes. At the deadline the client gets 408 and the connection closes.
 *
 * Accept errors (EMFILE and friends) are rate-limited to one log line a
 * second, with the count of those suppressed, and accepting pauses for a
 * moment so that the loop does not spin on a listener it cannot serve. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>

#include "server_int.h"
#include "tally/log.h"

#define LINGER_S        2      /* after a refusal, how long to read what the client still sends */
#define ACCEPT_PAUSE_US 200000 /* accepting pauses this long after fds ran out */

/* CONN_DONE: nothing more goes to evhttp (refused, or the client asked for
 * a close); input is read and discarded until the socket closes. */
typedef enum conn_state { CONN_HEAD, CONN_BODY, CONN_PASS, CONN_DONE } conn_state;

typedef struct srv_conn {
    tally_server *srv;
    struct bufferevent *under;
    struct event *timer; /* the head's deadline; after a refusal, the linger */
    conn_state state;
    uint64_t body_left;
    uint64_t heads, answers; /* heads passed to evhttp, answers it sent */
    bool close_after;        /* close once nothing is in flight */
    bool shut_down;
    tally_buf pending; /* a refusal waiting for the answer in flight */
} srv_conn;

static const char *reason_phrase(int status)
{
    switch (status) {
    case 400:
        return "Bad Request";
    case 408:
        return "Request Timeout";
    case 413:
        return "Payload Too Large";
    case 414:
        return "URI Too Long";
    case 431:
        return "Request Header Fields Too Large";
    case 501:
        return "Not Implemented";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Error";
    }
}

/* A request passed to evhttp has not been answered, or its answer has not
 * been sent yet. */
static bool in_flight(const srv_conn *c)
{
    return c->heads != c->answers || evbuffer_get_length(bufferevent_get_output(c->under)) != 0;
}

/* Answers status with a JSON error and closes after it (see on_drained). */
static void refuse(srv_conn *c, int status, const char *code, const char *msg)
{
    tally_buf body, out;
    tally_buf_init(&body, 4096);
    tally_buf_init(&out, 8192);
    tally_err e = tally_buf_puts(&body, "{\"error\":{\"code\":");
    if (!e)
        e = tally_buf_json_str(&body, code);
    if (!e)
        e = tally_buf_puts(&body, ",\"message\":");
    if (!e)
        e = tally_buf_json_str(&body, msg);
    if (!e)
        e = tally_buf_puts(&body, "}}\n");
    if (!e)
        e = tally_buf_printf(&out,
                             "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                             "Content-Length: %zu\r\nConnection: close\r\n"
                             "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n\r\n",
                             status, reason_phrase(status), body.len);
    if (!e)
        e = tally_buf_append(&out, body.data, body.len);
    if (!e)
        c->srv->metrics.responses[status / 100]++;
    tally_buf_release(&body);
    c->state = CONN_DONE;
    c->close_after = true;
    evtimer_del(c->timer);
    if (e) { /* out of memory: close without an answer */
        tally_buf_release(&out);
    } else if (in_flight(c)) {
        tally_buf_release(&c->pending);
        c->pending = out; /* written when the answer in flight has drained */
    } else {
        bufferevent_write(c->under, out.data, out.len);
        tally_buf_release(&out);
    }
    struct timeval linger = {.tv_sec = LINGER_S + c->srv->timeout_s};
    evtimer_add(c->timer, &linger); /* bounds the wait for the answer and the linger */
}

/* Nothing in flight and a close wanted: say no more, linger, then close. */
static void close_if_done(srv_conn *c)
{
    if (in_flight(c) || !c->close_after || c->shut_down)
        return;
    c->shut_down = true;
    shutdown(bufferevent_getfd(c->under), SHUT_WR);
    struct timeval linger = {.tv_sec = LINGER_S};
    evtimer_add(c->timer, &linger);
}

/* The socket sent all it had: the answer in flight is out. */
static void on_drained(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    srv_conn *c = arg;
    if (info->n_deleted == 0 || evbuffer_get_length(buf) != 0 || c->heads != c->answers)
        return;
    if (c->pending.len) {
        bufferevent_write(c->under, c->pending.data, c->pending.len);
        tally_buf_release(&c->pending);
        return;
    }
    close_if_done(c);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    srv_conn *c = arg;
    if (c->state == CONN_HEAD) {
        char msg[96];
        snprintf(msg, sizeof msg, "request headers not complete within %d s",
                 c->srv->header_timeout_s);
        refuse(c, 408, "timeout", msg);
        return;
    }
    /* End of the linger (or of the wait for an answer that never came):
     * reading EOF makes evhttp free the connection. */
    shutdown(bufferevent_getfd(c->under), SHUT_RDWR);
}

/* The request line with an absolute-form target ("http://host/path")
 * turned into origin-form ("/path"): evhttp 2.1 answers those itself as
 * proxy requests. */
static void pass_request_line(const char *p, size_t len, struct evbuffer *dst)
{
    const char *t = memchr(p, ' ', len) + 1; /* a checked line has two spaces */
    size_t rest = len - (size_t)(t - p);
    size_t skip = rest > 7 && strncasecmp(t, "http://", 7) == 0    ? 7
                  : rest > 8 && strncasecmp(t, "https://", 8) == 0 ? 8
                                                                   : 0;
    if (!skip) {
        evbuffer_add(dst, p, len);
        return;
    }
    evbuffer_add(dst, p, (size_t)(t - p));
    const char *end = memchr(t, ' ', rest);
    const char *path = t + skip;
    while (path < end && *path != '/' && *path != '?')
        path++;
    if (path == end || *path == '?')
        evbuffer_add(dst, "/", 1);
    evbuffer_add(dst, path, len - (size_t)(path - p));
}

/* Copies a checked head to evhttp with its Connection headers replaced by
 * "Connection: keep-alive" (see the top of this file). */
static void pass_head(const char *p, size_t n, struct evbuffer *dst)
{
    size_t at = 0;
    while (at < n) {
        const char *nl = memchr(p + at, '\n', n - at);
        size_t len = (size_t)(nl - (p + at)) + 1; /* a checked head has only whole lines */
        if (len <= 2 && at)                       /* the blank line */
            break;
        if (!at)
            pass_request_line(p, len, dst);
        else if (!srv_head_is_connection(p + at, len))
            evbuffer_add(dst, p + at, len);
        at += len;
    }
    evbuffer_add(dst, "Connection: keep-alive\r\n\r\n", 26);
}

/* Checks the head at the start of src and hands it to dst. 1: passed, 0:
 * incomplete, -1: refused. */
static int take_head(srv_conn *c, struct evbuffer *src, struct evbuffer *dst)
{
    unsigned char first;
    while (evbuffer_copyout(src, &first, 1) == 1 && (first == '\r' || first == '\n'))
        evbuffer_drain(src, 1); /* empty lines before a request line are ignored */
    size_t len = evbuffer_get_length(src);
    if (!len)
        return 0;
    if (!evtimer_pending(c->timer, NULL)) {
        struct timeval tv = {.tv_sec = c->srv->header_timeout_s};
        evtimer_add(c->timer, &tv);
    }
    size_t look = len < SRV_MAX_HEAD + 3 ? len : SRV_MAX_HEAD + 3;
    const char *p = (const char *)evbuffer_pullup(src, (ev_ssize_t)look);
    size_t end = p ? srv_head_end(p, look) : 0;
    if (!end || end > SRV_MAX_HEAD) {
        if (len <= SRV_MAX_HEAD && p)
            return 0;
        bool line = p && memchr(p, '\n', look);
        refuse(c, line ? 431 : 414, line ? "too_large" : "uri_too_long",
               line ? "request head over 16384 bytes" : "request line over 16384 bytes");
        return -1;
    }
    srv_head h;
    if (srv_head_check(p, end, &h)) {
        refuse(c, h.status, h.code, h.msg);
        return -1;
    }
    evtimer_del(c->timer);
    pass_head(p, end, dst);
    evbuffer_drain(src, end);
    c->heads++;
    c->close_after = h.close;
    c->body_left = h.content_length;
    c->state = h.chunked          ? CONN_PASS
               : h.content_length ? CONN_BODY
               : h.close          ? CONN_DONE
                                  : CONN_HEAD;
    return 1;
}

static enum bufferevent_filter_result filter_in(struct evbuffer *src, struct evbuffer *dst,
                                                ev_ssize_t limit, enum bufferevent_flush_mode mode,
                                                void *arg)
{
    (void)limit;
    (void)mode;
    srv_conn *c = arg;
    bool moved = false;
    for (size_t len; (len = evbuffer_get_length(src)) != 0;) {
        if (c->state == CONN_DONE) {
            evbuffer_drain(src, len);
            break;
        }
        if (c->state == CONN_PASS) {
            evbuffer_add_buffer(dst, src);
            moved = true;
            break;
        }
        if (c->state == CONN_BODY) {
            size_t n = len < c->body_left ? len : (size_t)c->body_left;
            evbuffer_remove_buffer(src, dst, n);
            moved = true;
            if ((c->body_left -= n) != 0)
                break;
            c->state = c->close_after ? CONN_DONE : CONN_HEAD;
            continue;
        }
        int r = take_head(c, src, dst);
        if (r <= 0)
            break;
        moved = true;
    }
    return moved ? BEV_OK : BEV_NEED_MORE;
}

/* Output to the socket as it is. server.c flushes the filter after each
 * answer (srv_conn_flush), which is how answers are counted. */
static enum bufferevent_filter_result filter_out(struct evbuffer *src, struct evbuffer *dst,
                                                 ev_ssize_t limit, enum bufferevent_flush_mode mode,
                                                 void *arg)
{
    (void)limit;
    srv_conn *c = arg;
    evbuffer_add_buffer(dst, src);
    if (mode == BEV_FLUSH && c->answers < c->heads)
        c->answers++;
    return BEV_OK;
}

static void free_conn(void *arg)
{
    srv_conn *c = arg;
    evbuffer_remove_cb(bufferevent_get_output(c->under), on_drained, c);
    event_free(c->timer);
    tally_buf_release(&c->pending);
    free(c);
}

/* evhttp's bufferevent callback: NULL makes evhttp use a plain socket one. */
static struct bufferevent *make_bev(struct event_base *base, void *arg)
{
    srv_conn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->srv = arg;
    tally_buf_init(&c->pending, 0);
    c->under = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    c->timer = evtimer_new(base, on_timer, c);
    struct bufferevent *f = c->under && c->timer
                                ? bufferevent_filter_new(c->under, filter_in, filter_out,
                                                         BEV_OPT_CLOSE_ON_FREE, free_conn, c)
                                : NULL;
    if (!f || !evbuffer_add_cb(bufferevent_get_output(c->under), on_drained, c)) {
        tally_log(TALLY_LOG_ERR, "serve", "cannot set up a connection's head check");
        if (f)
            bufferevent_free(f); /* frees c and c->under */
        else {
            if (c->under)
                bufferevent_free(c->under);
            if (c->timer)
                event_free(c->timer);
            free(c);
        }
        return NULL;
    }
    return f;
}

void srv_conn_flush(struct bufferevent *bev)
{
    bufferevent_flush(bev, EV_WRITE, BEV_FLUSH);
}

void srv_conn_install(tally_server *s)
{
    evhttp_set_bevcb(s->http, make_bev, s);
}

/* ---- Accept errors --------------------------------------------------------- */

/* evconnlistener's error callback gets evhttp's argument, not ours: the
 * guarded servers are found by their listener. */
#define MAX_GUARDED 8
static tally_server *guarded[MAX_GUARDED];

static srv_accept_guard *guard_of(struct evconnlistener *lev)
{
    for (size_t i = 0; i < MAX_GUARDED; i++)
        if (guarded[i] && guarded[i]->accept_guard.listener == lev)
            return &guarded[i]->accept_guard;
    return NULL;
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    srv_accept_guard *g = arg;
    evconnlistener_enable(g->listener);
}

static bool out_of_fds(int err)
{
    return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

static void on_accept_error(struct evconnlistener *lev, void *arg)
{
    (void)arg; /* evhttp's own: the guard is found through the listener */
    int err = EVUTIL_SOCKET_ERROR();
    srv_accept_guard *g = guard_of(lev);
    if (!g)
        return;
    int64_t now = srv_now_us();
    bool pause = out_of_fds(err);
    if (now - g->last_log_us >= 1000000) {
        tally_log(TALLY_LOG_WARNING, "serve",
                  "cannot accept a connection: %s%s (%lld more since the last message)",
                  evutil_socket_error_to_string(err), pause ? "; accepting paused for 200 ms" : "",
                  (long long)g->suppressed);
        g->last_log_us = now;
        g->suppressed = 0;
    } else {
        g->suppressed++;
    }
    if (pause) {
        evconnlistener_disable(lev);
        struct timeval tv = {.tv_usec = ACCEPT_PAUSE_US};
        evtimer_add(g->resume, &tv);
    }
}

tally_err srv_accept_guard_install(tally_server *s, struct evconnlistener *lev)
{
    srv_accept_guard *g = &s->accept_guard;
    if (g->listener) /* one guarded listener per server */
        return TALLY_OK;
    size_t slot = 0;
    while (slot < MAX_GUARDED && guarded[slot])
        slot++;
    if (slot == MAX_GUARDED) /* accept errors stay libevent's own */
        return TALLY_OK;
    g->resume = evtimer_new(s->base, on_resume, g);
    if (!g->resume)
        return TALLY_NOMEM;
    guarded[slot] = s;
    g->listener = lev;
    g->last_log_us = -1000000;
    evconnlistener_set_error_cb(lev, on_accept_error);
    return TALLY_OK;
}

void srv_accept_guard_release(tally_server *s)
{
    for (size_t i = 0; i < MAX_GUARDED; i++)
        if (guarded[i] == s)
            guarded[i] = NULL;
    if (s->accept_guard.resume)
        event_free(s->accept_guard.resume);
    s->accept_guard.resume = NULL;
    s->accept_guard.listener = NULL;
}
