-- Control tables of the source, in the spec's schema ({{schema}}, quoted):
-- every journal entry replayed into it, per journal identity, written in the
-- same transaction as the rows it changed.
CREATE TABLE IF NOT EXISTS {{schema}}._cutover_applied (
    journal    text NOT NULL,
    seq        bigint NOT NULL,
    delivery   text NOT NULL,
    applied_at text NOT NULL
        DEFAULT to_char(statement_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
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
