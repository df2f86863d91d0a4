-- Journal triggers for one table on PostgreSQL. Filled in by
-- src/db/postgres/capture.rs with quoted, schema-qualified names only:
-- {{table}}, {{image}} (the table's journal table for this column list),
-- {{seq}} (the sequence's name as a string literal), {{fn_insert}}
-- {{fn_update}} {{fn_delete}} {{fn_truncate}} (the functions, named after
-- the image), {{trg_insert}} {{trg_update}} {{trg_delete}} {{trg_truncate}}
-- (the triggers, named alike on every table), {{o_cols}} {{n_cols}}
-- (o1, o2, ... and n1, n2, ...), {{old}} {{new}} (OLD."col", ... and
-- NEW."col", ...), {{rows}} (t."col", ...: every row of the table).
--
-- Each change is one row of {{image}}: seq from {{seq}}, the transaction's
-- id, the op and the images, in columns of the table's own types, so a
-- value is kept exactly as stored (NUMERIC's scale, bytea, timestamps, NULL
-- apart from ''). The bodies call nothing through the search_path (every
-- name is qualified, no operator is unqualified), so they run the same under
-- any application's settings; SECURITY DEFINER lets every role that can
-- write the table write its journal. The triggers are enabled ALWAYS, so
-- session_replication_role = replica does not skip them.
--
-- TRUNCATE journals every row it removes as a delete, read inside the
-- trigger after TRUNCATE holds its ACCESS EXCLUSIVE lock. Under REPEATABLE
-- READ or SERIALIZABLE the transaction's snapshot may not see rows committed
-- since it began, which TRUNCATE removes all the same: it is refused there.
CREATE OR REPLACE FUNCTION {{fn_insert}}() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $cutover$
BEGIN
    INSERT INTO {{image}} (seq, xid, op, {{n_cols}})
    VALUES (pg_catalog.nextval({{seq}}::pg_catalog.regclass), pg_catalog.pg_current_xact_id(), 'insert', {{new}});
    RETURN NULL;
END
$cutover$;
CREATE OR REPLACE FUNCTION {{fn_update}}() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $cutover$
BEGIN
    INSERT INTO {{image}} (seq, xid, op, {{o_cols}}, {{n_cols}})
    VALUES (pg_catalog.nextval({{seq}}::pg_catalog.regclass), pg_catalog.pg_current_xact_id(), 'update', {{old}}, {{new}});
    RETURN NULL;
END
$cutover$;
CREATE OR REPLACE FUNCTION {{fn_delete}}() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $cutover$
BEGIN
    INSERT INTO {{image}} (seq, xid, op, {{o_cols}})
    VALUES (pg_catalog.nextval({{seq}}::pg_catalog.regclass), pg_catalog.pg_current_xact_id(), 'delete', {{old}});
    RETURN NULL;
END
$cutover$;
CREATE OR REPLACE FUNCTION {{fn_truncate}}() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $cutover$
BEGIN
    IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'object_not_in_prerequisite_state',
            MESSAGE = pg_catalog.format('cutover journal: TRUNCATE of %s refused in a %s transaction, whose snapshot may not see every row it removes', TG_TABLE_NAME, pg_catalog.current_setting('transaction_isolation')),
            HINT = 'TRUNCATE in a READ COMMITTED transaction (every row is journaled as a delete), or DELETE the rows';
    END IF;
    INSERT INTO {{image}} (seq, xid, op, {{o_cols}})
    SELECT pg_catalog.nextval({{seq}}::pg_catalog.regclass), pg_catalog.pg_current_xact_id(), 'delete', {{rows}} FROM {{table}} AS t;
    RETURN NULL;
END
$cutover$;
CREATE OR REPLACE TRIGGER {{trg_insert}} AFTER INSERT ON {{table}} FOR EACH ROW EXECUTE FUNCTION {{fn_insert}}();
CREATE OR REPLACE TRIGGER {{trg_update}} AFTER UPDATE ON {{table}} FOR EACH ROW EXECUTE FUNCTION {{fn_update}}();
CREATE OR REPLACE TRIGGER {{trg_delete}} AFTER DELETE ON {{table}} FOR EACH ROW EXECUTE FUNCTION {{fn_delete}}();
CREATE OR REPLACE TRIGGER {{trg_truncate}} BEFORE TRUNCATE ON {{table}} FOR EACH STATEMENT EXECUTE FUNCTION {{fn_truncate}}();
ALTER TABLE {{table}}
    ENABLE ALWAYS TRIGGER {{trg_insert}},
    ENABLE ALWAYS TRIGGER {{trg_update}},
    ENABLE ALWAYS TRIGGER {{trg_delete}},
    ENABLE ALWAYS TRIGGER {{trg_truncate}};
