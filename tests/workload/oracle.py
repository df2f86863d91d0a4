"""The oracle of tests/app_workload.rs, independent of cutover: the source
must equal the target mapped back to the source's form.

    python3 oracle.py SOURCE_DB TARGET_DB APP_LOG
    python3 oracle.py SOURCE_DB TARGET_DB APP_LOG --explain TABLE#KEY...

The mapping back is written out here, not taken from the tool: parent.cents
(integer cents) becomes parent.amount as canonical decimal text at scale 2
('12.50', '-0.05'); every other column is copied. Values are compared with
their storage classes (typeof), REALs by bit pattern. Prints each difference
and exits 1 if there is any; for the first differing keys it also prints
what the application did to them (APP_LOG) and the journal entries naming
them, to tell a tool's fault from a test's.
"""

import re
import sqlite3
import struct
import sys

source_db, target_db, app_log = sys.argv[1], sys.argv[2], sys.argv[3]
explain_only = sys.argv[5:] if sys.argv[4:5] == ["--explain"] else None


def decimal(cents):
    sign = "-" if cents < 0 else ""
    a = abs(cents)
    return "%s%d.%02d" % (sign, a // 100, a % 100)


def cell(kind, v):
    """A value as (storage class, exact representation)."""
    if kind == "real":
        return ("real", struct.pack("<d", v).hex() + " (%r)" % v)
    return (kind, v)


def rows(db, sql):
    con = sqlite3.connect("file:%s?mode=ro" % db, uri=True)
    out = {}
    for r in con.execute(sql):
        n = len(r) // 2
        out[r[0]] = [cell(r[n + i], r[i]) for i in range(n)]
    con.close()
    return out


TABLES = [
    # (table, source columns, target columns)
    ("parent", ["id", "code", "score", "amount", "updated_at"],
     ["id", "code", "score", "cents", "updated_at"]),
    ("child", ["id", "parent_id", "qty", "note"], ["id", "parent_id", "qty", "note"]),
]


def select(table, cols):
    return "SELECT %s, %s FROM %s ORDER BY id" % (
        ", ".join(cols), ", ".join("typeof(%s)" % c for c in cols), table)


def explain(names):
    """What the application did to each row named, and the journal's entries."""
    lines = open(app_log).read().splitlines()
    con = sqlite3.connect("file:%s?mode=ro" % target_db, uri=True)
    names = list(names)
    for name in list(names):
        # A child changed by a cascade is named only by its parent's writes.
        table, key = name.split("#")
        if table == "child":
            for pair in con.execute(
                    "SELECT json_extract(old, '$.parent_id'), json_extract(new, '$.parent_id') "
                    "FROM _cutover_journal WHERE tbl = 'child' AND key = json_array(?)", (int(key),)):
                for p in pair:
                    if p is not None and "parent#%d" % p not in names:
                        names.append("parent#%d" % p)
    for name in names:
        table, key = name.split("#")
        print("\nwhat the application did to %s:" % name)
        txn = None
        for line in lines:
            if line.startswith("transaction"):
                txn = line
            elif re.search(re.escape(name) + r"\b", line):
                print("  [%s]\n  %s" % (txn, line.strip()))
        # The key is the first column of both images (o1, n1).
        print("journal entries naming %s (seq, op, before-image, after-image):" % name)
        for img, in con.execute(
                "SELECT img FROM _cutover_journal_tables WHERE tbl = ? ORDER BY img", (table,)):
            cols = [c[1] for c in con.execute("PRAGMA table_info(_cutover_journal_%d)" % img)]
            olds = [c for c in cols if re.fullmatch(r"o[0-9]+", c)]
            news = [c for c in cols if re.fullmatch(r"n[0-9]+", c)]
            for r in con.execute(
                    "SELECT seq, op, %s, %s FROM _cutover_journal_%d WHERE o1 = ? OR n1 = ? ORDER BY seq"
                    % (", ".join(olds), ", ".join(news), img),
                    (int(key), int(key))):
                print("  %r %s %r %r" % (r[0], r[1], r[2:2 + len(olds)], r[2 + len(olds):]))
    con.close()


if explain_only is not None:
    explain(explain_only)
    sys.exit(0)


diffs = []
counts = []
for table, scols, tcols in TABLES:
    src = rows(source_db, select(table, scols))
    tgt = rows(target_db, select(table, tcols))
    counts.append("%s: source %d rows, target %d rows" % (table, len(src), len(tgt)))
    for key in sorted(set(src) | set(tgt)):
        if key not in tgt:
            diffs.append((table, key, "in the source only: %r" % (src[key],)))
            continue
        expected = list(tgt[key])
        if table == "parent":
            kind, v = expected[3]
            if kind != "integer":
                diffs.append((table, key, "target cents is not an integer: %r" % (expected[3],)))
                continue
            expected[3] = ("text", decimal(v))
        if key not in src:
            diffs.append((table, key, "missing in the source; expected %r" % (expected,)))
            continue
        for col, e, a in zip(scols, expected, src[key]):
            if e != a:
                diffs.append((table, key, "%s: source has %r, the target maps back to %r" % (col, a, e)))

print("; ".join(counts))
if not diffs:
    print("oracle: the source equals the target mapped back")
    sys.exit(0)

print("oracle: %d differences" % len(diffs))
for table, key, what in diffs[:40]:
    print("  %s#%d: %s" % (table, key, what))
shown = []
for table, key, _ in diffs:
    name = "%s#%d" % (table, key)
    if name not in shown:
        shown.append(name)
explain(shown[:4])
sys.exit(1)
