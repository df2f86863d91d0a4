-- Control tables of the apply engine, in the spec's schema ({{schema}},
-- quoted) of whichever database a change feed is applied to. They commit
-- with the rows they describe.

-- One receipt per committed delivery. A feed's checkpoint is the largest
-- last_position of its receipts: positions are gapless per feed.
CREATE TABLE IF NOT EXISTS {{schema}}._cutover_deliveries (
    feed           text NOT NULL,
    delivery       text NOT NULL,
    digest         text NOT NULL,
    first_position bigint NOT NULL,
    last_position  bigint NOT NULL,
    written        bigint NOT NULL,
    duplicate      bigint NOT NULL,
    stale          bigint NOT NULL,
    committed_at   text NOT NULL
        DEFAULT to_char(statement_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
    PRIMARY KEY (feed, delivery)
);
CREATE INDEX IF NOT EXISTS _cutover_deliveries_position
    ON {{schema}}._cutover_deliveries (feed, last_position);

-- Evidence of revisions that are not (or no longer) the current row: a row
-- superseded by a newer revision, an older revision that arrived late
-- ("stale"), and tombstones of deleted records, which an older update must
-- not resurrect. `key` is the JSON array of the spec key.
CREATE TABLE IF NOT EXISTS {{schema}}._cutover_revisions (
    tbl         text NOT NULL,
    key         text NOT NULL,
    revision    bigint NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('superseded', 'stale', 'tombstone')),
    row         text,
    delivery    text,
    position    bigint,
    recorded_at text NOT NULL
        DEFAULT to_char(statement_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
    PRIMARY KEY (tbl, key, revision, kind)
);
