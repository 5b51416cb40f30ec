/* The HTTP API (SPEC section 7) on libevent's evhttp, and its API keys.
 *
 * A tally_server owns one ledger connection and, when brokers are given, one
 * idempotent Kafka producer. It runs a single-threaded event loop: requests
 * are answered in order of arrival; events produced to Kafka are answered
 * when their delivery reports arrive, without blocking other requests.
 *
 * Requests can also be handed to tally_server_handle() without a socket
 * (tests, the fuzz target): routing, authentication, query and body
 * validation and the handlers are the same code the socket path runs.
 *
 * API keys are "tly_" followed by 43 base64url characters (32 random bytes).
 * Only their SHA-256 is stored (table api_keys); a presented key is hashed
 * and compared in constant time. Revocation takes effect on the next request.
 *
 * ---- The API ----------------------------------------------------------------
 *
 * Every endpoint but /healthz and /metrics needs "Authorization: Bearer KEY".
 * Answers are JSON unless noted; errors are {"error":{"code","message"}}.
 *
 *   POST /v1/events                          body: JSON array of CloudEvents
 *   GET  /v1/accounts/{id}/usage?from=T&to=T[&by=sku|day|meter]
 *   GET  /v1/accounts/{id}/balance
 *   GET  /v1/accounts/{id}/admission?sku=S&cards=N&hours=H[&pricing=P]
 *        200 {"allowed":true,...} or 402 {"allowed":false,...,"shortfall"}
 *        (below)
 *   GET  /v1/accounts/{id}/invoices           {"account","invoices":[...]}
 *   GET  /v1/invoices/{id}[?format=json|csv|html]
 *   POST /v1/accounts/{id}/credits   (admin)  201 {"grant_id",...}
 *        body {"amount","kind","currency"?,"priority"?,"effective_at"?,
 *              "expires_at"?,"scope"?}; optional header Idempotency-Key
 *        (below)
 *   PUT  /v1/spot-prices/{sku}       (admin)  body {"price","from"}
 *   GET  /healthz                             {"status":"ok"} (reads the ledger)
 *   GET  /metrics                             Prometheus text
 *
 * Times are RFC 3339 (in a query, encode '+' as %2B). Money (amount, price)
 * is a decimal string parsed exactly; a JSON number there is 400. Unknown
 * body fields and query parameters are 400.
 *
 * Events: the body is one JSON array (not NDJSON) of at most 1,000 events.
 * The answer is 200 {"request_id","results":[{"index","id"?,"status",
 * "reason"?}]} with status accepted, duplicate, conflict or quarantined
 * (direct ingest, one transaction, origin "http:<request-id>:<index>"), or
 * produced / failed (with --brokers: produced to the topic keyed by account
 * once the broker acknowledged it; any failure makes the answer 503 and the
 * client retries, which dedupe by (source, id) makes safe). Elements that do
 * not decode are quarantined with their reason in both modes.
 *
 * Who may send events: admin keys, and ingest keys for events whose source
 * starts with one of the key's prefixes (any subject). An ingest key's event
 * under another source is answered "forbidden" per event (reason
 * "source_not_allowed") and is neither stored, produced nor quarantined; the
 * rest of the request goes on. An account key never sends usage: POST
 * /v1/events with one is 403 and nothing of the request is stored, so no
 * tenant can pre-empt a host's (source, id).
 *
 * Keys and tenants: an account key sees only its own account; a path naming
 * another account, or an invoice id of another account, is answered exactly the 404
 * of something that does not exist. Admin keys see every account. Credits and
 * spot prices need an admin key (403 for account keys, 401 without a key).
 * An ingest key may only POST /v1/events (403 elsewhere).
 *
 * Status codes: 400 malformed input, 401 missing/malformed/unknown/revoked
 * key (with WWW-Authenticate), 403 a route the key's role may not use, 404
 * unknown route or hidden/missing resource, 405 wrong method (with Allow),
 * 409 conflicting state (currency mismatch, SKU without spot pricing, an
 * Idempotency-Key used for a different request), 413
 * body over 1 MiB or more than 1,000 events, 503 ledger busy or Kafka
 * delivery failed. Connections idle or slow for timeout_s are closed.
 *
 * Before evhttp sees a request, its head is checked on the raw connection
 * (server/conn.c): it must be complete within header_timeout_s of its first
 * byte (else 408), and what libevent would answer with its own HTML page is
 * answered with the JSON error above and the connection closed: 501 unknown
 * or lowercase method (TRACE, CONNECT, "get"), 505 an HTTP version other
 * than 1.0/1.1, 400 a malformed request line, header or Content-Length, a
 * repeated Content-Length or Authorization header, or Content-Length with
 * Transfer-Encoding; 501 a Transfer-Encoding other than chunked, 413 a
 * Content-Length over 4 MiB, 414 a request line and 431 a head over 16 KiB.
 * HEAD works wherever GET does (the GET's headers, no body); absolute-form
 * targets ("GET http://host/v1/...") are served as their path. When file
 * descriptors run out, accepting pauses for 200 ms and the warning is
 * logged at most once a second with the count of those suppressed.
 *
 * /metrics needs no key: it holds totals only, never account ids. It has
 * tally_http_responses_total{class}, tally_http_events_total{result},
 * tally_batch_commit_seconds (histogram of this server's ingest commits),
 * tally_ledger_events, tally_ledger_quarantined_total{reason} (ledger-wide,
 * counted incrementally), and with --brokers tally_consumer_lag{topic,
 * partition} (broker high watermark minus the offset stored in the ledger),
 * tally_http_rate_limited_total (event requests answered 429),
 * tally_accounts{state} (gauge: accounts per balance state),
 * tally_outbox_events_total{type} (events written to the outbox) and
 * tally_outbox_events_pending{type} (gauge: not yet sent), with type one of
 * the ten types of tally/outbox.h or "other".
 *
 * Event ingest is rate-limited per API key (a token bucket per key id: rate
 * events a second, bursts of burst; see tally_server_opts): a request with
 * more events than its key's bucket holds is answered 429 "rate_limited"
 * with Retry-After in seconds, and nothing of it is stored or quarantined.
 * Each quarantined row records the id of the key that sent it.
 *
 * Admission (SPEC section 9): whether the account's balance pays for cards
 * (1..65536) x hours (a decimal above 0, at most 8784) of sku at today's
 * price under pricing (on_demand, the default, spot or reserved) without
 * going below its stop mark. The body is tally_admission_json's
 * (include/tally/balance.h): {"allowed","account","currency","sku",
 * "pricing","cards","hours","unit_price","cost","balance","stop_at",
 * "balance_after"} plus "shortfall" with the 402. An account not under spend
 * control (no grant, no limits) is always allowed. A missing, repeated,
 * unknown or malformed parameter, an unknown SKU, or a pricing the SKU does
 * not offer today is 400 "bad_query" naming it. Keys as for the balance: an
 * account key its own account only (404 otherwise), admin keys any, ingest
 * keys none (403). It writes nothing but what a balance read does (a
 * refresh fallen due).
 *
 * Idempotent grants: POST /v1/accounts/{id}/credits with "Idempotency-Key:
 * K" (1 to 255 printable ASCII characters without spaces, else 400
 * "bad_idempotency_key"; one such header, else 400) is stored once. The
 * same key with the same request (tally_ledger_grant_add says which
 * fields; an absent effective_at is not "now") is answered with the status
 * and body of the first answer, byte for byte, plus "Idempotent-Replayed:
 * true", and nothing is written; with a different request (another amount,
 * account, ...) it is 409 "conflict" and nothing is written. A refused
 * request (4xx) leaves no key behind. Other endpoints ignore the header.
 */
#ifndef TALLY_SERVER_H
#define TALLY_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tally/buf.h"
#include "tally/err.h"
#include "tally/ledger.h"

#define TALLY_HTTP_MAX_BODY   ((size_t)1 << 20) /* larger bodies: 413 */
#define TALLY_HTTP_MAX_EVENTS 1000              /* events per POST /v1/events */
#define TALLY_APIKEY_LEN      47                /* "tly_" + 43 characters */

typedef struct tally_server tally_server;

typedef struct tally_server_opts {
    const char *db_path;  /* the ledger (required) */
    const char *brokers;  /* NULL: events go straight into the ledger */
    const char *topic;    /* required with brokers */
    int timeout_s;        /* read/write timeout of a connection; 0: 30 s */
    int header_timeout_s; /* deadline for a whole request head; 0: 10 s */
    /* Event ingest per API key (token bucket): events a second (0: 1,000;
     * negative: no limit) and the bucket size (0: the larger of 2,000 and
     * the rate). Past it, POST /v1/events answers 429 with Retry-After. */
    int64_t ingest_rate, ingest_burst;
} tally_server_opts;

/* Opens the ledger (applying migrations) and, with brokers, creates the
 * producer. Borrows o's strings only during the call. On error *out is NULL
 * and why holds a one-line reason.
 * Errors: TALLY_INVAL (options), TALLY_DB, TALLY_IO, TALLY_KAFKA, TALLY_NOMEM. */
TALLY_MUST_CHECK tally_err tally_server_create(const tally_server_opts *o, tally_server **out,
                                               char *why, size_t cap);

/* Waits for Kafka deliveries still in flight (at most a few seconds), then
 * frees everything. Accepts NULL. */
void tally_server_destroy(tally_server *s);

/* Whether listen is a well-formed listen address (see tally_server_listen),
 * so that callers can refuse a bad one before opening anything. */
bool tally_server_addr_ok(const char *listen);

/* Binds the listening socket. listen is "HOST:PORT", ":PORT" (127.0.0.1)
 * or "PORT"; port 0 picks a free one. The bound address ("127.0.0.1:41234")
 * is written to bound. Errors: TALLY_INVAL (malformed address), TALLY_IO
 * (cannot bind), TALLY_NOMEM. */
TALLY_MUST_CHECK tally_err tally_server_listen(tally_server *s, const char *listen, char *bound,
                                               size_t cap, char *why, size_t why_cap);

/* Serves until SIGINT or SIGTERM. Errors: TALLY_IO. */
TALLY_MUST_CHECK tally_err tally_server_run(tally_server *s);

/* ---- Requests without a socket ------------------------------------------- */

typedef struct tally_http_request {
    const char *method;        /* "GET", "POST", ... */
    const char *uri;           /* request target: path and optional "?query" */
    const char *authorization; /* the Authorization header, or NULL */
    const char *body;          /* may hold any bytes; NULL when body_len is 0 */
    size_t body_len;
    const char *idempotency_key; /* the Idempotency-Key header, or NULL */
} tally_http_request;

typedef struct tally_http_response {
    int status;
    const char *content_type; /* static string */
    char allow[48];           /* the Allow header of a 405; else "" */
    char request_id[40];      /* also sent as X-Request-Id */
    int64_t retry_after_s;    /* > 0: the Retry-After header of a 429 */
    bool replayed;            /* the stored answer to an Idempotency-Key: Idempotent-Replayed */
    tally_buf body;
} tally_http_response;

/* Called exactly once per request with the answer; resp is borrowed for the
 * duration of the call. */
typedef void (*tally_http_reply_fn)(void *arg, const tally_http_response *resp);

/* Handles one request. The request is borrowed for the duration of the call.
 * reply is called before this returns, except for events produced to Kafka,
 * which are answered from the event loop once all deliveries are reported. */
void tally_server_handle(tally_server *s, const tally_http_request *req, tally_http_reply_fn reply,
                         void *arg);

/* ---- API keys ------------------------------------------------------------ */

/* Creates a key for one account (admin false, account not NULL) or an admin
 * key (admin true, account NULL), writes the key (NUL-terminated; cap >=
 * TALLY_APIKEY_LEN + 1) and its id. The key is not stored anywhere.
 * Errors: TALLY_INVAL (bad account or combination), TALLY_CRYPTO (no
 * randomness), TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_apikey_create(tally_ledger *l, const char *account, bool admin,
                                               char *key, size_t cap, int64_t *id_out);

/* Creates an ingest key: it may send events whose source starts with one of
 * sources[0..n) (1..TALLY_KEY_SOURCES_MAX prefixes of 1..127 bytes without
 * control characters; borrowed) and nothing else. Otherwise as
 * tally_apikey_create. Errors: TALLY_INVAL (no, too many or bad prefixes),
 * TALLY_CRYPTO, TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_apikey_create_ingest(tally_ledger *l, const char *const *sources,
                                                      size_t n, char *key, size_t cap,
                                                      int64_t *id_out);

/* Whether an event's source is one that an ingest key with these prefixes
 * may send: it starts with one of them. */
bool tally_apikey_source_allowed(const char (*sources)[TALLY_ID_MAX], size_t n, const char *source);

/* Revokes a key. Revoking a revoked key is TALLY_EXISTS.
 * Errors: TALLY_NOT_FOUND, TALLY_EXISTS, TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_apikey_revoke(tally_ledger *l, int64_t id);

typedef struct tally_apikey_info {
    int64_t id;
    tally_key_role role;
    char account[TALLY_NAME_MAX];                      /* "" unless role is TALLY_KEY_ACCOUNT */
    bool admin;                                        /* role == TALLY_KEY_ADMIN */
    char sources[TALLY_KEY_SOURCES_MAX][TALLY_ID_MAX]; /* ingest keys' prefixes */
    size_t n_sources;
    int64_t created_s;
    int64_t revoked_s; /* 0: active */
} tally_apikey_info;

/* Calls fn for every key, oldest first (never the key itself: it is not
 * stored). Stops at and returns fn's first error. Errors: TALLY_DB. */
typedef tally_err (*tally_apikey_fn)(void *ctx, const tally_apikey_info *k);
TALLY_MUST_CHECK tally_err tally_apikey_list(tally_ledger *l, tally_apikey_fn fn, void *ctx);

#endif
