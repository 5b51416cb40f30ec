/* Output files of a run: DIR/<account>-<period>.{json,csv,html}.
 *
 * The JSON file holds the document's exact bytes (for a finalized invoice,
 * the bytes that were hashed and signed, so the file verifies on its own).
 * Each file gets its name only once it is written whole (write_file), so a
 * reader never sees half a file. Account ids are percent-encoded where a
 * byte is not safe in a file name ('/', a leading '.', control bytes, ...). */
#define _GNU_SOURCE /* O_TMPFILE */
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ledger_int.h"
#include "tally/fdio.h"

/* A file with no name yet in path's directory (O_TMPFILE), or -1 with errno
 * when the file system or kernel has none. */
static int unnamed_file(const char *path)
{
    const char *slash = strrchr(path, '/');
    char dir[1100];
    int n = slash ? snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path)
                  : snprintf(dir, sizeof dir, ".");
    if (n <= 0 || (size_t)n >= sizeof dir) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return open(n ? dir : "/", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666); /* as fopen's "w" */
}

/* Gives the unnamed file fd the name to (which must not exist). */
static int name_file(int fd, const char *to)
{
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    return linkat(AT_FDCWD, self, AT_FDCWD, to, AT_SYMLINK_FOLLOW);
}

/* The file gets its name only once it is written whole: an unnamed file
 * linked to path (one directory entry made), or, when path exists already
 * (an earlier run's file) or the system has no unnamed files, a file named
 * path.tmp renamed over it. */
static tally_err write_file(const char *path, const tally_buf *data, char *why, size_t cap)
{
    char tmp[1100];
    int n = snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (n <= 0 || (size_t)n >= sizeof tmp) {
        snprintf(why, cap, "path too long: %s", path);
        return TALLY_IO;
    }
    int fd = unnamed_file(path);
    bool unnamed = fd >= 0;
    if (!unnamed)
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0)
        goto out_errno;
    bool ok = tally_write_all(fd, data->data, data->len) == TALLY_OK;
    bool placed = false;
    if (ok && unnamed) {
        placed = name_file(fd, path) == 0;
        if (!placed && errno != EEXIST && errno != ENOENT) /* ENOENT: no /proc */
            ok = false;
        if (!placed && ok) { /* replace the file there: give a temporary name first */
            (void)unlink(tmp);
            ok = name_file(fd, tmp) == 0;
        }
    }
    int saved = errno;
    if (close(fd) != 0 || !ok) {
        if (!ok)
            errno = saved;
        if (!unnamed || !placed)
            (void)unlink(tmp);
        goto out_errno;
    }
    if (!placed && rename(tmp, path) != 0) {
        saved = errno;
        (void)unlink(tmp);
        errno = saved;
        goto out_errno;
    }
    return TALLY_OK;
out_errno:
    snprintf(why, cap, "cannot write %s: %s", path, strerror(errno));
    return TALLY_IO;
}

enum { OUT_JSON, OUT_CSV, OUT_HTML };
static const char *const exts[] = {"json", "csv", "html"};

/* One file's body; root is the document parsed once for the CSV and the
 * page. */
static tally_err render(tally_ledger *l, int kind, const char *doc, size_t len,
                        struct json_object *root, tally_buf *out)
{
    if (kind == OUT_JSON)
        return tally_buf_append(out, doc, len);
    if (kind == OUT_CSV)
        return inv_doc_csv_parsed(root, out);
    return ledger_invoice_html_parsed(l, root, out);
}

tally_err inv_write_files(tally_ledger *l, const char *dir, const char *account, const char *period,
                          const char *doc, size_t len, char *why, size_t cap)
{
    tally_buf name, body;
    tally_buf_init(&name, 4096);
    tally_buf_init(&body, 0);
    struct json_object *root = NULL;
    tally_err e = tally_invoice_parse(doc, len, &root);
    if (e)
        snprintf(why, cap, "account %s: cannot render its files: %s", account, tally_err_str(e));
    for (int k = OUT_JSON; !e && k <= OUT_HTML; k++) {
        tally_buf_reset(&name);
        tally_buf_reset(&body);
        e = tally_invoice_file_name(&name, dir, account, period, exts[k]);
        if (!e)
            e = render(l, k, doc, len, root, &body);
        if (e) {
            snprintf(why, cap, "account %s: cannot render %s: %s", account, exts[k],
                     tally_err_str(e));
            break;
        }
        e = write_file(name.data, &body, why, cap);
    }
    json_object_put(root);
    tally_buf_release(&name);
    tally_buf_release(&body);
    return e;
}
