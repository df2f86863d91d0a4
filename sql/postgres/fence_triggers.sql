-- Fence triggers for one table: every insert, update, delete and truncate,
-- from any session, is refused with the message. Placeholders: {{schema}}
-- (quoted), {{table}} (quoted and qualified) and {{message}} (a literal).
--
-- One function serves every fenced table; the message is the trigger's
-- argument. The triggers fire ALWAYS, so a session that sets
-- session_replication_role = replica (as logical replication and some bulk
-- tools do) is refused too. CREATE OR REPLACE replaces whatever went by
-- these names, and takes the same SHARE ROW EXCLUSIVE lock as the LOCK
-- TABLE before it: readers are never blocked.
CREATE OR REPLACE FUNCTION {{schema}}._cutover_fence_refuse() RETURNS trigger
LANGUAGE plpgsql AS $body$
BEGIN
    RAISE EXCEPTION USING MESSAGE = TG_ARGV[0];
END
$body$;
CREATE OR REPLACE TRIGGER _cutover_fence_insert BEFORE INSERT ON {{table}}
    FOR EACH ROW EXECUTE FUNCTION {{schema}}._cutover_fence_refuse({{message}});
CREATE OR REPLACE TRIGGER _cutover_fence_update BEFORE UPDATE ON {{table}}
    FOR EACH ROW EXECUTE FUNCTION {{schema}}._cutover_fence_refuse({{message}});
CREATE OR REPLACE TRIGGER _cutover_fence_delete BEFORE DELETE ON {{table}}
    FOR EACH ROW EXECUTE FUNCTION {{schema}}._cutover_fence_refuse({{message}});
CREATE OR REPLACE TRIGGER _cutover_fence_truncate BEFORE TRUNCATE ON {{table}}
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}._cutover_fence_refuse({{message}});
ALTER TABLE {{table}}
    ENABLE ALWAYS TRIGGER _cutover_fence_insert,
    ENABLE ALWAYS TRIGGER _cutover_fence_update,
    ENABLE ALWAYS TRIGGER _cutover_fence_delete,
    ENABLE ALWAYS TRIGGER _cutover_fence_truncate;
