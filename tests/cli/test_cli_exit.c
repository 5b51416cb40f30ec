/* The one rule from an error to the exit status (cli/exit.c): 0 for OK, 2 for
 * bad input, 1 for retriable and fatal errors, for every code; and the
 * commands that used to disagree with it now follow it. */
#include <string.h>

#include "testutil.h"

/* cli/exit.c is part of the tally executable, not of a library. */
#include "../../cli/exit.c"

static const tally_err all_codes[] = {
#define ALL_CODES(name, value, cls, msg) TALLY_##name,
    TALLY_ERRORS(ALL_CODES)
#undef ALL_CODES
};

static void test_exit_code_follows_class(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof all_codes / sizeof *all_codes; i++) {
        tally_err e = all_codes[i];
        int want = e == TALLY_OK ? 0 : tally_err_is_input(e) ? 2 : 1;
        if (cli_exit_code(e) != want)
            fail_msg("%s exits %d, want %d", tally_err_name(e), cli_exit_code(e), want);
    }
    assert_int_equal(cli_exit_code(TALLY_INVAL), CLI_USAGE);
    assert_int_equal(cli_exit_code(TALLY_NOT_FOUND), CLI_USAGE);
    assert_int_equal(cli_exit_code(TALLY_DB), CLI_FAIL);
    assert_int_equal(cli_exit_code(TALLY_BUSY), CLI_FAIL);
    assert_int_equal(cli_exit_code((tally_err)-999), CLI_FAIL);
}

/* keygen over an existing key and pubkey of a missing one are bad input (2). */
static void test_key_commands(void **state)
{
    (void)state;
    const char *dir = tu_tmpdir("cli-exit");
    assert_int_equal(tu_tally(NULL, "--key '%s/k' keygen >/dev/null", dir), 0);
    tally_buf err;
    tally_buf_init(&err, 0);
    assert_int_equal(tu_tally(&err, "--key '%s/k' keygen 2>&1 >/dev/null", dir), 2);
    assert_non_null(strstr(err.data, "already exists"));
    assert_int_equal(tu_tally(NULL, "--key '%s/missing' pubkey 2>/dev/null", dir), 2);
    assert_int_equal(tu_tally(NULL, "--key '%s/k' pubkey >/dev/null", dir), 0);
    tally_buf_release(&err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exit_code_follows_class),
        cmocka_unit_test(test_key_commands),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
