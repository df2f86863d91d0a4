-- The fence row guards itself: an insert goes through only while the
-- table is empty (REPLACE and INSERT … ON DUPLICATE KEY UPDATE fire this
-- trigger first, so they are refused too); its update and delete triggers
-- are the fence's own (fence_triggers.sql). Only `cutover fence off` lifts
-- it, by dropping these first. TRUNCATE fires no trigger: the fingerprint,
-- which hashes the record, and the copy of the record kept in the source
-- find a record rewritten that way. Placeholders as fence_triggers.sql.
CREATE TRIGGER {{name}} BEFORE INSERT ON {{table}} FOR EACH ROW {{order}}
BEGIN
    IF EXISTS (SELECT 1 FROM {{table}}) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = {{message}};
    END IF;
END
