-- Control tables of the source: the journal entries replayed into it, per
-- journal identity, written in the same transaction as the rows they changed.
-- A row is a run: the `entries` journal entries from `first_seq` to `seq`
-- (a replay batch), or the one entry `seq` when `first_seq` is NULL (rows
-- written before runs were recorded). Runs never overlap.
CREATE TABLE IF NOT EXISTS _cutover_applied (
    journal    TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    delivery   TEXT NOT NULL,
    applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    first_seq  INTEGER,
    entries    INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (journal, seq)
) WITHOUT ROWID;

-- Source columns the spec does not carry (`ignore`), kept from a row that
-- replay deleted: when the same key comes back (a delete and re-insert, a
-- REPLACE), the row gets them back instead of defaults. `row` is a JSON
-- object of those columns.
CREATE TABLE IF NOT EXISTS _cutover_kept (
    journal TEXT NOT NULL,
    tbl     TEXT NOT NULL,
    key     TEXT NOT NULL,
    row     TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    PRIMARY KEY (journal, tbl, key)
);
