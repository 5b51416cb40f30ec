/* Tests for base/fdio.c: every byte is written, and a failure says why. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

#include "tally/fdio.h"

static void test_writes_everything(void **state)
{
    (void)state;
    char path[600];
    snprintf(path, sizeof path, "%s/f", tu_tmpdir("fdio"));
    static char data[300000]; /* more than one pipe or page at a time */
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (char)('a' + i % 26);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(tally_write_all(fd, data, sizeof data), TALLY_OK);
    assert_int_equal(tally_write_all(fd, data, 0), TALLY_OK);
    assert_int_equal(close(fd), 0);
    static char back[sizeof data + 1];
    fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    size_t got = 0;
    for (ssize_t n; (n = read(fd, back + got, sizeof back - got)) > 0;)
        got += (size_t)n;
    close(fd);
    assert_int_equal(got, sizeof data);
    assert_memory_equal(back, data, sizeof data);
}

static void test_failure_sets_errno(void **state)
{
    (void)state;
    int p[2];
    assert_int_equal(pipe(p), 0);
    close(p[1]);
    errno = 0;
    assert_int_equal(tally_write_all(p[1], "x", 1), TALLY_IO); /* closed */
    assert_int_equal(errno, EBADF);
    close(p[0]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writes_everything),
        cmocka_unit_test(test_failure_sets_errno),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
