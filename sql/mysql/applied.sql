-- Control tables of the source ({{schema}}, quoted): the journal entries
-- replayed into it, per journal identity, written in the same transaction as
-- the rows they changed (sql/postgres/applied.sql says what a row is).
CREATE TABLE IF NOT EXISTS {{schema}}._cutover_applied (
    journal    VARBINARY(255) NOT NULL,
    seq        BIGINT NOT NULL,
    delivery   LONGTEXT CHARACTER SET utf8mb4 NOT NULL,
    applied_at VARCHAR(24) CHARACTER SET utf8mb4 NOT NULL
        DEFAULT (CONCAT(LEFT(DATE_FORMAT(UTC_TIMESTAMP(3), '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z')),
    first_seq  BIGINT,
    entries    BIGINT NOT NULL DEFAULT 1,
    PRIMARY KEY (journal, seq)
) ENGINE = InnoDB;

-- Source columns the spec does not carry, kept from a row replay deleted.
CREATE TABLE IF NOT EXISTS {{schema}}._cutover_kept (
    journal VARBINARY(255) NOT NULL,
    tbl     VARBINARY(512) NOT NULL,
    "key"   VARBINARY(2048) NOT NULL,
    "row"   LONGTEXT CHARACTER SET utf8mb4 NOT NULL,
    seq     BIGINT NOT NULL,
    PRIMARY KEY (journal, tbl, "key")
) ENGINE = InnoDB;
