/* Tally's one error type.
 *
 * Every fallible function returns a tally_err: TALLY_OK (0) on success, a
 * negative code otherwise. The list below is the single source for both the
 * enum and tally_err_str(). Billing outcomes (a repeated event, a conflicting
 * one, an arithmetic overflow, a missing price) are codes of their own so that
 * callers can act on them rather than parse messages. */
#ifndef TALLY_ERR_H
#define TALLY_ERR_H

#define TALLY_MUST_CHECK __attribute__((warn_unused_result))

/* X(name, value, message) */
#define TALLY_ERRORS(X)                                                                            \
    X(OK, 0, "ok")                                                                                 \
    X(INVAL, -1, "invalid argument")                                                               \
    X(NOMEM, -2, "out of memory")                                                                  \
    X(IO, -3, "input/output error")                                                                \
    X(DB, -4, "ledger database error")                                                             \
    X(KAFKA, -5, "kafka error")                                                                    \
    X(PARSE, -6, "malformed input")                                                                \
    X(RANGE, -7, "value out of range")                                                             \
    X(TOO_LARGE, -8, "input too large")                                                            \
    X(NOT_FOUND, -9, "not found")                                                                  \
    X(EXISTS, -10, "already recorded with the same content")                                       \
    X(EXISTS_DIFFERENT, -11, "already recorded with different content")                            \
    X(OVERFLOW, -12, "arithmetic overflow")                                                        \
    X(NO_PRICE, -13, "no price for this usage")                                                    \
    X(UNKNOWN_CURRENCY, -14, "unknown currency")                                                   \
    X(CURRENCY_MISMATCH, -15, "currency does not match")                                           \
    X(FINALIZED, -16, "invoice is finalized and cannot change")                                    \
    X(STALE, -17, "stale writer: stored offset moved")                                             \
    X(TAMPERED, -18, "ledger integrity check failed")                                              \
    X(BUSY, -19, "resource is held by another process")                                            \
    X(CRYPTO, -20, "cryptographic operation failed")                                               \
    X(AUTH, -21, "not authorised")                                                                 \
    X(UNSUPPORTED, -22, "not supported")                                                           \
    X(INTERNAL, -23, "internal error")

typedef enum tally_err {
#define TALLY_ERR_ENUM(name, value, msg) TALLY_##name = value,
    TALLY_ERRORS(TALLY_ERR_ENUM)
#undef TALLY_ERR_ENUM
} tally_err;

/* A static, human-readable message for e; never NULL. */
const char *tally_err_str(tally_err e);
/* The code's stable name, e.g. "EXISTS_DIFFERENT"; never NULL. */
const char *tally_err_name(tally_err e);

#endif
