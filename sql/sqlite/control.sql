-- Control tables of the target. They live in the database they guard so that
-- they commit with the data.

-- Every write to a journaled table, in commit order: which table (`img`,
-- a row of _cutover_journal_tables) and what happened. The row images live
-- in that table's image tables (_cutover_old_<img>, _cutover_new_<img>),
-- whose rowid is this seq: native values, no function calls in the
-- triggers, so any SQLite from 3.31 on, any table width and
-- `trusted_schema=OFF` journal every value bit for bit.
CREATE TABLE IF NOT EXISTS _cutover_journal (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    img INTEGER NOT NULL,
    op  TEXT NOT NULL CHECK (op IN ('insert', 'update', 'delete'))
);

-- The journal's identity: a second cutover attempt on a fresh or restored
-- target gets another, so the source's applied set of one attempt can never
-- be taken for the other's.
CREATE TABLE IF NOT EXISTS _cutover_journal_id (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    journal      TEXT NOT NULL,
    tables       TEXT NOT NULL,
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
