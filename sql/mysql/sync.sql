-- Control tables of cutover sync ({{schema}}, quoted); a watermark is kept
-- as its kind and a text (sql/postgres/sync.sql says how).
CREATE TABLE IF NOT EXISTS {{schema}}._cutover_cursor (
    tbl                  VARBINARY(512) NOT NULL,
    batch_no             BIGINT NOT NULL,
    batch                LONGTEXT CHARACTER SET utf8mb4 NOT NULL,
    "rows"               BIGINT NOT NULL,
    changed              BIGINT NOT NULL,
    first_watermark_kind VARBINARY(16) NOT NULL
        CHECK (first_watermark_kind IN ('null', 'integer', 'real', 'text', 'text_hex', 'blob')),
    first_watermark      LONGTEXT CHARACTER SET utf8mb4,
    last_watermark_kind  VARBINARY(16) NOT NULL
        CHECK (last_watermark_kind IN ('null', 'integer', 'real', 'text', 'text_hex', 'blob')),
    last_watermark       LONGTEXT CHARACTER SET utf8mb4,
    last_key             LONGTEXT CHARACTER SET utf8mb4 NOT NULL,
    committed_at         VARCHAR(24) CHARACTER SET utf8mb4 NOT NULL
        DEFAULT (CONCAT(LEFT(DATE_FORMAT(UTC_TIMESTAMP(3), '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z')),
    PRIMARY KEY (tbl, batch_no)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS {{schema}}._cutover_source_schema (
    tbl       VARBINARY(512) NOT NULL,
    "column"  VARBINARY(512) NOT NULL,
    decl_type LONGTEXT CHARACTER SET utf8mb4 NOT NULL,
    PRIMARY KEY (tbl, "column")
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS {{schema}}._cutover_evolved (
    tbl           VARBINARY(512) NOT NULL,
    source_column VARBINARY(512) NOT NULL,
    target_column LONGTEXT CHARACTER SET utf8mb4 NOT NULL,
    added_at      VARCHAR(24) CHARACTER SET utf8mb4 NOT NULL
        DEFAULT (CONCAT(LEFT(DATE_FORMAT(UTC_TIMESTAMP(3), '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z')),
    PRIMARY KEY (tbl, source_column)
) ENGINE = InnoDB;
