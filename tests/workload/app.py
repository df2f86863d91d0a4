"""The application of tests/app_workload.rs: seeded random writes to the
target through the system's own SQLite (Python's sqlite3 module, not the
tool's bundled library), as a real application after the cutover would make
them.

    python3 app.py TARGET_DB SEED WRITES LOG

Transactions of random length, each with PRAGMA foreign_keys=ON and
recursive_triggers randomly ON or OFF. Besides plain INSERT/UPDATE/DELETE it
makes the writes an exact journal must capture: key changes (cascading to
children through ON UPDATE CASCADE), cascading deletes, INSERT OR REPLACE
over the same key and over another row's UNIQUE code, upserts, INSERT OR
IGNORE that ignores, statements that fail on a constraint mid-transaction,
and the odd transaction rolled back. REAL values include 0.1+0.2, -0.0,
1e308 and 5e-324. Every statement goes to LOG, one line, naming the rows it
aims at as parent#ID / child#ID, so that a failing round can show what the
application did to a key.
"""

import random
import sqlite3
import sys

db, seed, writes, log_path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
# Kinds of write left out, to tell one failure's cause from another's (see
# CUTOVER_WORKLOAD_WITHOUT in tests/app_workload.rs).
without = set(filter(None, (sys.argv[5] if len(sys.argv) > 5 else "").split(",")))
unknown = without - {"edge-reals", "replace", "cascades", "upserts", "recursive-off"}
assert not unknown, "unknown kinds of write: %s" % sorted(unknown)
rng = random.Random(seed)
con = sqlite3.connect(db, isolation_level=None, timeout=10)
log = open(log_path, "w")

SPECIAL = [0.1 + 0.2, -0.0, 1e308, 5e-324, -1e308, 2.5e-308, 1 / 3, 123456.789, 0.0]
# Without "edge-reals": only quarters below a million, which any decimal
# printing and parsing carries exactly.
if "edge-reals" in without:
    SPECIAL = [-0.0, 0.0, 1.5, 123456.75]


def score():
    if rng.random() < 0.5:
        return rng.choice(SPECIAL)
    if "edge-reals" in without:
        return rng.randint(-4_000_000, 4_000_000) / 4
    return rng.uniform(-1e6, 1e6)  # full 53-bit mantissas


def cents():
    return rng.randint(-500, 10_000_000)


def note():
    return rng.choice([None, "", "n%d" % rng.randint(0, 999), "tab\there", "é ü 漢"])


counter = [con.execute("SELECT coalesce(max(id), 0) FROM parent").fetchone()[0]
           + con.execute("SELECT coalesce(max(id), 0) FROM child").fetchone()[0] + 1000]


def fresh():
    counter[0] += 1
    return counter[0]


def ids(table):
    return [r[0] for r in con.execute("SELECT id FROM %s ORDER BY id" % table)]


def codes():
    return [r[0] for r in con.execute("SELECT code FROM parent ORDER BY id")]


def run(what, sql, args=(), expect_error=False):
    try:
        cur = con.execute(sql, args)
        n = cur.rowcount
    except sqlite3.IntegrityError as e:
        if not expect_error:
            raise
        log.write("  %s: %s %r -> refused (%s)\n" % (what, sql, args, e))
        return
    if expect_error:
        raise AssertionError("%s was expected to fail: %s %r" % (what, sql, args))
    log.write("  %s: %s %r -> %d\n" % (what, sql, args, n))
    return n


def op():
    parents, children = ids("parent"), ids("child")
    pick = rng.randrange(100)
    if not parents or pick < 10:
        i = fresh()
        run("insert parent#%d" % i,
            "INSERT INTO parent (id, code, score, cents, updated_at) VALUES (?, ?, ?, ?, 0)",
            (i, "c%d" % i, score(), cents()))
        return
    p = rng.choice(parents)
    left_out = (("cascades" in without and 25 <= pick < 35)
                or ("replace" in without and 35 <= pick < 47)
                or ("upserts" in without and 47 <= pick < 55)
                or ("replace" in without and 92 <= pick < 96))
    if left_out:
        pick = 12  # a plain update instead
    if pick < 22:
        run("update parent#%d" % p, "UPDATE parent SET cents = ?, score = ? WHERE id = ?",
            (cents(), score(), p))
    elif pick < 25:
        run("code parent#%d" % p, "UPDATE parent SET code = ? WHERE id = ?", ("k%d" % fresh(), p))
    elif pick < 30:
        i = fresh()
        run("key parent#%d -> parent#%d" % (p, i), "UPDATE parent SET id = ? WHERE id = ?", (i, p))
    elif pick < 35:
        run("delete parent#%d (cascade)" % p, "DELETE FROM parent WHERE id = ?", (p,))
    elif pick < 40:
        run("replace same key parent#%d" % p,
            "INSERT OR REPLACE INTO parent (id, code, score, cents, updated_at) VALUES (?, ?, ?, ?, ?)",
            (p, "r%d" % fresh(), score(), cents(), rng.randint(0, 5)))
    elif pick < 45:
        victim = rng.choice(parents)
        code = con.execute("SELECT code FROM parent WHERE id = ?", (victim,)).fetchone()[0]
        i = fresh()
        run("replace parent#%d over the code of parent#%d" % (i, victim),
            "INSERT OR REPLACE INTO parent (id, code, score, cents, updated_at) VALUES (?, ?, ?, ?, 0)",
            (i, code, score(), cents()))
    elif pick < 47:
        victim = rng.choice(parents)
        code = con.execute("SELECT code FROM parent WHERE id = ?", (victim,)).fetchone()[0]
        run("replace parent#%d over its own key and the code of parent#%d" % (p, victim),
            "INSERT OR REPLACE INTO parent (id, code, score, cents, updated_at) VALUES (?, ?, ?, ?, 0)",
            (p, code, score(), cents()))
    elif pick < 51:
        run("upsert on id parent#%d" % p,
            "INSERT INTO parent (id, code, score, cents, updated_at) VALUES (?, ?, ?, ?, 0) "
            "ON CONFLICT (id) DO UPDATE SET cents = excluded.cents, score = excluded.score",
            (p, "u%d" % fresh(), score(), cents()))
    elif pick < 53:
        code = con.execute("SELECT code FROM parent WHERE id = ?", (p,)).fetchone()[0]
        i = fresh()
        run("upsert on code parent#%d (not parent#%d)" % (p, i),
            "INSERT INTO parent (id, code, score, cents, updated_at) VALUES (?, ?, ?, ?, 0) "
            "ON CONFLICT (code) DO UPDATE SET cents = excluded.cents + 1",
            (i, code, score(), cents()))
    elif pick < 55:
        i = fresh()
        run("upsert inserting parent#%d" % i,
            "INSERT INTO parent (id, code, score, cents, updated_at) VALUES (?, ?, ?, ?, 0) "
            "ON CONFLICT (id) DO UPDATE SET cents = excluded.cents",
            (i, "v%d" % i, score(), cents()))
    elif pick < 59:
        victim = rng.choice(parents)
        code = con.execute("SELECT code FROM parent WHERE id = ?", (victim,)).fetchone()[0]
        if rng.random() < 0.5:
            args = (p, "g%d" % fresh(), score(), cents())
            what = "ignored insert over parent#%d" % p
        else:
            args = (fresh(), code, score(), cents())
            what = "ignored insert over the code of parent#%d" % victim
        n = run(what, "INSERT OR IGNORE INTO parent (id, code, score, cents, updated_at) "
                "VALUES (?, ?, ?, ?, 0)", args)
        assert n == 0, what
    elif pick < 61:
        code = con.execute("SELECT code FROM parent WHERE id = ?", (p,)).fetchone()[0]
        run("refused insert over the code of parent#%d" % p,
            "INSERT INTO parent (id, code, score, cents, updated_at) VALUES (?, ?, ?, ?, 0)",
            (fresh(), code, score(), cents()), expect_error=True)
    elif pick < 62:
        m = rng.randint(5, 11)
        run("several parents (id %% %d = 0)" % m,
            "UPDATE parent SET cents = cents + 1 WHERE id %% %d = 0" % m)
    elif pick < 74 or not children:
        i = fresh()
        run("insert child#%d of parent#%d" % (i, p),
            "INSERT INTO child (id, parent_id, qty, note) VALUES (?, ?, ?, ?)",
            (i, p, rng.randint(-5, 1000), note()))
    else:
        c = rng.choice(children)
        if pick < 83:
            run("update child#%d" % c, "UPDATE child SET qty = ?, note = ? WHERE id = ?",
                (rng.randint(-5, 1000), note(), c))
        elif pick < 87:
            run("move child#%d to parent#%d" % (c, p), "UPDATE child SET parent_id = ? WHERE id = ?",
                (p, c))
        elif pick < 92:
            run("delete child#%d" % c, "DELETE FROM child WHERE id = ?", (c,))
        elif pick < 96:
            run("replace child#%d under parent#%d" % (c, p),
                "INSERT OR REPLACE INTO child (id, parent_id, qty, note) VALUES (?, ?, ?, ?)",
                (c, p, rng.randint(-5, 1000), note()))
        else:
            run("refused child of a missing parent",
                "INSERT INTO child (id, parent_id, qty, note) VALUES (?, ?, 1, NULL)",
                (fresh(), fresh()), expect_error=True)


done = 0
txn = 0
while done < writes:
    txn += 1
    recursive = rng.random() < 0.5 or "recursive-off" in without
    con.execute("PRAGMA foreign_keys = ON")
    con.execute("PRAGMA recursive_triggers = %s" % ("ON" if recursive else "OFF"))
    length = rng.randint(1, 12)
    log.write("transaction %d: %d statements, recursive_triggers=%s\n"
              % (txn, length, "ON" if recursive else "OFF"))
    con.execute("BEGIN")
    for _ in range(length):
        op()
        done += 1
    if rng.random() < 0.05:
        con.execute("ROLLBACK")
        log.write("  rolled back\n")
    else:
        con.execute("COMMIT")
bad = con.execute("PRAGMA foreign_key_check").fetchall()
assert not bad, bad
log.close()
print("writes=%d transactions=%d sqlite=%s" % (done, txn, sqlite3.sqlite_version))
