-- Control tables of the target. They live in the database they guard so that
-- they commit with the data.

-- Every write to a journaled table, in commit order. `key` is a JSON array
-- (composite keys never collide); `old_key` is set only when an update changed
-- the key; `old` and `new` are JSON objects of the mapped target columns.
CREATE TABLE IF NOT EXISTS _cutover_journal (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    tbl     TEXT NOT NULL,
    op      TEXT NOT NULL CHECK (op IN ('insert', 'update', 'delete')),
    key     TEXT NOT NULL,
    old_key TEXT,
    old     TEXT,
    new     TEXT,
    at      TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
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
