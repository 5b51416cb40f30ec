/* tally_version() and `tally --version` agree with each other and with
 * project(VERSION) (base/version.c). */
#include <stdio.h>
#include <string.h>

#include "testutil.h"

#include "tally/version.h"

static void test_number_matches_string(void **state)
{
    (void)state;
    int major = -1, minor = -1, patch = -1, n = 0;
    const char *s = tally_version_str();
    assert_int_equal(sscanf(s, "%d.%d.%d%n", &major, &minor, &patch, &n), 3);
    assert_int_equal((size_t)n, strlen(s));
    assert_int_equal(tally_version(), (major << 24) | (minor << 16) | (patch << 8));
    assert_true(tally_version() > 0);
}

static void test_cli_prints_it(void **state)
{
    (void)state;
    tally_buf out;
    tally_buf_init(&out, 0);
    assert_int_equal(tu_tally(&out, "--version"), 0);
    char want[64];
    snprintf(want, sizeof want, "tally %s\n", tally_version_str());
    assert_string_equal(out.data, want);
    tally_buf_release(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_number_matches_string),
        cmocka_unit_test(test_cli_prints_it),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
