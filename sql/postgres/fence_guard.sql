-- The fence row guards itself: once written, no statement can change,
-- delete, truncate or replace it (a lowered boundary would make replay skip
-- entries); an insert goes through only while the table is empty. Only
-- `cutover fence off` lifts it, by dropping these first. Placeholders:
-- {{schema}} (quoted), {{table}} (the fence table, quoted and qualified) and
-- {{message}} (a literal). The triggers bear the fence's names, so fence
-- status counts them like any fenced table's.
CREATE OR REPLACE FUNCTION {{schema}}._cutover_fence_guard() RETURNS trigger
LANGUAGE plpgsql AS $body$
BEGIN
    IF TG_OP = 'INSERT' AND NOT EXISTS (SELECT 1 FROM {{table}}) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION USING MESSAGE = TG_ARGV[0];
END
$body$;
CREATE OR REPLACE TRIGGER _cutover_fence_insert BEFORE INSERT ON {{table}}
    FOR EACH ROW EXECUTE FUNCTION {{schema}}._cutover_fence_guard({{message}});
CREATE OR REPLACE TRIGGER _cutover_fence_update BEFORE UPDATE ON {{table}}
    FOR EACH ROW EXECUTE FUNCTION {{schema}}._cutover_fence_guard({{message}});
CREATE OR REPLACE TRIGGER _cutover_fence_delete BEFORE DELETE ON {{table}}
    FOR EACH ROW EXECUTE FUNCTION {{schema}}._cutover_fence_guard({{message}});
CREATE OR REPLACE TRIGGER _cutover_fence_truncate BEFORE TRUNCATE ON {{table}}
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}._cutover_fence_guard({{message}});
ALTER TABLE {{table}}
    ENABLE ALWAYS TRIGGER _cutover_fence_insert,
    ENABLE ALWAYS TRIGGER _cutover_fence_update,
    ENABLE ALWAYS TRIGGER _cutover_fence_delete,
    ENABLE ALWAYS TRIGGER _cutover_fence_truncate;
