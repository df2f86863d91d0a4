-- Control tables of `cutover sync`, in the target.

-- One row per committed sync batch: its content digest (the batch id), how
-- many rows it carried and changed, and the watermark range it covered. The
-- cursor is the last batch's (last_watermark, last_key); the rows before it
-- are the provenance the gate reports.
CREATE TABLE IF NOT EXISTS _cutover_cursor (
    tbl             TEXT NOT NULL,
    batch_no        INTEGER NOT NULL,
    batch           TEXT NOT NULL,
    rows            INTEGER NOT NULL,
    changed         INTEGER NOT NULL,
    first_watermark,
    last_watermark,
    last_key        TEXT NOT NULL,
    committed_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (tbl, batch_no)
);

-- The source's columns and declared types as the last sync saw them, so the
-- next one notices a column whose type changed.
CREATE TABLE IF NOT EXISTS _cutover_source_schema (
    tbl       TEXT NOT NULL,
    column    TEXT NOT NULL,
    decl_type TEXT NOT NULL,
    PRIMARY KEY (tbl, column)
);

-- Columns `sync --evolve` added to the target, carried as copy until the
-- spec maps them.
CREATE TABLE IF NOT EXISTS _cutover_evolved (
    tbl           TEXT NOT NULL,
    source_column TEXT NOT NULL,
    target_column TEXT NOT NULL,
    added_at      TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (tbl, source_column)
);
