-- Control tables of the source, in the spec's schema ({{schema}}, quoted):
-- the journal entries replayed into it, per journal identity, written in the
-- same transaction as the rows they changed. A row is a run: the `entries`
-- journal entries from `first_seq` to `seq` (a replay batch), or the one
-- entry `seq` when `first_seq` is NULL (rows written before runs were
-- recorded). Runs never overlap.
CREATE TABLE IF NOT EXISTS {{schema}}._cutover_applied (
    journal    text NOT NULL,
    seq        bigint NOT NULL,
    delivery   text NOT NULL,
    applied_at text NOT NULL
        DEFAULT to_char(statement_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
    first_seq  bigint,
    entries    bigint NOT NULL DEFAULT 1,
    PRIMARY KEY (journal, seq)
);

-- Source columns the spec does not carry (`ignore`), kept from a row that
-- replay deleted: when the same key comes back (a delete and re-insert),
-- the row gets them back instead of defaults. `row` is a JSON object of
-- those columns, `key` the JSON array of the spec key.
CREATE TABLE IF NOT EXISTS {{schema}}._cutover_kept (
    journal text NOT NULL,
    tbl     text NOT NULL,
    key     text NOT NULL,
    row     text NOT NULL,
    seq     bigint NOT NULL,
    PRIMARY KEY (journal, tbl, key)
);
