/* Shared harness of the HTTP API tests: a ledger made with the tally binary,
 * API keys, a real `tally serve` process on a free loopback port, and
 * requests made with curl. Each test file is one executable that includes
 * this header once. */
#ifndef TALLY_TEST_HTTP_H
#define TALLY_TEST_HTTP_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tally/server.h"
#include "testutil.h"

extern char **environ;

typedef struct http_fixture {
    char dir[512];
    char db[600];
    char addr[64];
    pid_t pid;
    char admin[64], acme[64], globex[64]; /* "Bearer <key>" header values */
    char ingest[64]; /* an ingest key for source prefix "host-" (event_json's "host-1") */
} http_fixture;

typedef struct http_answer {
    int status;
    tally_buf body;
    tally_buf headers;
} http_answer;

static inline void trim_newline(tally_buf *b)
{
    while (b->len && (b->data[b->len - 1] == '\n' || b->data[b->len - 1] == '\r'))
        b->data[--b->len] = '\0';
}

/* Runs `tally --db <db> <args>` and asserts it exits 0; returns its stdout. */
static inline void fx_tally_ok(const http_fixture *f, tally_buf *out, const char *args)
{
    int rc = tu_tally(out, "--db '%s' --key '%s/tally.key' %s", f->db, f->dir, args);
    if (rc != 0)
        fail_msg("tally %s: exit %d", args, rc);
}

/* Creates a key and stores "Bearer <key>" in hdr. */
static inline void fx_key(const http_fixture *f, const char *args, char hdr[64])
{
    tally_buf out;
    tally_buf_init(&out, 0);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "apikey create %s 2>/dev/null", args);
    fx_tally_ok(f, &out, cmd);
    trim_newline(&out);
    assert_int_equal(out.len, TALLY_APIKEY_LEN);
    snprintf(hdr, 64, "Bearer %s", out.data);
    tally_buf_release(&out);
}

/* A fresh ledger with the fixture rate card, a signing key and four keys:
 * admin, two accounts' and an ingest key for sources "host-...". */
static inline void fx_ledger(http_fixture *f, const char *tag)
{
    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "%s", tu_tmpdir(tag));
    snprintf(f->db, sizeof f->db, "%s/tally.db", f->dir);
    tally_buf out;
    tally_buf_init(&out, 0);
    fx_tally_ok(f, &out, "init >/dev/null");
    fx_tally_ok(f, &out, "keygen >/dev/null");
    fx_tally_ok(f, &out, "account set acme >/dev/null");
    fx_tally_ok(f, &out, "account set globex >/dev/null");
    tally_buf_release(&out);
    fx_key(f, "--admin", f->admin);
    fx_key(f, "--account acme", f->acme);
    fx_key(f, "--account globex", f->globex);
    fx_key(f, "--ingest --source host-", f->ingest);
}

/* Spawns argv with stdout and stderr in <dir>/<tag>.out and .err (stdin
 * /dev/null) and waits for the first line of its stdout. */
static inline pid_t spawn_first_line(const char *dir, const char *tag, const char *const *argv,
                                     char *line, size_t cap)
{
    char out_path[700], err_path[700];
    snprintf(out_path, sizeof out_path, "%s/%s.out", dir, tag);
    snprintf(err_path, sizeof err_path, "%s/%s.err", dir, tag);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid = 0;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    assert_int_equal(rc, 0);
    line[0] = '\0';
    for (int i = 0; i < 400 && !line[0]; i++) { /* up to 20 s (sanitizer builds) */
        tally_buf b;
        tally_buf_init(&b, 0);
        if (tu_read_file(out_path, &b) == 0 && b.len && strchr(b.data, '\n'))
            snprintf(line, cap, "%.*s", (int)(strchr(b.data, '\n') - b.data), b.data);
        tally_buf_release(&b);
        if (!line[0])
            usleep(50000);
    }
    if (!line[0])
        fail_msg("%s did not print its address (see %s)", tag, err_path);
    return pid;
}

/* Starts `tally serve --listen 127.0.0.1:0 <extra>` and reads its address. */
static inline void fx_start(http_fixture *f, const char *const *extra)
{
    const char *argv[24] = {TALLY_BINARY, "--db", f->db, "serve", "--listen", "127.0.0.1:0"};
    size_t n = 6;
    for (size_t i = 0; extra && extra[i] && n < 23; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    f->pid = spawn_first_line(f->dir, "serve", argv, f->addr, sizeof f->addr);
}

/* Sends SIGTERM and returns the exit status (-1: killed by a signal). */
static inline int stop_pid(pid_t pid)
{
    int st = 0;
    kill(pid, SIGTERM);
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Stops the server with SIGTERM and asserts a clean exit (0: no leak
 * reports under ASan either). */
static inline void fx_stop(http_fixture *f)
{
    if (f->pid <= 0)
        return;
    int rc = stop_pid(f->pid);
    f->pid = 0;
    if (rc != 0) {
        tu_sh(NULL, "cat '%s/serve.err' >&2", f->dir);
        fail_msg("tally serve exited with status %d", rc);
    }
}

/* One request with curl. auth is the whole Authorization value or NULL;
 * header (if not NULL) is one more header line, e.g. "Idempotency-Key: k"
 * (curl's -H syntax, no single quotes); body (if not NULL) is sent as is.
 * Returns the status. */
static inline int http_req_hdr(const http_fixture *f, http_answer *a, const char *method,
                               const char *path, const char *auth, const char *header,
                               const char *body, size_t body_len)
{
    char body_path[700], hdr_path[700];
    snprintf(body_path, sizeof body_path, "%s/req.body", f->dir);
    snprintf(hdr_path, sizeof hdr_path, "%s/resp.headers", f->dir);
    if (body) {
        FILE *fp = fopen(body_path, "wb");
        assert_non_null(fp);
        assert_int_equal(fwrite(body, 1, body_len, fp), body_len);
        fclose(fp);
    }
    tally_buf_init(&a->body, 0);
    tally_buf_init(&a->headers, 0);
    char auth_opt[160] = "", hdr_opt[1100] = "";
    /* A header that does not fit fails the test instead of being cut. */
    if (auth)
        assert_true(snprintf(auth_opt, sizeof auth_opt, "-H 'Authorization: %s'", auth) <
                    (int)sizeof auth_opt);
    if (header)
        assert_true(snprintf(hdr_opt, sizeof hdr_opt, "-H '%s'", header) < (int)sizeof hdr_opt);
    tally_buf out;
    tally_buf_init(&out, 0);
    int rc = tu_sh(&out,
                   "curl -sS --max-time 20 -X %s %s %s %s%s%s -H 'Content-Type: application/json' "
                   "-H 'Expect:' -D '%s' -w '\\n%%{http_code}' 'http://%s%s'",
                   method, auth_opt, hdr_opt, body ? "--data-binary '@" : "", body ? body_path : "",
                   body ? "'" : "", hdr_path, f->addr, path);
    if (rc != 0)
        fail_msg("curl %s %s failed (exit %d)", method, path, rc);
    char *nl = strrchr(out.data, '\n');
    assert_non_null(nl);
    a->status = (int)strtol(nl + 1, NULL, 10);
    assert_int_equal(tally_buf_append(&a->body, out.data, (size_t)(nl - out.data)), TALLY_OK);
    tally_buf_release(&out);
    assert_int_equal(tu_read_file(hdr_path, &a->headers), 0);
    return a->status;
}

static inline int http_req(const http_fixture *f, http_answer *a, const char *method,
                           const char *path, const char *auth, const char *body, size_t body_len)
{
    return http_req_hdr(f, a, method, path, auth, NULL, body, body_len);
}

static inline int http_get(const http_fixture *f, http_answer *a, const char *path,
                           const char *auth)
{
    return http_req(f, a, "GET", path, auth, NULL, 0);
}

static inline int http_send(const http_fixture *f, http_answer *a, const char *method,
                            const char *path, const char *auth, const char *body)
{
    return http_req(f, a, method, path, auth, body, strlen(body));
}

static inline void http_done(http_answer *a)
{
    tally_buf_release(&a->body);
    tally_buf_release(&a->headers);
}

/* Asserts that body contains text. */
static inline void assert_contains(const tally_buf *b, const char *text)
{
    if (!b->data || !strstr(b->data, text))
        fail_msg("expected %s in: %s", text, b->data ? b->data : "(empty)");
}

/* The server still answers /healthz with 200. */
static inline void assert_healthy(const http_fixture *f)
{
    http_answer a;
    assert_int_equal(http_get(f, &a, "/healthz", NULL), 200);
    assert_contains(&a.body, "\"status\":\"ok\"");
    http_done(&a);
}

/* An accelerator usage event as JSON. */
static inline void event_json_from(char *out, size_t cap, const char *source, const char *id,
                                   const char *account, const char *sku, const char *time,
                                   int cards, int seconds)
{
    snprintf(out, cap,
             "{\"specversion\":\"1.0\",\"id\":\"%s\",\"source\":\"%s\","
             "\"type\":\"accelerator.usage\",\"subject\":\"%s\",\"time\":\"%s\","
             "\"data\":{\"instance\":\"i-%s\",\"sku\":\"%s\",\"pricing\":\"on_demand\","
             "\"cards\":%d,\"seconds\":%d}}",
             id, source, account, time, account, sku, cards, seconds);
}

/* An accelerator event from source "host-1". */
static inline void event_json(char *out, size_t cap, const char *id, const char *account,
                              const char *sku, const char *time, int cards, int seconds)
{
    event_json_from(out, cap, "host-1", id, account, sku, time, cards, seconds);
}

#endif
