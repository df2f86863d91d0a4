-- Control tables of `cutover sync`, in the target's spec schema
-- ({{schema}}, quoted).

-- One row per committed sync batch: its content digest (the batch id), how
-- many rows it carried and changed, and the watermark range it covered. The
-- cursor is the last batch's (last_watermark, last_key); the rows before it
-- are the provenance the gate reports.
--
-- A watermark is a value of any kind, so it is kept as its kind and a text
-- that gives it back exactly: kind 'null' (text NULL), 'integer' (decimal),
-- 'real' (the shortest decimal that reads back as the same double; 'inf',
-- '-inf', 'NaN'), 'text' (the text itself), 'text_hex' (text that is not
-- UTF-8 or holds a NUL, which PostgreSQL text cannot: its bytes in hex) and
-- 'blob' (its bytes in hex).
CREATE TABLE IF NOT EXISTS {{schema}}._cutover_cursor (
    tbl                  text NOT NULL,
    batch_no             bigint NOT NULL,
    batch                text NOT NULL,
    rows                 bigint NOT NULL,
    changed              bigint NOT NULL,
    first_watermark_kind text NOT NULL
        CHECK (first_watermark_kind IN ('null', 'integer', 'real', 'text', 'text_hex', 'blob')),
    first_watermark      text,
    last_watermark_kind  text NOT NULL
        CHECK (last_watermark_kind IN ('null', 'integer', 'real', 'text', 'text_hex', 'blob')),
    last_watermark       text,
    last_key             text NOT NULL,
    committed_at         text NOT NULL
        DEFAULT to_char(statement_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
    PRIMARY KEY (tbl, batch_no)
);

-- The source's columns and declared types as the last sync saw them, so the
-- next one notices a column whose type changed.
CREATE TABLE IF NOT EXISTS {{schema}}._cutover_source_schema (
    tbl       text NOT NULL,
    "column"  text NOT NULL,
    decl_type text NOT NULL,
    PRIMARY KEY (tbl, "column")
);

-- Columns `sync --evolve` added to the target, carried as copy until the
-- spec maps them.
CREATE TABLE IF NOT EXISTS {{schema}}._cutover_evolved (
    tbl           text NOT NULL,
    source_column text NOT NULL,
    target_column text NOT NULL,
    added_at      text NOT NULL
        DEFAULT to_char(statement_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
    PRIMARY KEY (tbl, source_column)
);
