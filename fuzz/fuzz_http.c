/* libFuzzer target for the HTTP API's request handling, without a socket:
 * route matching, path and query decoding, authentication, body validation
 * and the handlers, through tally_server_handle() on a real ledger in a
 * temporary directory; plus the parsers on their own.
 *
 * Input: byte 0 picks the method, byte 1 the Authorization header (none,
 * admin key, account key "acme", malformed, unknown key); then the request
 * target up to the first '\n'; the rest is the body.
 *
 * Invariants: every request is answered exactly once with a status in
 * 200..599; every JSON answer parses; an account key is never answered 2xx
 * for a path naming another account; the parsers stay inside their input. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include "../server/server_int.h"
#include "tally/embed.h"
#include "tally/server.h"
#include "tally/ledger_sql.h"

#define FUZZ_MAX_TARGET 2048

static tally_server *server;
static char admin_hdr[80], acme_hdr[80], tmp_dir[256];

static const char *const methods[] = {"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD"};

static void die(const char *what)
{
    fprintf(stderr, "fuzz_http: %s\n", what);
    abort();
}

static void remove_tmp_dir(void)
{
    char cmd[600];
    tally_server_destroy(server);
    server = NULL;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "fuzz_http: could not remove %s\n", tmp_dir);
}

/* A ledger with the fixture rate card and two keys, under $TMPDIR, removed
 * at exit. */
static void make_server(void)
{
    char db[300], why[256];
    snprintf(tmp_dir, sizeof tmp_dir, "%s/tally-fuzz-http-%d",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    snprintf(db, sizeof db, "%s/ledger.db", tmp_dir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", tmp_dir, tmp_dir);
    if (system(cmd) != 0)
        die("cannot make the temporary directory");
    atexit(remove_tmp_dir);
    tally_server_opts o = {.db_path = db};
    if (tally_server_create(&o, &server, why, sizeof why) != TALLY_OK)
        die(why);
    tally_ledger *l = server->ledger;
    const tally_embedded *card = tally_embedded_find("fixtures/pricebook/ratecard.json");
    char key[TALLY_APIKEY_LEN + 1];
    int64_t id;
    if (!card || tally_ledger_ratecard_load(l, card->data, card->len, why, sizeof why) ||
        tally_ledger_exec(l, "PRAGMA synchronous = OFF") ||
        tally_ledger_account_set(l, "acme", NULL, NULL, NULL) ||
        tally_ledger_account_set(l, "globex", NULL, NULL, NULL))
        die("cannot set up the ledger");
    if (tally_apikey_create(l, NULL, true, key, sizeof key, &id))
        die("cannot create the admin key");
    snprintf(admin_hdr, sizeof admin_hdr, "Bearer %s", key);
    if (tally_apikey_create(l, "acme", false, key, sizeof key, &id))
        die("cannot create the account key");
    snprintf(acme_hdr, sizeof acme_hdr, "Bearer %s", key);
}

typedef struct answer {
    int calls;
    bool account_key;
    const char *target;
} answer;

/* Whether target names an account other than acme in /v1/accounts/{id}. */
static bool names_other_account(const char *target)
{
    static const char prefix[] = "/v1/accounts/";
    if (strncmp(target, prefix, sizeof prefix - 1) != 0)
        return false;
    const char *id = target + sizeof prefix - 1;
    size_t n = strcspn(id, "/?");
    char decoded[SRV_PARAM_MAX];
    if (srv_pct_decode(id, n, false, decoded, sizeof decoded) != TALLY_OK)
        return false; /* the router answers 400 */
    return strcmp(decoded, "acme") != 0;
}

static void on_reply(void *arg, const tally_http_response *r)
{
    answer *a = arg;
    a->calls++;
    if (r->status < 200 || r->status > 599)
        die("status out of range");
    if (a->account_key && r->status < 300 && names_other_account(a->target))
        die("an account key reached another account");
    if (strcmp(r->content_type, "application/json") != 0 || r->body.len == 0)
        return;
    json_tokener *tok = json_tokener_new();
    json_object *o = tok ? json_tokener_parse_ex(tok, r->body.data, (int)r->body.len) : NULL;
    if (!o)
        die("a JSON answer does not parse");
    json_object_put(o);
    json_tokener_free(tok);
}

/* The parsers on their own: spans inside the input, decoded text bounded. */
static void fuzz_parsers(const char *target, const char *body, size_t body_len)
{
    static srv_span spans[TALLY_HTTP_MAX_EVENTS];
    size_t n = 0;
    const char *why = NULL;
    if (srv_json_array_split(body, body_len, spans, TALLY_HTTP_MAX_EVENTS, &n, &why) == TALLY_OK)
        for (size_t i = 0; i < n; i++)
            if (spans[i].len == 0 || spans[i].off + spans[i].len > body_len)
                die("array split span out of bounds");
    const char *q = strchr(target, '?');
    char from[64], to[64], by[16];
    srv_qparam p[] = {{"from", from, sizeof from, false},
                      {"to", to, sizeof to, false},
                      {"by", by, sizeof by, false}};
    if (q && srv_query_parse(q + 1, strlen(q + 1), p, 3, &why) == TALLY_OK)
        for (size_t i = 0; i < 3; i++)
            if (p[i].seen && strlen(p[i].buf) >= p[i].cap)
                die("query value not terminated");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!server)
        make_server();
    if (size < 2)
        return 0;
    const char *auth[] = {NULL,      admin_hdr,
                          acme_hdr,  "Bearer tly_",
                          "Basic x", "Bearer tly_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"};
    int method = data[0] % (sizeof methods / sizeof *methods);
    int who = data[1] % (sizeof auth / sizeof *auth);
    const char *rest = (const char *)data + 2;
    size_t rest_len = size - 2;
    const char *nl = memchr(rest, '\n', rest_len);
    size_t target_len = nl ? (size_t)(nl - rest) : rest_len;
    if (target_len > FUZZ_MAX_TARGET)
        return 0;
    char target[FUZZ_MAX_TARGET + 1];
    memcpy(target, rest, target_len);
    target[target_len] = '\0'; /* evhttp hands over a C string */
    const char *body = nl ? nl + 1 : "";
    size_t body_len = nl ? rest_len - target_len - 1 : 0;
    fuzz_parsers(target, body, body_len);
    tally_http_request req = {methods[method],        target,   auth[who],
                              body_len ? body : NULL, body_len, NULL};
    answer a = {0, who == 2, target};
    tally_server_handle(server, &req, on_reply, &a);
    if (a.calls != 1)
        die("a request was not answered exactly once");
    return 0;
}
