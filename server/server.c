/* The evhttp side of the server: creation, binding, the event loop, and the
 * translation between evhttp requests and tally_http_request/response.
 *
 * Every request head is first checked on the raw connection (conn.c), with
 * a deadline for the whole head: what evhttp would refuse with libevent
 * 2.1's own HTML page (unknown methods, bad versions, bad Content-Length,
 * oversized heads), Content-Length with Transfer-Encoding and repeated
 * Authorization headers are answered there with a JSON error. evhttp then
 * enforces the rest: bodies over SRV_TRANSPORT_MAX_BODY, and the read/write
 * timeout that drops idle clients. Bodies over TALLY_HTTP_MAX_BODY but
 * within the transport limit are answered 413 by the router. libevent's own
 * log lines go through tally_log. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>

#include "server_int.h"
#include "tally/log.h"

#define DEFAULT_TIMEOUT_S        30
#define DEFAULT_HEADER_TIMEOUT_S 10
#define DEFAULT_INGEST_RATE      1000
#define DEFAULT_INGEST_BURST     2000
#define MAX_HEADERS_BYTES        SRV_MAX_HEAD

static const struct {
    enum evhttp_cmd_type cmd;
    const char *name;
} methods[] = {
    {EVHTTP_REQ_GET, "GET"},     {EVHTTP_REQ_POST, "POST"},     {EVHTTP_REQ_HEAD, "HEAD"},
    {EVHTTP_REQ_PUT, "PUT"},     {EVHTTP_REQ_DELETE, "DELETE"}, {EVHTTP_REQ_OPTIONS, "OPTIONS"},
    {EVHTTP_REQ_PATCH, "PATCH"},
};

static const char *method_name(enum evhttp_cmd_type cmd)
{
    for (size_t i = 0; i < sizeof methods / sizeof *methods; i++)
        if (methods[i].cmd == cmd)
            return methods[i].name;
    return "";
}

static void send_reply(void *arg, const tally_http_response *resp)
{
    struct evhttp_request *req = arg;
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    struct evbuffer *body = evbuffer_new();
    evhttp_add_header(h, "Content-Type", resp->content_type);
    evhttp_add_header(h, "Cache-Control", "no-store");
    evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
    if (resp->request_id[0])
        evhttp_add_header(h, "X-Request-Id", resp->request_id);
    if (resp->allow[0])
        evhttp_add_header(h, "Allow", resp->allow);
    if (resp->retry_after_s > 0) {
        char secs[24];
        snprintf(secs, sizeof secs, "%lld", (long long)resp->retry_after_s);
        evhttp_add_header(h, "Retry-After", secs);
    }
    if (resp->replayed)
        evhttp_add_header(h, "Idempotent-Replayed", "true");
    if (resp->status == 401)
        evhttp_add_header(h, "WWW-Authenticate", "Bearer realm=\"tally\"");
    if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD) {
        /* The GET's headers without its body: evhttp would send the body. */
        char len[24];
        snprintf(len, sizeof len, "%zu", resp->body.len);
        evhttp_add_header(h, "Content-Length", len);
    } else if (body && resp->body.len) {
        evbuffer_add(body, resp->body.data, resp->body.len);
    }
    /* evhttp adds the answer to the connection's filter (conn.c) while
     * writing is disabled; flushing moves it on to the socket and counts it. */
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
    evhttp_send_reply(req, resp->status, NULL, body);
    if (bev)
        srv_conn_flush(bev);
    if (body)
        evbuffer_free(body);
}

static void on_request(struct evhttp_request *req, void *arg)
{
    tally_server *s = arg;
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    struct evkeyvalq *headers = evhttp_request_get_input_headers(req);
    tally_http_request r = {
        .method = method_name(evhttp_request_get_command(req)),
        .uri = evhttp_request_get_uri(req),
        .authorization = evhttp_find_header(headers, "Authorization"),
        .body = len ? (const char *)evbuffer_pullup(in, -1) : NULL,
        .body_len = len,
        .idempotency_key = evhttp_find_header(headers, "Idempotency-Key"),
    };
    if (len && !r.body) { /* could not make the body contiguous */
        tally_http_response oom = {.status = 503, .content_type = srv_type_json};
        tally_buf_init(&oom.body, 0);
        send_reply(req, &oom);
        return;
    }
    tally_server_handle(s, &r, send_reply, req);
}

tally_err tally_server_create(const tally_server_opts *o, tally_server **out, char *why, size_t cap)
{
    *out = NULL;
    if (!o->db_path || (o->brokers == NULL) != (o->topic == NULL) ||
        (o->brokers && (!o->brokers[0] || !o->topic[0]))) {
        snprintf(why, cap, "a ledger is required, and --brokers and --topic go together");
        return TALLY_INVAL;
    }
    tally_server *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(why, cap, "out of memory");
        return TALLY_NOMEM;
    }
    s->timeout_s = o->timeout_s > 0 ? o->timeout_s : DEFAULT_TIMEOUT_S;
    s->ingest_limit.rate = o->ingest_rate == 0             ? DEFAULT_INGEST_RATE
                           : o->ingest_rate < 0            ? 0
                           : o->ingest_rate > SRV_RATE_MAX ? SRV_RATE_MAX
                                                           : o->ingest_rate;
    s->ingest_limit.burst = o->ingest_burst > 0                           ? o->ingest_burst
                            : s->ingest_limit.rate > DEFAULT_INGEST_BURST ? s->ingest_limit.rate
                                                                          : DEFAULT_INGEST_BURST;
    s->header_timeout_s = o->header_timeout_s > 0 ? o->header_timeout_s : DEFAULT_HEADER_TIMEOUT_S;
    tally_err e = tally_ledger_open(o->db_path, &s->ledger, why, cap);
    if (!e && (e = srv_request_prefix(s->id_prefix)) != TALLY_OK)
        snprintf(why, cap, "no randomness for request ids");
    if (!e && o->brokers) {
        s->topic = strdup(o->topic);
        e = s->topic ? srv_kafka_create(o->brokers, &s->kafka, why, cap) : TALLY_NOMEM;
    }
    if (e) {
        tally_server_destroy(s);
        return e;
    }
    *out = s;
    return TALLY_OK;
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    event_base_loopbreak(arg);
}

static void on_libevent_log(int severity, const char *msg)
{
    tally_log(severity >= EVENT_LOG_ERR ? TALLY_LOG_ERR : TALLY_LOG_WARNING, "libevent", "%s", msg);
}

/* The event base, evhttp and signal events, made on first listen. */
static tally_err make_loop(tally_server *s)
{
    if (s->base)
        return TALLY_OK;
    event_set_log_callback(on_libevent_log);
    s->base = event_base_new();
    s->http = s->base ? evhttp_new(s->base) : NULL;
    if (!s->http)
        return TALLY_NOMEM;
    evhttp_set_max_body_size(s->http, (ev_ssize_t)SRV_TRANSPORT_MAX_BODY);
    evhttp_set_max_headers_size(s->http, MAX_HEADERS_BYTES);
    evhttp_set_timeout(s->http, s->timeout_s);
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                            EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                            EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
    /* Read what is left of a too-large body before answering 413, so the
     * client sees the answer instead of a reset connection. */
    evhttp_set_flags(s->http, EVHTTP_SERVER_LINGERING_CLOSE);
    evhttp_set_gencb(s->http, on_request, s);
    srv_conn_install(s);
    s->sig_int = evsignal_new(s->base, SIGINT, on_signal, s->base);
    s->sig_term = evsignal_new(s->base, SIGTERM, on_signal, s->base);
    if (!s->sig_int || !s->sig_term || event_add(s->sig_int, NULL) || event_add(s->sig_term, NULL))
        return TALLY_IO;
    if (s->kafka && srv_kafka_attach(s->kafka, s->base) != TALLY_OK)
        return TALLY_IO;
    return TALLY_OK;
}

/* Splits "HOST:PORT", "[IPV6]:PORT", ":PORT" or "PORT"; host defaults to
 * 127.0.0.1. */
static bool split_listen(const char *listen, char *host, size_t cap, uint16_t *port)
{
    const char *colon = strrchr(listen, ':');
    const char *p = colon ? colon + 1 : listen;
    char *end = NULL;
    long v = strtol(p, &end, 10);
    if (!*p || *end || v < 0 || v > 65535 || p[0] == '-' || p[0] == '+' || p[0] == ' ')
        return false;
    size_t hlen = colon ? (size_t)(colon - listen) : 0;
    const char *h = listen;
    if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
        h++;
        hlen -= 2;
    }
    if (hlen >= cap || memchr(h, '[', hlen) || memchr(h, ']', hlen))
        return false;
    snprintf(host, cap, "%.*s", (int)hlen, hlen ? h : "127.0.0.1");
    *port = (uint16_t)v;
    return true;
}

bool tally_server_addr_ok(const char *listen)
{
    char host[256];
    uint16_t port;
    return split_listen(listen, host, sizeof host, &port);
}

tally_err tally_server_listen(tally_server *s, const char *listen, char *bound, size_t cap,
                              char *why, size_t why_cap)
{
    char host[256];
    uint16_t port;
    if (!split_listen(listen, host, sizeof host, &port)) {
        snprintf(why, why_cap, "listen address '%s' is not HOST:PORT", listen);
        return TALLY_INVAL;
    }
    if (make_loop(s) != TALLY_OK) {
        snprintf(why, why_cap, "cannot set up the event loop");
        return TALLY_NOMEM;
    }
    struct evhttp_bound_socket *bs = evhttp_bind_socket_with_handle(s->http, host, port);
    if (!bs) {
        snprintf(why, why_cap, "cannot listen on %s:%u", host, (unsigned)port);
        return TALLY_IO;
    }
    if (srv_accept_guard_install(s, evhttp_bound_socket_get_listener(bs)) != TALLY_OK) {
        snprintf(why, why_cap, "out of memory");
        return TALLY_NOMEM;
    }
    struct sockaddr_storage ss = {.ss_family = AF_INET};
    socklen_t sl = sizeof ss;
    char addr[INET6_ADDRSTRLEN] = "?";
    unsigned bound_port = port;
    if (getsockname(evhttp_bound_socket_get_fd(bs), (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *a = (struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &a->sin_addr, addr, sizeof addr);
            bound_port = ntohs(a->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &a->sin6_addr, addr, sizeof addr);
            bound_port = ntohs(a->sin6_port);
        }
    }
    snprintf(bound, cap, ss.ss_family == AF_INET6 ? "[%s]:%u" : "%s:%u", addr, bound_port);
    return TALLY_OK;
}

tally_err tally_server_run(tally_server *s)
{
    if (!s->base)
        return TALLY_INVAL;
    signal(SIGPIPE, SIG_IGN);
    return event_base_dispatch(s->base) < 0 ? TALLY_IO : TALLY_OK;
}

void tally_server_destroy(tally_server *s)
{
    if (!s)
        return;
    srv_kafka_destroy(s->kafka); /* answers requests still waiting, through evhttp */
    if (s->http)
        evhttp_free(s->http);
    srv_accept_guard_release(s);
    if (s->sig_int)
        event_free(s->sig_int);
    if (s->sig_term)
        event_free(s->sig_term);
    if (s->base)
        event_base_free(s->base);
    tally_ledger_close(s->ledger);
    srv_keyring_release(&s->keys);
    srv_metrics_release(&s->metrics);
    srv_ratelimit_release(&s->ingest_limit);
    free(s->topic);
    free(s);
}
