-- Control tables of the source ({{schema}}, quoted) for the fence and the
-- replay's verdicts, made by the first statement that writes them (not with
-- the applied set, so that `fence on` adds only its copy to the source).

-- A copy of each fence record of the target, written by `fence on` once the
-- fence stands, so that a record rewritten on the target (where a superuser
-- can change it without firing a trigger) is found out: the target's record
-- must equal the latest copy of its journal that `fence off` has not lifted.
CREATE TABLE IF NOT EXISTS {{schema}}._cutover_fences (
    journal      text NOT NULL,
    fenced_at    text NOT NULL,
    boundary     bigint NOT NULL,
    journal_rows bigint NOT NULL,
    fingerprint  text NOT NULL,
    tables       text NOT NULL,
    parts        text NOT NULL,
    recorded_at  text NOT NULL
        DEFAULT to_char(statement_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
    lifted_at    text,
    PRIMARY KEY (journal, fenced_at)
);

-- Each replay's verdict, written at its end: whether the source reconciled
-- clean with the target at the fence's boundary, and if not, what failed.
-- The last row of a journal is what `status` and `fence off` go by.
CREATE TABLE IF NOT EXISTS {{schema}}._cutover_replays (
    -- One more than the last (no sequence: the source's sequences are the
    -- application's, and a dry run must leave them all as they were).
    id       bigint PRIMARY KEY,
    journal  text NOT NULL,
    boundary bigint NOT NULL,
    passed   boolean NOT NULL,
    detail   text NOT NULL,
    at       text NOT NULL
);
