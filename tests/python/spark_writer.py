"""Seeded random histories written by Apache Spark + Iceberg, with their table states.

The writer and the oracle of the merge-on-read differential test (tests/it/spark.rs).
For every seed it creates a table in a Spark Hadoop catalog below <warehouse> (icefeed
reads it with its `filesystem` catalog), commits 10-15 random statements (INSERT,
UPDATE, DELETE, MERGE INTO, rewrite procedures; merge-on-read or copy-on-write as the
seed's mode says) and, after every commit, reads the table state through Spark
(`SELECT ... VERSION AS OF <snapshot>`). A plain model of the rows checks every state,
so a mistake in a statement or in Spark fails here, not in icefeed's test.

Usage:
  spark_writer.py --jar <iceberg-spark-runtime.jar> --warehouse <dir> --out <file.json>
                  [--seeds 1,2,3] [--cow-seeds 1,2] [--conf key=value ...]
  --seeds      seeds of merge-on-read histories (tables spark.mor_seed_<n>); some steps
               switch a write mode to copy-on-write and back
  --cow-seeds  seeds of copy-on-write-only histories (tables spark.cow_seed_<n>)
A seed's low bits choose the table's shape: bit 0 partitioned by `part`, bit 1 format
version 3 (deletion vectors) instead of 2, bit 2 (v2) `write.delete.granularity=partition`
instead of `file`. The JSON written to --out:
  {"spark": ..., "iceberg": ..., "seconds": ..., "histories": [
     {"seed", "mode": "mor"|"cow", "table": "spark.mor_seed_3", "location",
      "format_version", "partitioned", "granularity", "seconds",
      "snapshots": [{"snapshot_id", "parent_id", "sequence_number", "operation",
                     "statement", "sql", "modes", "summary", "rows": [{id, part, payload, n}]}]}]}
`snapshots` lists every snapshot of the table, oldest first (the first one is the
table's first snapshot), with the statement that made it, the write modes in force and
the snapshot's summary (added/removed data files, position delete files, DVs...).
A statement that commits nothing (a rewrite with nothing to do) is not listed.
Progress and errors go to stderr; exit status 1 on error.
"""

import argparse
import json
import os
import random
import sys
import time
import traceback

CATALOG = "icefeed"
NAMESPACE = "spark"
PARTS = 4
MODES = ("write.delete.mode", "write.update.mode", "write.merge.mode")


def log(message: str) -> None:
    print(f"spark_writer: {message}", file=sys.stderr, flush=True)


class StepError(Exception):
    pass


def start_session(jar: str, warehouse: str, conf):
    # Loopback only: the machine has no other network, and Spark's guess of its own
    # address would otherwise be an interface's.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    scratch = os.path.join(warehouse, ".spark")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("icefeed-spark-writer")
        .config("spark.jars", jar)
        .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config(f"spark.sql.catalog.{CATALOG}", "org.apache.iceberg.spark.SparkCatalog")
        .config(f"spark.sql.catalog.{CATALOG}.type", "hadoop")
        .config(f"spark.sql.catalog.{CATALOG}.warehouse", f"file:{warehouse}")
        # Every statement loads the table from its metadata file: no stale snapshot.
        .config(f"spark.sql.catalog.{CATALOG}.cache-enabled", "false")
        .config("spark.sql.defaultCatalog", CATALOG)
        .config("spark.sql.warehouse.dir", os.path.join(scratch, "spark-warehouse"))
        .config("spark.local.dir", os.path.join(scratch, "local"))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        # Short-lived driver: the C1 compiler alone warms up sooner (about 20% less time
        # for a handful of seeds on 2 cores).
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
    )
    for k, v in conf:
        spark = spark.config(k, v)
    spark = spark.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def lit(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return str(int(value))


def values(rows) -> str:
    return ", ".join(f"({lit(r['id'])}, {lit(r['part'])}, {lit(r['payload'])}, {lit(r['n'])})" for r in rows)


def ids_in(ids) -> str:
    return ", ".join(str(i) for i in sorted(ids))


class History:
    """One seed's table: the statements, the model of its rows, what Spark committed."""

    def __init__(self, spark, warehouse: str, seed: int, mode: str):
        self.spark = spark
        self.warehouse = warehouse
        self.seed = seed
        self.mode = mode
        self.rng = random.Random(f"{mode}-{seed}")
        self.partitioned = bool(seed & 1)
        self.format_version = 3 if seed & 2 else 2
        self.granularity = "partition" if (seed & 4 and self.format_version == 2) else "file"
        self.name = f"{NAMESPACE}.{mode}_seed_{seed}"
        self.table = f"{CATALOG}.{self.name}"
        self.model = {}  # id -> row
        self.next_id = 1
        self.deleted_ids = []
        self.snapshots = []
        self.known = set()
        self.modes = {}
        self.statements = 0

    # -- Spark ---------------------------------------------------------------------------

    def sql(self, statement: str):
        self.statements += 1
        try:
            return self.spark.sql(statement).collect()
        except Exception as e:  # Py4J's and Spark's errors, said with the statement
            # The message, not the whole Java stack.
            message = "\n  ".join(str(e).strip().splitlines()[:30])
            raise StepError(f"statement failed:\n  {statement}\n  {type(e).__name__}: {message}") from e

    def create(self) -> None:
        modes = "merge-on-read" if self.mode == "mor" else "copy-on-write"
        props = {"format-version": str(self.format_version), "write.delete.granularity": self.granularity}
        for m in MODES:
            props[m] = modes
            self.modes[m] = modes
        tblprops = ", ".join(f"'{k}' = '{v}'" for k, v in props.items())
        partitioning = "PARTITIONED BY (part)" if self.partitioned else ""
        self.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.{NAMESPACE}")
        self.sql(f"DROP TABLE IF EXISTS {self.table}")
        self.sql(
            f"CREATE TABLE {self.table} (id BIGINT NOT NULL, part INT NOT NULL, payload STRING, n BIGINT) "
            f"USING iceberg {partitioning} TBLPROPERTIES ({tblprops})"
        )
        self.sql(f"ALTER TABLE {self.table} SET IDENTIFIER FIELDS id")
        if self.metadata().get("snapshots"):
            raise StepError("a new table has snapshots")

    def commit(self, label: str, statement: str, expected_model, expect_snapshot=True) -> None:
        """Runs `statement` and records the snapshots it made, with the rows the model
        expects after it (checked against Spark's reads in `read_states`)."""
        self.sql(statement)
        meta = self.metadata()
        new = {s["snapshot-id"]: s for s in meta.get("snapshots", []) if s["snapshot-id"] not in self.known}
        head = self.snapshots[-1]["snapshot_id"] if self.snapshots else None
        chain = []
        while new:
            nxt = [s for s in new.values() if s.get("parent-snapshot-id") == head]
            if len(nxt) != 1:
                raise StepError(f"{label}: new snapshots {sorted(new)} do not chain from {head}")
            chain.append(new.pop(nxt[0]["snapshot-id"]))
            head = chain[-1]["snapshot-id"]
        if chain and meta.get("current-snapshot-id") != head:
            raise StepError(f"{label}: the current snapshot is not the newest one")
        if expect_snapshot is True and not chain:
            raise StepError(f"{label}: no snapshot:\n  {statement}")
        if expect_snapshot is False and chain:
            raise StepError(f"{label}: unexpected snapshot {[s['snapshot-id'] for s in chain]}:\n  {statement}")
        if not chain:
            log(f"  seed {self.seed} ({self.mode}) {label}: no snapshot")
            return
        self.model = {k: dict(v) for k, v in expected_model.items()}
        want = sorted(self.model.values(), key=lambda r: r["id"])
        for i, s in enumerate(chain):
            summary = dict(s.get("summary", {}))
            self.known.add(s["snapshot-id"])
            self.snapshots.append(
                {
                    "snapshot_id": s["snapshot-id"],
                    "parent_id": s.get("parent-snapshot-id"),
                    "sequence_number": s.get("sequence-number", 0),
                    "operation": summary.pop("operation", None),
                    "statement": label,
                    "sql": statement,
                    "modes": dict(self.modes),
                    "summary": summary,
                    # What the model says; the last snapshot of a statement only.
                    "expected": want if i == len(chain) - 1 else None,
                }
            )

    def read_states(self) -> None:
        """Every snapshot's rows, read through Spark (`VERSION AS OF`) in one query, and
        checked against the model."""
        parts = [
            f"SELECT {i} AS snapshot_index, id, part, payload, n FROM {self.table} VERSION AS OF {s['snapshot_id']}"
            for i, s in enumerate(self.snapshots)
        ]
        states = [[] for _ in self.snapshots]
        for r in self.spark.sql(" UNION ALL ".join(parts)).collect():
            states[r.snapshot_index].append({"id": r.id, "part": r.part, "payload": r.payload, "n": r.n})
        previous = []
        for s, rows in zip(self.snapshots, states):
            rows.sort(key=lambda r: r["id"])
            where = f"snapshot {s['snapshot_id']} ({s['statement']}: {s['sql']})"
            expected = s.pop("expected")
            if expected is not None and rows != expected:
                raise StepError(
                    f"Spark's state differs from the model at {where}\n  spark: {rows}\n  model: {expected}"
                )
            if s["operation"] == "replace" and rows != previous:
                raise StepError(f"a replace snapshot changed the rows: {where}")
            if len({r["id"] for r in rows}) != len(rows):
                raise StepError(f"duplicate ids at {where}")
            s["rows"] = rows
            previous = rows

    def set_mode(self, prop: str, value: str) -> None:
        self.sql(f"ALTER TABLE {self.table} SET TBLPROPERTIES ('{prop}' = '{value}')")
        self.modes[prop] = value

    # -- Random rows ---------------------------------------------------------------------

    def fresh_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def random_row(self, id_: int):
        rng = self.rng
        return {
            "id": id_,
            "part": rng.randrange(PARTS),
            "payload": None if rng.random() < 0.1 else f"p{rng.randrange(50)}",
            "n": None if rng.random() < 0.1 else rng.randrange(-1000, 1000),
        }

    def changed(self, row):
        rng = self.rng
        new = dict(row)
        k = rng.randrange(4)
        if k == 0:
            new["payload"] = f"u{rng.randrange(50)}"
        elif k == 1:
            new["n"] = rng.randrange(-1000, 1000)
        elif k == 2:
            new["payload"] = None
            new["n"] = (row["n"] or 0) + 1
        # k == 3: an update to the same values
        return new

    def pick(self, low: int, high: int):
        ids = sorted(self.model)
        return self.rng.sample(ids, min(len(ids), self.rng.randint(low, high)))

    # -- Steps ---------------------------------------------------------------------------

    def insert(self) -> None:
        # Mostly a few rows, sometimes a bigger batch (files with more positions to delete).
        count = self.rng.randint(1, 8) if self.rng.random() < 0.75 else self.rng.randint(20, 60)
        rows = [self.random_row(self.fresh_id()) for _ in range(count)]
        if self.deleted_ids and self.rng.random() < 0.4:
            # A key deleted earlier comes back.
            i = self.rng.randrange(len(self.deleted_ids))
            rows.append(self.random_row(self.deleted_ids.pop(i)))
        model = dict(self.model)
        for r in rows:
            model[r["id"]] = r
        self.commit("insert", f"INSERT INTO {self.table} VALUES {values(rows)}", model)

    def update_rows(self, label: str, new_rows) -> None:
        """UPDATE ... SET col = CASE id WHEN ... END for each column, WHERE id IN (...)."""
        sets = []
        for col in ("part", "payload", "n"):
            cases = " ".join(f"WHEN {r['id']} THEN {lit(r[col])}" for r in new_rows)
            sets.append(f"{col} = CASE id {cases} ELSE {col} END")
        ids = [r["id"] for r in new_rows]
        model = dict(self.model)
        for r in new_rows:
            model[r["id"]] = r
        statement = f"UPDATE {self.table} SET {', '.join(sets)} WHERE id IN ({ids_in(ids)})"
        self.commit(label, statement, model)

    def update(self) -> None:
        self.update_rows("update", [self.changed(self.model[i]) for i in self.pick(1, 4)])

    def update_move(self) -> None:
        rows = []
        for i in self.pick(1, 3):
            row = dict(self.model[i])
            row["part"] = (row["part"] + self.rng.randrange(1, PARTS)) % PARTS
            if self.rng.random() < 0.5:
                row = self.changed(row)
            rows.append(row)
        self.update_rows("update moving rows", rows)

    def update_noop(self) -> None:
        col = self.rng.choice(["n", "payload", "part"])
        if self.rng.random() < 0.3:
            where = f"part = {self.rng.choice(sorted({r['part'] for r in self.model.values()}))}"
        else:
            where = f"id IN ({ids_in(self.pick(1, 4))})"
        self.commit("no-op update", f"UPDATE {self.table} SET {col} = {col} WHERE {where}", self.model)

    def delete(self) -> None:
        ids = self.pick(1, 4)
        model = {k: v for k, v in self.model.items() if k not in ids}
        self.deleted_ids.extend(ids)
        self.commit("delete rows", f"DELETE FROM {self.table} WHERE id IN ({ids_in(ids)})", model)

    def delete_partition(self) -> None:
        part = self.rng.choice(sorted({r["part"] for r in self.model.values()}))
        model = {k: v for k, v in self.model.items() if v["part"] != part}
        self.deleted_ids.extend(k for k, v in self.model.items() if v["part"] == part)
        self.commit("delete partition", f"DELETE FROM {self.table} WHERE part = {part}", model)

    def merge(self) -> None:
        source = []
        model = dict(self.model)
        for i in self.pick(1, 5):
            if self.rng.random() < 0.35:
                source.append({**self.model[i], "op": "d"})
                del model[i]
                self.deleted_ids.append(i)
            else:
                row = self.changed(self.model[i])
                if self.rng.random() < 0.3:
                    row["part"] = self.rng.randrange(PARTS)
                source.append({**row, "op": "u"})
                model[i] = row
        for _ in range(self.rng.randint(0, 3)):
            row = self.random_row(self.fresh_id())
            source.append({**row, "op": "i"})
            model[row["id"]] = row
        self.rng.shuffle(source)
        rows = ", ".join(
            f"({lit(r['id'])}, {lit(r['part'])}, {lit(r['payload'])}, {lit(r['n'])}, '{r['op']}')" for r in source
        )
        statement = (
            f"MERGE INTO {self.table} t USING (SELECT CAST(id AS BIGINT) AS id, CAST(part AS INT) AS part, "
            f"CAST(payload AS STRING) AS payload, CAST(n AS BIGINT) AS n, op "
            f"FROM VALUES {rows} AS s(id, part, payload, n, op)) s ON t.id = s.id "
            f"WHEN MATCHED AND s.op = 'd' THEN DELETE "
            f"WHEN MATCHED THEN UPDATE SET t.part = s.part, t.payload = s.payload, t.n = s.n "
            f"WHEN NOT MATCHED THEN INSERT (id, part, payload, n) VALUES (s.id, s.part, s.payload, s.n)"
        )
        self.commit("merge", statement, model)

    def rewrite_data_files(self) -> None:
        options = self.rng.choice(
            [
                {"rewrite-all": "true"},
                {"min-input-files": "2"},
                {"delete-file-threshold": "1"},
                {"rewrite-all": "true", "remove-dangling-deletes": "true"},
            ]
        )
        opts = ", ".join(f"'{k}', '{v}'" for k, v in options.items())
        statement = f"CALL {CATALOG}.system.rewrite_data_files(table => '{self.name}', options => map({opts}))"
        self.commit("rewrite_data_files", statement, self.model, expect_snapshot=None)

    def rewrite_position_deletes(self) -> None:
        statement = (
            f"CALL {CATALOG}.system.rewrite_position_delete_files(table => '{self.name}', "
            f"options => map('rewrite-all', 'true'))"
        )
        self.commit("rewrite_position_delete_files", statement, self.model, expect_snapshot=None)

    def switch_mode(self) -> None:
        """Mixed modes: one of the three write modes flips (a metadata change, no snapshot)."""
        prop = self.rng.choice(MODES)
        value = "copy-on-write" if self.modes[prop] == "merge-on-read" else "merge-on-read"
        self.set_mode(prop, value)

    STEPS = (
        ("insert", 3),
        ("update", 3),
        ("update_move", 2),
        ("update_noop", 1),
        ("delete", 2),
        ("delete_partition", 1),
        ("merge", 3),
        ("rewrite_data_files", 1),
        ("rewrite_position_deletes", 1),
    )

    def run(self) -> None:
        started = time.time()
        where = f"seed {self.seed} ({self.mode}, table {self.name})"
        try:
            self.create()
        except StepError as e:
            raise StepError(f"{where} creating the table: {e}") from e
        steps = self.rng.randint(10, 15)
        names = [n for n, w in self.STEPS for _ in range(w)]
        for step in range(steps):
            name = "insert" if not self.model else self.rng.choice(names)
            try:
                if self.mode == "mor" and step > 0 and self.rng.random() < 0.15:
                    self.switch_mode()
                getattr(self, name)()
            except StepError as e:
                raise StepError(f"{where} step {step + 1} ({name}): {e}") from e
        try:
            self.read_states()
        except StepError as e:
            raise StepError(f"{where} reading the states back: {e}") from e
        self.location = self.metadata()["location"]
        self.seconds = time.time() - started
        ops = {}
        for s in self.snapshots:
            ops[s["operation"]] = ops.get(s["operation"], 0) + 1
        log(
            f"seed {self.seed} ({self.mode}, v{self.format_version}, "
            f"{'partitioned' if self.partitioned else 'unpartitioned'}, granularity {self.granularity}): "
            f"{len(self.snapshots)} snapshots {ops} from {self.statements} statements in {self.seconds:.1f} s"
        )

    def metadata(self):
        directory = os.path.join(self.warehouse, *self.name.split("."), "metadata")
        with open(os.path.join(directory, "version-hint.text")) as f:
            version = f.read().strip()
        with open(os.path.join(directory, f"v{version}.metadata.json")) as f:
            return json.load(f)

    def json(self):
        return {
            "seed": self.seed,
            "mode": self.mode,
            "table": self.name,
            "location": self.location,
            "format_version": self.format_version,
            "partitioned": self.partitioned,
            "granularity": self.granularity,
            "seconds": round(self.seconds, 2),
            "snapshots": self.snapshots,
        }


def parse_seeds(spec: str):
    """`7`, `1..20` (exclusive), `1..=20` or `3,5,9`; empty for none."""
    spec = spec.strip()
    if not spec:
        return []
    if "..=" in spec:
        a, b = spec.split("..=")
        return list(range(int(a), int(b) + 1))
    if ".." in spec:
        a, b = spec.split("..")
        return list(range(int(a), int(b)))
    return [int(s) for s in spec.split(",")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jar", default=os.environ.get("ICEFEED_TEST_SPARK_JAR"))
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seeds", default="")
    parser.add_argument("--cow-seeds", default="")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="more Spark settings")
    args = parser.parse_args()
    if not args.jar or not os.path.isfile(args.jar):
        log(
            f"no Iceberg Spark runtime jar at {args.jar!r}: pass --jar or set ICEFEED_TEST_SPARK_JAR (scripts/spark.sh)"
        )
        return 1
    try:
        runs = [(s, "mor") for s in parse_seeds(args.seeds)] + [(s, "cow") for s in parse_seeds(args.cow_seeds)]
    except ValueError:
        log(f"bad seeds {args.seeds!r} / {args.cow_seeds!r}: use `7`, `1..20`, `1..=20` or `3,5,9`")
        return 1
    warehouse = os.path.abspath(args.warehouse)
    os.makedirs(warehouse, exist_ok=True)
    started = time.time()
    try:
        spark = start_session(args.jar, warehouse, [c.split("=", 1) for c in args.conf])
    except Exception:  # noqa: BLE001 - whatever it is, say so and stop
        log("could not start Spark (java on PATH or JAVA_HOME? pyspark 3.5?):\n" + traceback.format_exc())
        return 1
    log(f"Spark {spark.version} up in {time.time() - started:.1f} s; {len(runs)} histories into {warehouse}")
    versions = {"spark": spark.version, "iceberg": spark.sparkContext._jvm.org.apache.iceberg.IcebergBuild.version()}
    histories = []
    try:
        for seed, mode in runs:
            history = History(spark, warehouse, seed, mode)
            history.run()
            histories.append(history.json())
    except StepError as e:
        log(f"error: {e}")
        return 1
    finally:
        spark.stop()
    document = {
        **versions,
        "seconds": round(time.time() - started, 2),
        "histories": histories,
    }
    with open(args.out + ".tmp", "w") as f:
        json.dump(document, f)
    os.replace(args.out + ".tmp", args.out)
    log(f"{len(histories)} histories in {document['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
