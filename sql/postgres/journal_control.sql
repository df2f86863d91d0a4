-- The journal's sequence on PostgreSQL. Run by src/db/postgres/capture.rs
-- before the journal is installed or given an identity, after the target's
-- control tables (sql/postgres/control.sql: the journal's identity and
-- column lists). The session's search_path is the spec's schema.

-- Every entry of every journal table takes its seq from here. A sequence
-- is not transactional: seqs of rolled-back writes are skipped, and two
-- transactions' seqs interleave in the order their writes ran, not the
-- order they commit (docs/journal.md, "PostgreSQL").
CREATE SEQUENCE IF NOT EXISTS _cutover_journal_seq AS bigint;
