/* Tally's version, as librdkafka's rd_kafka_version() and
 * rd_kafka_version_str(). The number comes from CMakeLists.txt's
 * project(VERSION), the one place it is written. */
#ifndef TALLY_VERSION_H
#define TALLY_VERSION_H

/* The library's version as 0xMMmmpp00 (major, minor, patch, one byte each,
 * the low byte 0), so versions compare as integers. */
int tally_version(void);
/* The same as "MAJOR.MINOR.PATCH"; static, never NULL. */
const char *tally_version_str(void);

#endif
