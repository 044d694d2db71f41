-- Changes for the example to copy: inserts, updates, a key change and a
-- delete, in three transactions.
BEGIN;
INSERT INTO accounts (id, owner, balance) VALUES (1, 'ada', 100), (2, 'grace', 250), (3, 'edsger', 75);
COMMIT;
BEGIN;
UPDATE accounts SET balance = balance - 40, updated_at = now() WHERE id = 1;
UPDATE accounts SET balance = balance + 40, updated_at = now() WHERE id = 2;
COMMIT;
BEGIN;
UPDATE accounts SET id = 30 WHERE id = 3;
DELETE FROM accounts WHERE id = 2;
INSERT INTO accounts (id, owner, balance) VALUES (4, 'barbara', 500);
COMMIT;
