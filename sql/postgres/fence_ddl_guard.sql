-- While the fence stands, no schema change reaches cutover's own tables
-- (`_cutover_%` in the fenced schema): not ALTER TABLE (which can rewrite
-- the fence row's values with no trigger firing: `ALTER COLUMN boundary
-- TYPE bigint USING 4`), not CREATE or DROP TRIGGER, INDEX or RULE on them,
-- not DROP TABLE, not a new body for one of cutover's functions. Only a
-- superuser can create an event trigger; `cutover fence off` drops these
-- first, in the transaction that lifts the fence. Dropping the whole schema
-- goes through (nothing is then left to replay, and replay says so).
-- Placeholders: {{schema_literal}} (the schema's name, a literal),
-- {{schema_reg}} (its quoted name, a literal, for ::regnamespace),
-- {{message}} (a literal), {{ddl}} and {{drop}} (the event triggers' names,
-- quoted), {{function}} (the function, quoted and qualified).
CREATE OR REPLACE FUNCTION {{function}}() RETURNS event_trigger
LANGUAGE plpgsql AS $body$
DECLARE
    r record;
    rel oid;
BEGIN
    IF TG_EVENT = 'sql_drop' THEN
        IF EXISTS (SELECT 1 FROM pg_event_trigger_dropped_objects() d
                   WHERE d.object_type = 'schema' AND d.object_name = {{schema_literal}}) THEN
            RETURN;
        END IF;
        FOR r IN SELECT * FROM pg_event_trigger_dropped_objects() LOOP
            IF r.schema_name = {{schema_literal}}
               AND (r.object_name LIKE '\_cutover\_%'
                    OR (cardinality(r.address_names) >= 2 AND r.address_names[2] LIKE '\_cutover\_%')) THEN
                RAISE EXCEPTION USING MESSAGE = {{message}}, DETAIL = r.object_type || ' ' || r.object_identity;
            END IF;
        END LOOP;
        RETURN;
    END IF;
    FOR r IN SELECT * FROM pg_event_trigger_ddl_commands() LOOP
        IF r.classid = 'pg_proc'::regclass THEN
            IF EXISTS (SELECT 1 FROM pg_proc p WHERE p.oid = r.objid
                       AND p.pronamespace = {{schema_reg}}::regnamespace
                       AND p.proname LIKE '\_cutover\_%') THEN
                RAISE EXCEPTION USING MESSAGE = {{message}}, DETAIL = r.object_type || ' ' || r.object_identity;
            END IF;
            CONTINUE;
        END IF;
        rel := CASE r.classid
            WHEN 'pg_class'::regclass THEN
                coalesce((SELECT x.indrelid FROM pg_index x WHERE x.indexrelid = r.objid), r.objid)
            WHEN 'pg_trigger'::regclass THEN (SELECT g.tgrelid FROM pg_trigger g WHERE g.oid = r.objid)
            WHEN 'pg_rewrite'::regclass THEN (SELECT w.ev_class FROM pg_rewrite w WHERE w.oid = r.objid)
            WHEN 'pg_constraint'::regclass THEN (SELECT k.conrelid FROM pg_constraint k WHERE k.oid = r.objid)
            WHEN 'pg_policy'::regclass THEN (SELECT y.polrelid FROM pg_policy y WHERE y.oid = r.objid)
            ELSE NULL
        END;
        IF EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = rel
                   AND c.relnamespace = {{schema_reg}}::regnamespace
                   AND c.relname LIKE '\_cutover\_%') THEN
            RAISE EXCEPTION USING MESSAGE = {{message}}, DETAIL = r.object_type || ' ' || r.object_identity;
        END IF;
    END LOOP;
END
$body$;
DROP EVENT TRIGGER IF EXISTS {{ddl}};
DROP EVENT TRIGGER IF EXISTS {{drop}};
CREATE EVENT TRIGGER {{ddl}} ON ddl_command_end EXECUTE FUNCTION {{function}}();
CREATE EVENT TRIGGER {{drop}} ON sql_drop EXECUTE FUNCTION {{function}}();
