-- Control tables of the source for the fence and the replay's verdicts,
-- made by the first statement that writes them (not with the applied set,
-- so that `fence on` adds only its copy to a source it has not replayed into).

-- A copy of each fence record of the target, written by `fence on` once the
-- fence stands, so that a record rewritten on the target (where a superuser
-- can change it without firing a trigger) is found out: the target's record
-- must equal the latest copy of its journal that `fence off` has not lifted.
CREATE TABLE IF NOT EXISTS _cutover_fences (
    journal      TEXT NOT NULL,
    fenced_at    TEXT NOT NULL,
    boundary     INTEGER NOT NULL,
    journal_rows INTEGER NOT NULL,
    fingerprint  TEXT NOT NULL,
    tables       TEXT NOT NULL,
    parts        TEXT NOT NULL,
    recorded_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    lifted_at    TEXT,
    PRIMARY KEY (journal, fenced_at)
);

-- Each replay's verdict, written at its end: whether the source reconciled
-- clean with the target at the fence's boundary, and if not, what failed.
-- The last row of a journal is what `status` and `fence off` go by.
CREATE TABLE IF NOT EXISTS _cutover_replays (
    -- One more than the last.
    id       INTEGER PRIMARY KEY,
    journal  TEXT NOT NULL,
    boundary INTEGER NOT NULL,
    passed   INTEGER NOT NULL,
    detail   TEXT NOT NULL,
    at       TEXT NOT NULL
);
