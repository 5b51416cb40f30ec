-- Tally ledger, migration 13: traffic and token usage summed per hour.
--
-- usage_points holds one row per (account, meter, dim, dim2, second). An
-- account that reports every second has 2.6 million rows a month per
-- dimension, and rating its month (an invoice run, and the running charges
-- that every usage batch refreshes: SPEC section 9) would read them all.
-- usage_points_hourly holds the same quantities summed per UTC hour,
-- written by each ingest commit in the transaction that writes the seconds
-- (one row per dimension and hour the commit touched: ledger/batch_agg.c),
-- so it never disagrees with them; `tally verify` recomputes it and names an
-- hour that differs. (A trigger per second would cost the write path more
-- than the rows it saves.) The invoice
-- engine reads an hour's sum instead of its seconds when no price, grant
-- window or period edge falls inside the hour (ledger/invoice_gather.c), so
-- every second of it is priced and credited alike and the line is the same
-- to the fen. qty is NULL when the hour's sum would pass 64 bits: that hour
-- is read second by second.
CREATE TABLE usage_points_hourly (
  account TEXT NOT NULL,
  meter   INTEGER NOT NULL,
  dim     TEXT NOT NULL,
  dim2    TEXT NOT NULL,
  hour_s  INTEGER NOT NULL,   -- t_s - t_s % 3600
  qty     INTEGER CHECK (qty >= 0),
  PRIMARY KEY (account, meter, dim, dim2, hour_s)
) STRICT, WITHOUT ROWID;
CREATE INDEX usage_points_hourly_by_time ON usage_points_hourly(account, hour_s);

INSERT INTO usage_points_hourly(account, meter, dim, dim2, hour_s, qty)
SELECT account, meter, dim, dim2, t_s - t_s % 3600,
       CASE WHEN max(qty) <= 9223372036854775807 / count(*) THEN sum(qty) END
FROM usage_points GROUP BY account, meter, dim, dim2, t_s - t_s % 3600;

CREATE TRIGGER usage_points_hourly_delete AFTER DELETE ON usage_points BEGIN
  UPDATE usage_points_hourly SET qty = CASE WHEN qty IS NULL THEN NULL ELSE qty - OLD.qty END
  WHERE account = OLD.account AND meter = OLD.meter AND dim = OLD.dim AND dim2 = OLD.dim2
    AND hour_s = OLD.t_s - OLD.t_s % 3600;
END;
