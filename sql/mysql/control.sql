-- Control tables of the target, in the spec's database ({{schema}}, quoted).
-- InnoDB, so that they commit with the data; text that is part of a key is
-- VARBINARY (byte order, no PAD SPACE, no case folding). Every statement is
-- CREATE TABLE IF NOT EXISTS: MySQL commits each one at once, and a run
-- stopped half-way is completed by the next. Identifiers that MySQL or
-- MariaDB reserve ("rows", "key", "row") are double-quoted (ANSI_QUOTES).
-- Times are text in UTC to the millisecond (2024-03-15T13:45:00.123Z).

CREATE TABLE IF NOT EXISTS {{schema}}._cutover_journal_id (
    id           INT NOT NULL PRIMARY KEY CHECK (id = 1),
    journal      LONGTEXT CHARACTER SET utf8mb4 NOT NULL,
    tables       LONGTEXT CHARACTER SET utf8mb4 NOT NULL,
    after_seq    BIGINT NOT NULL DEFAULT 0,
    installed_at VARCHAR(24) CHARACTER SET utf8mb4 NOT NULL
        DEFAULT (CONCAT(LEFT(DATE_FORMAT(UTC_TIMESTAMP(3), '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z'))
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS {{schema}}._cutover_journal_tables (
    img          BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    tbl          LONGTEXT CHARACTER SET utf8mb4 NOT NULL,
    target_table LONGTEXT CHARACTER SET utf8mb4 NOT NULL,
    columns      LONGTEXT CHARACTER SET utf8mb4 NOT NULL,
    installed_at VARCHAR(24) CHARACTER SET utf8mb4 NOT NULL
        DEFAULT (CONCAT(LEFT(DATE_FORMAT(UTC_TIMESTAMP(3), '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z'))
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS {{schema}}._cutover_fence (
    id            INT NOT NULL PRIMARY KEY CHECK (id = 1),
    boundary      BIGINT NOT NULL,
    journal_rows  BIGINT NOT NULL,
    fingerprint   LONGTEXT CHARACTER SET utf8mb4 NOT NULL,
    tables        LONGTEXT CHARACTER SET utf8mb4 NOT NULL,
    parts         LONGTEXT CHARACTER SET utf8mb4 NOT NULL,
    fenced_at     VARCHAR(24) CHARACTER SET utf8mb4 NOT NULL
        DEFAULT (CONCAT(LEFT(DATE_FORMAT(UTC_TIMESTAMP(3), '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z'))
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS {{schema}}._cutover_load (
    tbl        VARBINARY(1024) NOT NULL PRIMARY KEY,
    last_key   LONGTEXT CHARACTER SET utf8mb4,
    "rows"     BIGINT NOT NULL,
    done       BOOLEAN NOT NULL,
    updated_at VARCHAR(24) CHARACTER SET utf8mb4 NOT NULL
        DEFAULT (CONCAT(LEFT(DATE_FORMAT(UTC_TIMESTAMP(3), '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z'))
) ENGINE = InnoDB;
