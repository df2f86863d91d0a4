-- Control tables of the target. They live in the database they guard so that
-- they commit with the data.

-- The journal: one table per journaled table and column list,
-- _cutover_journal_<img> (seq INTEGER PRIMARY KEY, op, o1.., n1..), holding
-- each change's before-image (o) and after-image (n) as native values; a
-- table wider than one part holds continues in _cutover_journal_<img>_2, ...
-- Every entry is listed in _cutover_journal_entries (seq, img, op), where
-- each trigger takes its seq, and the view _cutover_journal reads that list.
-- All are made by `journal install` (src/db/sqlite/capture.rs).

-- The journal's identity: a second cutover attempt on a fresh or restored
-- target gets another, so the source's applied set of one attempt can never
-- be taken for the other's.
CREATE TABLE IF NOT EXISTS _cutover_journal_id (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    journal      TEXT NOT NULL,
    tables       TEXT NOT NULL,
    -- The journal's entries are those past this seq: a target restored from
    -- a copy, whose earlier entries belong to an attempt already rolled
    -- back, starts a new identity after them.
    after_seq    INTEGER NOT NULL DEFAULT 0,
    installed_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

-- One row per journaled table and column list: `columns` is the JSON list
-- of target columns the image tables hold, in order (c1, c2, ...).
CREATE TABLE IF NOT EXISTS _cutover_journal_tables (
    img          INTEGER PRIMARY KEY,
    tbl          TEXT NOT NULL,
    target_table TEXT NOT NULL,
    columns      TEXT NOT NULL,
    installed_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

-- At most one row: the fence, its journal boundary and the fingerprint of what
-- it protects.
CREATE TABLE IF NOT EXISTS _cutover_fence (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    boundary      INTEGER NOT NULL,
    journal_rows  INTEGER NOT NULL,
    fingerprint   TEXT NOT NULL,
    tables        TEXT NOT NULL,
    -- The fingerprint's parts (JSON), so a breach can be named, not just seen.
    parts         TEXT NOT NULL,
    fenced_at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

-- Load checkpoint per table: the last key committed, so that a load stopped
-- part-way resumes rather than starting over.
CREATE TABLE IF NOT EXISTS _cutover_load (
    tbl       TEXT PRIMARY KEY,
    last_key  TEXT,
    rows      INTEGER NOT NULL,
    done      INTEGER NOT NULL,
    updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
