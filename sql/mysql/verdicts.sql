-- Control tables of the source ({{schema}}, quoted) for the fence's copies
-- and the replay verdicts (sql/postgres/verdicts.sql says what each is).
CREATE TABLE IF NOT EXISTS {{schema}}._cutover_fences (
    journal      VARBINARY(255) NOT NULL,
    fenced_at    VARBINARY(24) NOT NULL,
    boundary     BIGINT NOT NULL,
    journal_rows BIGINT NOT NULL,
    fingerprint  LONGTEXT CHARACTER SET utf8mb4 NOT NULL,
    tables       LONGTEXT CHARACTER SET utf8mb4 NOT NULL,
    parts        LONGTEXT CHARACTER SET utf8mb4 NOT NULL,
    recorded_at  VARCHAR(24) CHARACTER SET utf8mb4 NOT NULL
        DEFAULT (CONCAT(LEFT(DATE_FORMAT(UTC_TIMESTAMP(3), '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z')),
    lifted_at    VARCHAR(24) CHARACTER SET utf8mb4,
    PRIMARY KEY (journal, fenced_at)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS {{schema}}._cutover_replays (
    id       BIGINT NOT NULL PRIMARY KEY,
    journal  VARBINARY(255) NOT NULL,
    boundary BIGINT NOT NULL,
    passed   BOOLEAN NOT NULL,
    detail   LONGTEXT CHARACTER SET utf8mb4 NOT NULL,
    at       VARCHAR(24) CHARACTER SET utf8mb4 NOT NULL
) ENGINE = InnoDB;
