/* Internal to the HTTP server: the server's body, one call's state, the
 * route table's types and the helpers shared by the handler files.
 *
 * A request flows: tally_server_handle (router.c) -> route match (404/405)
 * -> authentication (401/403, auth.c) -> account scope (404) -> handler.
 * Handlers fill c->resp and return SRV_ANSWERED, or hand the call to the
 * Kafka producer and return SRV_DEFERRED (the producer answers later with
 * srv_finish). */
#ifndef TALLY_SERVER_INT_H
#define TALLY_SERVER_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tally/event.h"
#include "tally/ledger.h"
#include "tally/server.h"

/* ---- Metrics (metrics.c) -------------------------------------------------- */

#define SRV_LATENCY_BUCKETS 14
#define SRV_OUTBOX_TYPES    11 /* the ten event types of tally/outbox.h and "other" */

typedef struct srv_histogram {
    int64_t count[SRV_LATENCY_BUCKETS]; /* per bucket, not cumulative */
    int64_t n, sum_us;
} srv_histogram;

typedef struct srv_reason_count {
    char reason[48];
    int64_t n;
} srv_reason_count;

typedef struct srv_metrics {
    int64_t responses[6];      /* by status class: [1] 1xx ... [5] 5xx */
    int64_t events[8];         /* by srv_event_status */
    srv_histogram commit;      /* this server's ingest commits */
    srv_reason_count *reasons; /* quarantine counts by reason, ledger-wide */
    size_t n_reasons;
    int64_t reasons_after_id; /* quarantine rows counted so far end here */
    int64_t rate_limited;     /* ingest requests answered 429 */
    /* Outbox events per known type (metrics.c's table, the last slot
     * "other"), ledger-wide, counted incrementally by row id. */
    int64_t outbox_total[SRV_OUTBOX_TYPES];
    int64_t outbox_after_id; /* outbox rows counted so far end here */
} srv_metrics;

void srv_metrics_release(srv_metrics *m);
void srv_histogram_observe(srv_histogram *h, int64_t us);
/* Microseconds from a monotonic clock. */
int64_t srv_now_us(void);

/* ---- API keys (auth.c) ---------------------------------------------------- */

typedef struct srv_principal {
    int64_t key_id;
    tally_key_role role;
    bool admin;                                        /* role == TALLY_KEY_ADMIN */
    char account[TALLY_NAME_MAX];                      /* "" unless an account key */
    char sources[TALLY_KEY_SOURCES_MAX][TALLY_ID_MAX]; /* an ingest key's prefixes */
    size_t n_sources;
} srv_principal;

typedef struct srv_key {
    unsigned char hash[32];
    int64_t id;
    tally_key_role role;
    char account[TALLY_NAME_MAX];
    char sources[TALLY_KEY_SOURCES_MAX][TALLY_ID_MAX];
    size_t n_sources;
} srv_key;

/* The active keys, sorted by hash, reloaded when another connection commits
 * (PRAGMA data_version moves). */
typedef struct srv_keyring {
    srv_key *keys;
    size_t n;
    int64_t data_version;
    bool loaded;
} srv_keyring;

void srv_keyring_release(srv_keyring *k);

typedef enum srv_auth_result {
    SRV_AUTH_OK = 0,
    SRV_AUTH_MISSING,   /* no Authorization header */
    SRV_AUTH_MALFORMED, /* not "Bearer tly_..." */
    SRV_AUTH_UNKNOWN,   /* no active key with this hash (unknown or revoked) */
    SRV_AUTH_ERROR,     /* the ledger could not be read */
} srv_auth_result;

/* Checks an Authorization header value against the active keys. */
srv_auth_result srv_authenticate(tally_ledger *l, srv_keyring *k, const char *header,
                                 srv_principal *who);

/* SHA-256 of a key's text. */
void srv_key_hash(const char *key, size_t len, unsigned char out[32]);

/* ---- Ingest rate limits (ratelimit.c) ------------------------------------- */

#define SRV_RATE_MAX 1000000 /* events a second, the most --ingest-rate takes */

typedef struct srv_bucket {
    int64_t key_id;
    int64_t tokens_milli; /* thousandths of an event */
    int64_t at_us;        /* when tokens_milli was last refilled */
} srv_bucket;

typedef struct srv_ratelimit {
    int64_t rate;        /* events a second per key; 0: no limit */
    int64_t burst;       /* bucket size in events */
    srv_bucket *buckets; /* sorted by key_id */
    size_t n, alloc;
} srv_ratelimit;

/* Takes events tokens from key_id's bucket at now_us. Returns 0 if they were
 * there (and are taken), else the seconds to wait before retrying (nothing
 * taken). */
int64_t srv_ratelimit_take(srv_ratelimit *rl, int64_t key_id, int64_t events, int64_t now_us);
void srv_ratelimit_release(srv_ratelimit *rl);

/* ---- The server ----------------------------------------------------------- */

typedef struct srv_kafka srv_kafka;

/* ---- The raw connection (head.c, conn.c) --------------------------------- */

#define SRV_MAX_HEAD           (16 * 1024) /* request line and headers */
#define SRV_MAX_TARGET         8192
#define SRV_TRANSPORT_MAX_BODY (4 * TALLY_HTTP_MAX_BODY)

/* What srv_head_check found in one request head. */
typedef struct srv_head {
    int status;       /* 0: acceptable; else the status to answer */
    const char *code; /* the error code of the JSON body */
    char msg[160];
    bool has_length, chunked;
    bool http10, conn_close, conn_keep_alive;
    bool close; /* the client wants the connection closed after the answer */
    uint64_t content_length;
    int n_authorization;
    int n_idempotency_key;
} srv_head;

/* Checks a complete request head (request line, headers, blank line) of n
 * bytes: method, target, version, Content-Length, Transfer-Encoding and
 * repeated Authorization or Idempotency-Key. Returns 0 or the status to refuse it with. */
int srv_head_check(const char *p, size_t n, srv_head *h);
/* Length of the head at p (through its blank line), or 0 if incomplete. */
size_t srv_head_end(const char *p, size_t n);
/* Whether a header line is a Connection header. */
bool srv_head_is_connection(const char *line, size_t len);

typedef struct srv_accept_guard {
    struct evconnlistener *listener;
    struct event *resume;
    int64_t last_log_us;
    int64_t suppressed;
} srv_accept_guard;

/* Installs the head check and deadline on every connection of s->http
 * (evhttp_set_bevcb). */
void srv_conn_install(tally_server *s);
struct bufferevent;
struct evconnlistener;
/* After each answer given to evhttp: sends it on and counts it. */
void srv_conn_flush(struct bufferevent *bev);
/* Rate-limits accept errors of the listener and pauses accepting while file
 * descriptors run out. Errors: TALLY_NOMEM. */
TALLY_MUST_CHECK tally_err srv_accept_guard_install(tally_server *s, struct evconnlistener *lev);
/* Frees what srv_accept_guard_install made. */
void srv_accept_guard_release(tally_server *s);

struct tally_server {
    tally_ledger *ledger;
    char *topic; /* with brokers */
    srv_kafka *kafka;
    int timeout_s;
    int header_timeout_s;
    srv_accept_guard accept_guard;
    srv_ratelimit ingest_limit;
    char id_prefix[17]; /* random per process: request ids stay unique across restarts */
    uint64_t next_request;
    srv_keyring keys;
    srv_metrics metrics;
    /* A GET's handler runs inside a read transaction (route.c); one call at
     * a time, and kept here, not in the call, which a handler may free. */
    bool in_snapshot;
    /* evhttp plumbing (server.c) */
    struct event_base *base;
    struct evhttp *http;
    struct event *sig_int, *sig_term;
};

/* ---- One call ------------------------------------------------------------- */

#define SRV_MAX_PARAMS 2
#define SRV_PARAM_MAX  160

typedef struct srv_call {
    tally_server *srv;
    const tally_http_request *req; /* borrowed: valid only until the handler returns */
    tally_http_response resp;
    tally_http_reply_fn reply;
    void *reply_arg;
    srv_principal who;
    char params[SRV_MAX_PARAMS][SRV_PARAM_MAX]; /* decoded path parameters */
    size_t n_params;
    const char *query; /* raw query (after '?'), or NULL */
    size_t query_len;
} srv_call;

/* SRV_ANSWERED: c->resp holds the answer; the router sends it and frees c.
 * SRV_DEFERRED: the handler took the call over; it has called or will call
 * srv_finish itself (events produced to Kafka answer from delivery reports). */
typedef enum srv_outcome { SRV_ANSWERED = 0, SRV_DEFERRED = 1 } srv_outcome;

typedef enum srv_auth_level {
    SRV_PUBLIC = 0, /* no key */
    SRV_ANY_KEY,    /* account or admin key; {account} in the path is scoped */
    SRV_ADMIN,      /* admin keys only (403 for other keys) */
    SRV_USAGE,      /* ingest or admin keys: sending usage (403 for account keys) */
} srv_auth_level;

typedef srv_outcome (*srv_handler)(srv_call *c);

typedef struct srv_route {
    const char *method;
    const char *pattern; /* "/v1/accounts/{account}/usage": {name} matches one segment */
    srv_handler handler;
    srv_auth_level auth;
} srv_route;

/* Ends the call's read snapshot, so that the ledger can open a write
 * transaction of its own; false when there was none. A balance read
 * (tally_balance_get) refreshes a balance that fell due (a grant expired, a
 * release grace ended) in a write transaction, which cannot open inside the
 * snapshot: it answers TALLY_BUSY, and the handler drops the snapshot and
 * asks again. */
bool srv_snapshot_drop(srv_call *c);
/* Answers the call (c->resp) and frees it. */
void srv_finish(srv_call *c);
/* 16 random hex digits that prefix this process's request ids.
 * Errors: TALLY_CRYPTO. */
TALLY_MUST_CHECK tally_err srv_request_prefix(char out[17]);

/* ---- Routing and parsing helpers (route.c, query.c) ----------------------- */

typedef enum srv_match {
    SRV_MATCH_OK = 0,
    SRV_MATCH_NO_ROUTE,  /* 404 */
    SRV_MATCH_NO_METHOD, /* 405; allow filled */
    SRV_MATCH_BAD_PATH,  /* 400: bad percent-escape, NUL, over-long segment */
} srv_match;

/* Finds the route for method and path (path without the query). On
 * SRV_MATCH_OK *route is set and params hold the decoded {name} segments in
 * order; on SRV_MATCH_NO_METHOD allow lists the path's methods ("GET, PUT"). */
srv_match srv_route_match(const srv_route *table, size_t n, const char *method, const char *path,
                          size_t path_len, const srv_route **route,
                          char params[SRV_MAX_PARAMS][SRV_PARAM_MAX], size_t *n_params, char *allow,
                          size_t allow_cap);

/* The server's route table. */
extern const srv_route srv_routes[];
extern const size_t srv_n_routes;

/* Percent-decodes len bytes of s into out (NUL-terminated); plus_is_space for
 * query strings. Rejects malformed escapes, NUL and other control bytes.
 * Errors: TALLY_PARSE, TALLY_TOO_LARGE (does not fit in cap). */
TALLY_MUST_CHECK tally_err srv_pct_decode(const char *s, size_t len, bool plus_is_space, char *out,
                                          size_t cap);

/* One expected query parameter; value is decoded into buf. */
typedef struct srv_qparam {
    const char *name;
    char *buf;
    size_t cap;
    bool seen;
} srv_qparam;

/* Parses a query string ("a=1&b=x%2By") into the expected parameters.
 * Unknown names, repeated names, names without '=' and bad escapes are
 * errors; why (static) says which. Errors: TALLY_PARSE, TALLY_TOO_LARGE. */
TALLY_MUST_CHECK tally_err srv_query_parse(const char *q, size_t len, srv_qparam *p, size_t n,
                                           const char **why);

/* Byte range of one element of a JSON array. */
typedef struct srv_span {
    size_t off, len;
} srv_span;

/* Splits a JSON array into its top-level elements without validating them
 * (tally_event_decode does). At most max elements. On error why (static)
 * names the problem. Errors: TALLY_PARSE (not one well-nested array, trailing
 * bytes, empty element), TALLY_TOO_LARGE (more than max elements). */
TALLY_MUST_CHECK tally_err srv_json_array_split(const char *buf, size_t len, srv_span *out,
                                                size_t max, size_t *n, const char **why);

/* ---- Responses (respond.c) ------------------------------------------------ */

/* Sets status, a JSON error body {"error":{"code","message"}}; returns
 * SRV_ANSWERED so handlers can `return srv_fail(...)`. */
srv_outcome srv_fail(srv_call *c, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The one mapping of errors to HTTP statuses, from the error's class
 * (tally/err.h): bad input 4xx (404 NOT_FOUND, 409 for conflicts with what
 * is stored, 413 TOO_LARGE, 403 AUTH, else 400), retriable 503, fatal (and
 * TALLY_OK, which is no failure) 500. Sets *code to the error body's code. */
int srv_http_status(tally_err e, const char **code);
/* Answers e with srv_http_status's status, the message "<what>: <error>";
 * a 500 is logged with the ledger's message and answered without it. */
srv_outcome srv_fail_err(srv_call *c, tally_err e, const char *what);
/* As srv_fail_err, but bad input is answered with why (the ledger's
 * explanation, shown to the client) when it is not empty. */
srv_outcome srv_fail_why(srv_call *c, tally_err e, const char *why);
/* Sets status and content type for a body already in c->resp.body. */
srv_outcome srv_ok(srv_call *c, int status, const char *content_type);
/* Answers 500 "internal" when e is a buffer error (out of memory). */
srv_outcome srv_fail_nomem(srv_call *c);

extern const char srv_type_json[];

/* ---- JSON bodies (body.c) ------------------------------------------------- */

struct json_object;

/* Parses c->req's body as one JSON object whose keys are all in allowed
 * (NULL-terminated). On failure answers 400 and returns false. The caller
 * owns *out (json_object_put). */
bool srv_body_object(srv_call *c, const char *const *allowed, struct json_object **out);

/* Field getters: on a missing required field or a wrong type they answer
 * 400 and return false; a missing optional field leaves *out as it was and
 * sets *present (if not NULL) to false. */
bool srv_field_string(srv_call *c, struct json_object *o, const char *name, bool required,
                      const char **out);
bool srv_field_time(srv_call *c, struct json_object *o, const char *name, bool required,
                    int64_t *out);
bool srv_field_int(srv_call *c, struct json_object *o, const char *name, int64_t min, int64_t max,
                   int64_t *out);

/* ---- Handlers ------------------------------------------------------------- */

srv_outcome srv_h_healthz(srv_call *c);
srv_outcome srv_h_metrics(srv_call *c);
srv_outcome srv_h_events(srv_call *c);
srv_outcome srv_h_usage(srv_call *c);
srv_outcome srv_h_balance(srv_call *c);
srv_outcome srv_h_admission(srv_call *c);
srv_outcome srv_h_invoice_list(srv_call *c);
srv_outcome srv_h_invoice_show(srv_call *c);
srv_outcome srv_h_credit_grant(srv_call *c);
srv_outcome srv_h_spot_set(srv_call *c);

/* ---- Events (events.c) and Kafka (kafka.c) -------------------------------- */

typedef enum srv_event_status {
    SRV_EV_ACCEPTED = 0,
    SRV_EV_DUPLICATE,
    SRV_EV_CONFLICT,
    SRV_EV_QUARANTINED,
    SRV_EV_PRODUCED,
    SRV_EV_FORBIDDEN, /* source not under the ingest key's prefixes: neither stored nor produced */
    SRV_EV_FAILED,    /* could not be produced: retry */
    SRV_EV_PENDING,   /* waiting for a delivery report */
} srv_event_status;

const char *srv_event_status_name(srv_event_status s);

typedef struct srv_event_result {
    srv_event_status status;
    char id[TALLY_ID_MAX];        /* "" when the event did not decode */
    char account[TALLY_NAME_MAX]; /* the subject, for the Kafka key */
    char reason[48];
} srv_event_result;

typedef struct srv_events_call srv_events_call;

/* The opaque of one produced message: which request and which event. */
typedef struct srv_delivery {
    srv_events_call *ec;
    size_t index;
} srv_delivery;

/* An events request: results per event, answered when none is pending. */
struct srv_events_call {
    srv_call *call;
    srv_event_result *results;
    srv_delivery *deliveries; /* Kafka: one per event, the message's opaque */
    size_t n;
    size_t pending;
};

/* Writes the results body, answers (srv_finish) and frees ec. */
void srv_events_answer(srv_events_call *ec);

/* Creates the producer (idempotent, acks=all) and registers its queue with
 * the event loop when base is not NULL. Errors: TALLY_KAFKA, TALLY_NOMEM. */
TALLY_MUST_CHECK tally_err srv_kafka_create(const char *brokers, srv_kafka **out, char *why,
                                            size_t cap);
/* Hooks delivery reports into the event loop. Errors: TALLY_IO. */
TALLY_MUST_CHECK tally_err srv_kafka_attach(srv_kafka *k, struct event_base *base);
/* Flushes (bounded wait) and frees; accepts NULL. */
void srv_kafka_destroy(srv_kafka *k);
/* Produces value keyed by key to topic; on delivery sets the result of
 * d->index in d->ec and, when nothing is pending any more, answers d->ec. Errors: TALLY_KAFKA
 * (queue full, unknown topic): nothing was queued. */
TALLY_MUST_CHECK tally_err srv_kafka_produce(srv_kafka *k, const char *topic, const char *key,
                                             const char *value, size_t len, srv_delivery *d);
/* Appends Prometheus lines for consumer lag of topic (offsets stored in the
 * ledger vs the brokers' high watermarks). Errors: TALLY_TOO_LARGE. */
TALLY_MUST_CHECK tally_err srv_kafka_lag(srv_kafka *k, tally_ledger *l, const char *topic,
                                         tally_buf *out);

#endif
