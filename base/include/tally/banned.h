/* Functions Tally's own code must not call, in the manner of git's banned.h.
 *
 * Each of these either writes without a bound (sprintf, vsprintf, strcpy,
 * strcat, gets), truncates silently or leaves a string unterminated
 * (strncpy, strncat), hides errors (atoi, atol, atoll: use strtoll and check
 * errno and the end pointer) or keeps hidden state (strtok: use strtok_r).
 * Use tally_buf, tally_fmt (tally/buf.h), snprintf whose truncation is
 * checked, or memcpy with a checked length.
 *
 * The build force-includes this header into every translation unit of Tally
 * (CMakeLists.txt: -include). git includes its banned.h last, after the
 * system headers, and redefines the names as macros; a header read first
 * cannot do that without breaking the system headers' own declarations, so
 * this one redeclares the functions (compatible with libc's declarations,
 * which merge with it) as deprecated and makes that diagnostic an error.
 * It includes only the compiler's freestanding headers, so a file's own
 * feature-test macros (_GNU_SOURCE) still take effect.
 *
 * Never add a function here without replacing its uses; never remove one to
 * make code compile. scripts/check-banned checks the same list textually in
 * files the build does not compile (fuzz/, with TALLY_FUZZ off). */
#ifndef TALLY_BANNED_H
#define TALLY_BANNED_H

#include <stdarg.h>
#include <stddef.h>

#pragma GCC diagnostic error "-Wdeprecated-declarations"

#define TALLY_BANNED(why) __attribute__((deprecated("banned in Tally (tally/banned.h): " why)))

char *strcpy(char *dst, const char *src) TALLY_BANNED("use memcpy with a checked length");
char *strcat(char *dst, const char *src) TALLY_BANNED("use tally_buf or tally_fmt");
char *strncpy(char *dst, const char *src, size_t n) TALLY_BANNED("use tally_fmt");
char *strncat(char *dst, const char *src, size_t n) TALLY_BANNED("use tally_buf");
int sprintf(char *dst, const char *fmt, ...) TALLY_BANNED("use tally_fmt or tally_buf_printf");
int vsprintf(char *dst, const char *fmt, va_list ap) TALLY_BANNED("use vsnprintf and check");
char *gets(char *s) TALLY_BANNED("use fgets");
int atoi(const char *s) TALLY_BANNED("use strtoll and check errno and the end");
long atol(const char *s) TALLY_BANNED("use strtoll and check errno and the end");
long long atoll(const char *s) TALLY_BANNED("use strtoll and check errno and the end");
char *strtok(char *s, const char *delim) TALLY_BANNED("use strtok_r");

#endif
