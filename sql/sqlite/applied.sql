-- Control table of the source: every journal entry replayed into it, written
-- in the same transaction as the rows it changed.
CREATE TABLE IF NOT EXISTS _cutover_applied (
    seq        INTEGER PRIMARY KEY,
    delivery   TEXT NOT NULL,
    applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
