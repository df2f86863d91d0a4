-- Control tables of the apply engine, created in whichever database a change
-- feed is applied to. They commit with the rows they describe.

-- One receipt per committed delivery. A feed's checkpoint is the largest
-- last_position of its receipts: positions are gapless per feed.
CREATE TABLE IF NOT EXISTS _cutover_deliveries (
    feed           TEXT NOT NULL,
    delivery       TEXT NOT NULL,
    digest         TEXT NOT NULL,
    first_position INTEGER NOT NULL,
    last_position  INTEGER NOT NULL,
    written        INTEGER NOT NULL,
    duplicate      INTEGER NOT NULL,
    stale          INTEGER NOT NULL,
    committed_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (feed, delivery)
);
CREATE INDEX IF NOT EXISTS _cutover_deliveries_position
    ON _cutover_deliveries (feed, last_position);

-- Evidence of revisions that are not (or no longer) the current row: a row
-- superseded by a newer revision, an older revision that arrived late
-- ("stale"), and tombstones of deleted records, which an older update must
-- not resurrect. `key` is the JSON array of the spec key.
CREATE TABLE IF NOT EXISTS _cutover_revisions (
    tbl         TEXT NOT NULL,
    key         TEXT NOT NULL,
    revision    INTEGER NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('superseded', 'stale', 'tombstone')),
    row         TEXT,
    delivery    TEXT,
    position    INTEGER,
    recorded_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (tbl, key, revision, kind)
);
