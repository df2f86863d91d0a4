-- The journal's own tables on MySQL and MariaDB beside its identity and
-- column lists (sql/mysql/control.sql). Run by src/db/mysql/capture.rs
-- before the journal is given an image; {{schema}} is the spec's database,
-- quoted. Each statement is CREATE TABLE IF NOT EXISTS: MySQL commits each
-- at once, and an install stopped half-way is completed by the next.

-- Every entry of every image table takes its seq from this table's
-- AUTO_INCREMENT: the trigger inserts a row and reads LAST_INSERT_ID()
-- (restored when the trigger ends, so the application's own is untouched).
-- InnoDB hands out an AUTO_INCREMENT value under a short mutex for a
-- single-row insert (innodb_autoinc_lock_mode 1 or 2), never held until
-- commit: writers do not queue on one counter row. A value is never handed
-- out twice (the counter is persistent on MariaDB 10.2.4+ and MySQL 8), a
-- rolled-back write's seq is skipped, and seqs of two transactions
-- interleave in the order their writes ran (docs/journal.md, "MySQL and
-- MariaDB"). The rows are kept (8 bytes each): deleting them would take
-- more locks for nothing.
CREATE TABLE IF NOT EXISTS {{schema}}._cutover_journal_seq (
    seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY
) ENGINE = InnoDB;

-- Each journaled table's InnoDB table id when its journal was installed.
-- TRUNCATE fires no trigger, and gives the table a new id (so do the
-- rebuilds ALTER TABLE … FORCE and OPTIMIZE TABLE): a table whose id
-- changed has lost rows the journal never saw, and its journal is stale.
CREATE TABLE IF NOT EXISTS {{schema}}._cutover_journal_table_ids (
    target_table VARBINARY(1024) NOT NULL PRIMARY KEY,
    table_id     BIGINT UNSIGNED NOT NULL
) ENGINE = InnoDB;
