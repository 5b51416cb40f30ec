/* Output files of a run: DIR/<account>-<period>.{json,csv,html}.
 *
 * The JSON file holds the document's exact bytes (for a finalized invoice,
 * the bytes that were hashed and signed, so the file verifies on its own).
 * Each file is written to a temporary name and renamed into place, so a
 * reader never sees half a file. Account ids are percent-encoded where a
 * byte is not safe in a file name ('/', a leading '.', control bytes, ...). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ledger_int.h"

static tally_err write_file(const char *path, const tally_buf *data, char *why, size_t cap)
{
    char tmp[1100];
    int n = snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (n <= 0 || (size_t)n >= sizeof tmp) {
        snprintf(why, cap, "path too long: %s", path);
        return TALLY_IO;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666); /* as fopen's "w" */
    if (fd < 0)
        goto out_errno;
    bool ok = true;
    for (size_t off = 0; ok && off < data->len;) { /* no stdio: one write, its own buffer */
        ssize_t w = write(fd, data->data + off, data->len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w == 0)
            errno = EIO;
        ok = w > 0;
        off += ok ? (size_t)w : 0;
    }
    int saved = errno;
    if (close(fd) != 0 || !ok) {
        if (!ok)
            errno = saved;
        (void)unlink(tmp);
        goto out_errno;
    }
    if (rename(tmp, path) != 0) {
        (void)unlink(tmp);
        goto out_errno;
    }
    return TALLY_OK;
out_errno:
    snprintf(why, cap, "cannot write %s: %s", path, strerror(errno));
    return TALLY_IO;
}

enum { OUT_JSON, OUT_CSV, OUT_HTML };
static const char *const exts[] = {"json", "csv", "html"};

static tally_err render(tally_ledger *l, int kind, const char *doc, size_t len, tally_buf *out)
{
    if (kind == OUT_JSON)
        return tally_buf_append(out, doc, len);
    if (kind == OUT_CSV)
        return inv_doc_csv(doc, len, out);
    return ledger_invoice_html(l, doc, len, out);
}

tally_err inv_write_files(tally_ledger *l, const char *dir, const char *account, const char *period,
                          const char *doc, size_t len, char *why, size_t cap)
{
    tally_buf name, body;
    tally_buf_init(&name, 4096);
    tally_buf_init(&body, 0);
    tally_err e = TALLY_OK;
    for (int k = OUT_JSON; !e && k <= OUT_HTML; k++) {
        tally_buf_reset(&name);
        tally_buf_reset(&body);
        e = tally_invoice_file_name(&name, dir, account, period, exts[k]);
        if (!e)
            e = render(l, k, doc, len, &body);
        if (e) {
            snprintf(why, cap, "account %s: cannot render %s: %s", account, exts[k],
                     tally_err_str(e));
            break;
        }
        e = write_file(name.data, &body, why, cap);
    }
    tally_buf_release(&name);
    tally_buf_release(&body);
    return e;
}
