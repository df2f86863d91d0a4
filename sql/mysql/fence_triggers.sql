-- One fence trigger: every row of the event on the table, from any session
-- of any user, is refused with the message (a signal of class 45 is an
-- unhandled user error: the statement fails and its changes are undone).
-- Rendered once per event (INSERT, UPDATE, DELETE), each run as its own
-- statement: MySQL commits every CREATE TRIGGER at once, and takes the
-- table's exclusive metadata lock for it, so the statement waits for every
-- transaction that used the table to end. Placeholders: {{name}} (the
-- trigger, quoted), {{event}}, {{table}} (quoted and qualified), {{order}}
-- (`PRECEDES` the application's first BEFORE trigger of the event, or
-- nothing) and {{message}} (a literal of at most 128 characters, the most
-- MESSAGE_TEXT holds).
CREATE TRIGGER {{name}} BEFORE {{event}} ON {{table}} FOR EACH ROW {{order}}
SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = {{message}}
