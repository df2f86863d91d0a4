-- Control tables of the apply engine ({{schema}}, quoted), committed with
-- the rows they describe (sql/postgres/apply.sql says what each is). The
-- index on positions is made with its table: MySQL 8 has no CREATE INDEX
-- IF NOT EXISTS.
CREATE TABLE IF NOT EXISTS {{schema}}._cutover_deliveries (
    feed           VARBINARY(512) NOT NULL,
    delivery       VARBINARY(512) NOT NULL,
    digest         LONGTEXT CHARACTER SET utf8mb4 NOT NULL,
    first_position BIGINT NOT NULL,
    last_position  BIGINT NOT NULL,
    written        BIGINT NOT NULL,
    duplicate      BIGINT NOT NULL,
    stale          BIGINT NOT NULL,
    committed_at   VARCHAR(24) CHARACTER SET utf8mb4 NOT NULL
        DEFAULT (CONCAT(LEFT(DATE_FORMAT(UTC_TIMESTAMP(3), '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z')),
    PRIMARY KEY (feed, delivery),
    KEY _cutover_deliveries_position (feed, last_position)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS {{schema}}._cutover_revisions (
    tbl         VARBINARY(512) NOT NULL,
    "key"       VARBINARY(2048) NOT NULL,
    revision    BIGINT NOT NULL,
    kind        VARBINARY(16) NOT NULL CHECK (kind IN ('superseded', 'stale', 'tombstone')),
    "row"       LONGTEXT CHARACTER SET utf8mb4,
    delivery    LONGTEXT CHARACTER SET utf8mb4,
    position    BIGINT,
    recorded_at VARCHAR(24) CHARACTER SET utf8mb4 NOT NULL
        DEFAULT (CONCAT(LEFT(DATE_FORMAT(UTC_TIMESTAMP(3), '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z')),
    PRIMARY KEY (tbl, "key", revision, kind)
) ENGINE = InnoDB;
