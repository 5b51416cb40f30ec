/* Proleptic Gregorian calendar arithmetic on integers, shared by time.c
 * (RFC 3339), period.c (periods and days) and zone.c (POSIX zone rules).
 * Defined in time.c. */
#ifndef TALLY_CIVIL_INT_H
#define TALLY_CIVIL_INT_H

#include <stdbool.h>
#include <stdint.h>

/* a / b rounded toward negative infinity (b > 0). */
int64_t civil_floor_div(int64_t a, int64_t b);
bool civil_is_leap(int64_t y);
/* m 1..12. */
int civil_days_in_month(int64_t y, int m);
/* Days since 1970-01-01 of y-m-d (H. Hinnant's days_from_civil). */
int64_t civil_days_from(int64_t y, int m, int d);
/* The date of a day number (the inverse). */
void civil_from_days(int64_t z, int64_t *y, int *m, int *d);

#endif
