/* Tally's one error type.
 *
 * Every fallible function returns a tally_err: TALLY_OK (0) on success, a
 * negative code otherwise. The list below is the single source for the enum,
 * tally_err_str(), tally_err_name() and tally_err_class_of(). Billing outcomes (a
 * repeated event, a conflicting one, an arithmetic overflow, a missing price)
 * are codes of their own so that callers can act on them rather than parse
 * messages.
 *
 * Every code has one class, as librdkafka's errors answer
 * rd_kafka_error_is_retriable() and rd_kafka_error_is_fatal():
 *
 *   INPUT      the request itself is wrong: the same request fails the same
 *              way again, nothing was changed, the caller must change it.
 *              CLI exit status 2; HTTP 4xx.
 *   RETRIABLE  a transient condition (a lock, a full disk, memory, brokers):
 *              the same request may succeed later. CLI exit status 1; HTTP 503.
 *   FATAL      the program or its stored state is wrong (an unexpected SQLite
 *              error, tampering, an unusable key, a bug): retrying cannot
 *              help, an operator must look. CLI exit status 1; HTTP 500.
 *
 *   code               class      why
 *   OK                 NONE       success
 *   INVAL              INPUT      an argument or field is not acceptable
 *   NOMEM              RETRIABLE  allocation failed; memory may come back
 *   IO                 RETRIABLE  read/write failed or the disk is full
 *   DB                 FATAL      SQLite failed unexpectedly (constraint, corruption)
 *   KAFKA              RETRIABLE  brokers unreachable or an operation timed out
 *   PARSE              INPUT      malformed input (JSON, time, amount, ...)
 *   RANGE              INPUT      a value outside its allowed range
 *   TOO_LARGE          INPUT      input over its size cap
 *   NOT_FOUND          INPUT      the named account, invoice, sku, key, ... is unknown
 *   EXISTS             INPUT      already recorded with the same content
 *   EXISTS_DIFFERENT   INPUT      already recorded with different content (conflict)
 *   OVERFLOW           INPUT      the input's amounts overflow exact arithmetic
 *   NO_PRICE           INPUT      the usage has no price in force
 *   UNKNOWN_CURRENCY   INPUT      not an ISO 4217 code Tally knows
 *   CURRENCY_MISMATCH  INPUT      the currency differs from the account's
 *   FINALIZED          INPUT      the invoice is final; corrections are new entries
 *   STALE              RETRIABLE  another writer moved a stored offset; re-read
 *   TAMPERED           FATAL      the ledger fails its integrity checks
 *   BUSY               RETRIABLE  the resource is held by another process
 *   CRYPTO             FATAL      the signing key is missing or unusable
 *   AUTH               INPUT      the credentials presented are not accepted
 *   UNSUPPORTED        FATAL      the stored state needs a newer tally
 *   INTERNAL           FATAL      a broken invariant (a bug)
 */
#ifndef TALLY_ERR_H
#define TALLY_ERR_H

#include <stdbool.h>

#define TALLY_MUST_CHECK __attribute__((warn_unused_result))

/* X(name, value, class, message) */
#define TALLY_ERRORS(X)                                                                            \
    X(OK, 0, NONE, "ok")                                                                           \
    X(INVAL, -1, INPUT, "invalid argument")                                                        \
    X(NOMEM, -2, RETRIABLE, "out of memory")                                                       \
    X(IO, -3, RETRIABLE, "input/output error")                                                     \
    X(DB, -4, FATAL, "ledger database error")                                                      \
    X(KAFKA, -5, RETRIABLE, "kafka error")                                                         \
    X(PARSE, -6, INPUT, "malformed input")                                                         \
    X(RANGE, -7, INPUT, "value out of range")                                                      \
    X(TOO_LARGE, -8, INPUT, "input too large")                                                     \
    X(NOT_FOUND, -9, INPUT, "not found")                                                           \
    X(EXISTS, -10, INPUT, "already recorded with the same content")                                \
    X(EXISTS_DIFFERENT, -11, INPUT, "already recorded with different content")                     \
    X(OVERFLOW, -12, INPUT, "arithmetic overflow")                                                 \
    X(NO_PRICE, -13, INPUT, "no price for this usage")                                             \
    X(UNKNOWN_CURRENCY, -14, INPUT, "unknown currency")                                            \
    X(CURRENCY_MISMATCH, -15, INPUT, "currency does not match")                                    \
    X(FINALIZED, -16, INPUT, "invoice is finalized and cannot change")                             \
    X(STALE, -17, RETRIABLE, "stale writer: stored offset moved")                                  \
    X(TAMPERED, -18, FATAL, "ledger integrity check failed")                                       \
    X(BUSY, -19, RETRIABLE, "resource is held by another process")                                 \
    X(CRYPTO, -20, FATAL, "cryptographic operation failed")                                        \
    X(AUTH, -21, INPUT, "not authorised")                                                          \
    X(UNSUPPORTED, -22, FATAL, "not supported")                                                    \
    X(INTERNAL, -23, FATAL, "internal error")

typedef enum tally_err {
#define TALLY_ERR_ENUM(name, value, cls, msg) TALLY_##name = value,
    TALLY_ERRORS(TALLY_ERR_ENUM)
#undef TALLY_ERR_ENUM
} tally_err;

/* What kind of failure a code is (see the table above). */
typedef enum tally_err_class {
    TALLY_ERR_CLASS_NONE = 0,  /* TALLY_OK */
    TALLY_ERR_CLASS_INPUT,     /* bad input: change the request */
    TALLY_ERR_CLASS_RETRIABLE, /* transient: the same request may succeed later */
    TALLY_ERR_CLASS_FATAL,     /* retrying cannot help */
} tally_err_class;

/* A static, human-readable message for e; never NULL. */
const char *tally_err_str(tally_err e);
/* The code's stable name, e.g. "EXISTS_DIFFERENT"; never NULL. */
const char *tally_err_name(tally_err e);
/* e's class; a value that is not a tally_err is FATAL. */
tally_err_class tally_err_class_of(tally_err e);
/* "none", "input", "retriable" or "fatal"; never NULL. */
const char *tally_err_class_name(tally_err_class c);
/* Shorthands for tally_err_class_of(e) == INPUT, RETRIABLE, FATAL. */
bool tally_err_is_input(tally_err e);
bool tally_err_is_retriable(tally_err e);
bool tally_err_is_fatal(tally_err e);

#endif
