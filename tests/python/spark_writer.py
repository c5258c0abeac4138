"""Seeded random histories written by Apache Spark + Iceberg, with their table states.

The writer and the oracle of the Spark differential test (tests/it/spark.rs). For every
seed it creates a table in a Spark Hadoop catalog below <warehouse> (icefeed reads it
with its `filesystem` catalog), or with --catalog-uri in an Iceberg REST catalog whose
files are on S3 (Iceberg's S3FileIO), commits 10-15 random statements (INSERT, UPDATE, DELETE,
MERGE INTO, rewrite procedures; merge-on-read or copy-on-write as the seed's mode says)
and, after every commit, reads the table state through Spark
(`SELECT * ... VERSION AS OF <snapshot>`). Between statements (about 1 step in 6) the
schema evolves by metadata-only ALTER TABLEs that make no snapshot: ADD COLUMN of a
nullable INT, FLOAT, DECIMAL(6,2) or STRING (at the end, FIRST or AFTER a column),
RENAME COLUMN of any column (the identifier `id` and the partition source `part`
included), type promotion of an added column (INT to BIGINT, FLOAT to DOUBLE,
DECIMAL(6,2) to DECIMAL(9,2)), DROP COLUMN of a column other than `id` and `part`, and
moving a column (FIRST / AFTER). Later statements set and insert every current column
by its current name, so change sets span several schemas. A plain model of the rows and
of the schema checks every state and every schema, so a mistake in a statement or in
Spark fails here, not in icefeed's test.

Usage:
  spark_writer.py --jar <iceberg-spark-runtime.jar> --warehouse <dir> --out <file.json>
                  [--seeds 1,2,3] [--cow-seeds 1,2] [--namespace spark] [--conf key=value ...]
                  [--catalog-uri <REST catalog> --s3-endpoint <url> --warehouse-name <name>
                   --aws-bundle <iceberg-aws-bundle.jar>]
  --seeds      seeds of merge-on-read histories (tables spark.mor_seed_<n>); some steps
               switch a write mode to copy-on-write and back
  --cow-seeds  seeds of copy-on-write-only histories (tables spark.cow_seed_<n>)
  --namespace  the tables' namespace (default `spark`); its tables are dropped first
  --catalog-uri  write through this Iceberg REST catalog (its warehouse --warehouse-name)
               onto S3 at --s3-endpoint (path-style) instead of the Hadoop warehouse, which
               then only holds Spark's scratch files. S3FileIO needs the AWS SDK of
               --aws-bundle (default ICEFEED_TEST_SPARK_AWS_BUNDLE). The S3 keys and region
               come from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION (default
               us-east-1), the catalog's OAuth2 client credentials `id:secret` from
               ICEFEED_SPARK_CATALOG_CREDENTIAL (none without). After every statement the
               table's current metadata file is found through the catalog and read from S3.
A seed's low bits choose the table's shape: bit 0 partitioned by `part`, bit 1 format
version 3 (deletion vectors) instead of 2, bit 2 (v2) `write.delete.granularity=partition`
instead of `file`, bit 3 (v2) an upgrade to version 3 halfway through the history. The
JSON written to --out:
  {"spark": ..., "iceberg": ..., "seconds": ..., "histories": [
     {"seed", "mode": "mor"|"cow", "table": "spark.mor_seed_3", "location",
      "format_version" (at the end), "upgraded", "partitioned", "granularity", "seconds",
      "identifier",
      "snapshots": [{"snapshot_id", "parent_id", "sequence_number", "operation",
                     "statement", "sql", "schema_changes", "modes", "summary",
                     "schema_id", "columns": [{"id", "name"}], "identifier",
                     "rows": [{<column name>: value}],
                     "lineage": [[id, row_id, last_updated_sequence_number]] | null}]}]}
`snapshots` lists every snapshot of the table, oldest first (the first one is the
table's first snapshot), with the statement that made it, the ALTER TABLE statements
run since the snapshot before it (`schema_changes`), the write modes in force and the
snapshot's summary (added/removed data files, position delete files, DVs...).
`schema_id` is the snapshot's `schema-id`; `columns` the top-level fields of that schema
(Iceberg field id and name) in schema order; `identifier` the names of its identifier
fields (one: `id` or what it was renamed to). `rows` are the snapshot's rows as Spark
reads them with that schema: objects keyed by exactly the names in `columns`, sorted by
the identifier; ints and strings as such, floats as JSON numbers (always k + 0.5 or
k + 0.25, so their text is exact), decimals as strings with their 2 fractional digits
("12.30", "-0.05"), null. A history's `identifier` names its identifier fields at the
end. `lineage` (v3 tables, upgraded ones too; null on v2) is each row's `_row_id` and
`_last_updated_sequence_number` as Spark reads them at the snapshot (integers, null
when unknown), with the row's identifier value, sorted by it; no two rows share a row
id. A statement that commits nothing (a rewrite with nothing to do) is not listed.
Progress and errors go to stderr; exit status 1 on error.
"""

import argparse
import itertools
import json
import os
import random
import sys
import time
import traceback
from decimal import Decimal

CATALOG = "icefeed"
NAMESPACE = "spark"
PARTS = 4
MODES = ("write.delete.mode", "write.update.mode", "write.merge.mode")
# A SQL type of the model's schema: Iceberg's name of it in the table metadata, Spark's
# (`DataType.simpleString`, what a time-travel read must show) and the kind of values.
TYPES = {
    "BIGINT": ("long", "bigint", "int"),
    "INT": ("int", "int", "int"),
    "STRING": ("string", "string", "string"),
    "FLOAT": ("float", "float", "float"),
    "DOUBLE": ("double", "double", "float"),
    "DECIMAL(6,2)": ("decimal(6, 2)", "decimal(6,2)", "decimal"),
    "DECIMAL(9,2)": ("decimal(9, 2)", "decimal(9,2)", "decimal"),
}
ADDED_TYPES = ("INT", "FLOAT", "DECIMAL(6,2)", "STRING")
# The promotions Iceberg allows, each applied to columns of the left type added earlier.
PROMOTIONS = {"INT": "BIGINT", "FLOAT": "DOUBLE", "DECIMAL(6,2)": "DECIMAL(9,2)"}
CENT = Decimal("0.01")
# The chance of a schema change before a data step (again after one): 1 step in 6.
EVOLVE = 1 / 6
# The row lineage Spark reads on v3 tables, after a snapshot's columns.
LINEAGE_COLUMNS = ("_row_id", "_last_updated_sequence_number")


def log(message: str) -> None:
    print(f"spark_writer: {message}", file=sys.stderr, flush=True)


class StepError(Exception):
    pass


def start_session(jars, warehouse: str, catalog, conf):
    """A local Spark session whose catalog `icefeed` has the settings `catalog`; `jars`
    are put on its classpath. `warehouse` holds Spark's scratch files."""
    # Loopback only: the machine has no other network, and Spark's guess of its own
    # address would otherwise be an interface's.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    scratch = os.path.join(warehouse, ".spark")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("icefeed-spark-writer")
        .config("spark.jars", ",".join(jars))
        .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config(f"spark.sql.catalog.{CATALOG}", "org.apache.iceberg.spark.SparkCatalog")
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
    for k, v in catalog.items():
        spark = spark.config(f"spark.sql.catalog.{CATALOG}.{k}", v)
    for k, v in conf:
        spark = spark.config(k, v)
    spark = spark.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class HadoopTables:
    """Tables of Spark's Hadoop catalog below a local `warehouse`."""

    def __init__(self, warehouse: str):
        self.warehouse = warehouse

    def catalog(self):
        return {"type": "hadoop", "warehouse": f"file:{self.warehouse}"}

    def metadata(self, spark, name: str):
        """The current metadata of table `name` (`namespace.table`): the file that
        `version-hint.text` names."""
        directory = os.path.join(self.warehouse, *name.split("."), "metadata")
        with open(os.path.join(directory, "version-hint.text")) as f:
            version = f.read().strip()
        with open(os.path.join(directory, f"v{version}.metadata.json")) as f:
            return json.load(f)


class RestTables:
    """Tables of an Iceberg REST catalog whose files are on S3, written with S3FileIO."""

    def __init__(self, uri: str, warehouse: str, endpoint: str):
        self.uri = uri
        self.warehouse = warehouse
        self.endpoint = endpoint
        self.region = os.environ.get("AWS_REGION") or "us-east-1"
        import boto3
        from botocore.config import Config

        self.s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name=self.region,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 5, "mode": "standard"}),
        )

    def catalog(self):
        settings = {
            "type": "rest",
            "uri": self.uri,
            "warehouse": self.warehouse,
            "io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
            "s3.endpoint": self.endpoint,
            "s3.path-style-access": "true",
            "client.region": self.region,
        }
        credential = os.environ.get("ICEFEED_SPARK_CATALOG_CREDENTIAL")
        if credential:
            settings["credential"] = credential
        return settings

    def metadata(self, spark, name: str):
        """The current metadata of table `name`: the catalog names its metadata file
        (Spark's own Iceberg catalog loads the table, as every statement does), read
        from S3 as it was written."""
        jvm = spark.sparkContext._jvm
        try:
            catalog = spark._jsparkSession.sessionState().catalogManager().catalog(CATALOG).icebergCatalog()
            table = catalog.loadTable(jvm.org.apache.iceberg.catalog.TableIdentifier.parse(name))
            location = table.operations().current().metadataFileLocation()
        except Exception as e:  # Py4J's errors: the message, not the whole Java stack
            message = "\n  ".join(str(e).strip().splitlines()[:10])
            raise StepError(f"table {name}: loading it from the catalog: {message}") from e
        scheme, _, path = location.partition("://")
        if scheme not in ("s3", "s3a") or "/" not in path:
            raise StepError(f"table {name}: metadata file {location} is not on S3")
        bucket, key = path.split("/", 1)
        try:
            body = self.s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        except Exception as e:  # botocore's errors, said with the file
            raise StepError(f"table {name}: reading {location}: {e}") from e
        return json.loads(body)


class Column:
    """A column of the model's current schema. The model's rows are keyed by `key`, which
    never changes (`id`, `part`, `payload`, `n`, `c7`...); `name` is the current SQL name
    (renames change it), `type` the current SQL type (promotions change it) and
    `field_id` Iceberg's id of the field, learnt from the metadata once it exists."""

    def __init__(self, key: str, name: str, type_: str, added: bool = False):
        self.key = key
        self.name = name
        self.type = type_
        self.added = added
        self.field_id = None

    @property
    def kind(self) -> str:
        return TYPES[self.type][2]


def lit(value, type_: str) -> str:
    """A SQL literal of `value`; floats and decimals cast to the column's `type_`, so a
    VALUES list or a CASE never widens them to another type."""
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, float):
        return f"CAST({value!r} AS {type_})"
    if isinstance(value, Decimal):
        return f"CAST({format(value, 'f')} AS {type_})"
    return str(int(value))


def json_value(value):
    """A value as the JSON holds it: decimals as strings with their 2 fractional digits
    (as icefeed writes them), everything else as is."""
    if isinstance(value, Decimal):
        cents = value.quantize(CENT)
        if cents != value:
            raise StepError(f"decimal {value} has more than 2 fractional digits")
        return format(cents, "f")
    return value


def project(rows, from_columns, to_columns):
    """Rows keyed by the names of schema `from_columns` as rows of schema `to_columns`,
    matched by field id (as Iceberg reads an older file): a new column reads null, a
    dropped one is gone, a renamed one takes its new name."""
    names = {c["id"]: c["name"] for c in from_columns}
    return [{c["name"]: r.get(names.get(c["id"])) for c in to_columns} for r in rows]


def ids_in(ids) -> str:
    return ", ".join(str(i) for i in sorted(ids))


class History:
    """One seed's table: the statements, the model of its rows and schema, what Spark
    committed."""

    def __init__(self, spark, tables, namespace: str, seed: int, mode: str):
        self.spark = spark
        self.tables = tables
        self.namespace = namespace
        self.seed = seed
        self.mode = mode
        self.rng = random.Random(f"{mode}-{seed}")
        self.partitioned = bool(seed & 1)
        self.format_version = 3 if seed & 2 else 2
        self.granularity = "partition" if (seed & 4 and self.format_version == 2) else "file"
        # A v2 table upgraded to v3 halfway: rows of its older files get row ids then.
        self.upgrades = bool(seed & 8) and self.format_version == 2
        self.name = f"{namespace}.{mode}_seed_{seed}"
        self.table = f"{CATALOG}.{self.name}"
        self.schema = [
            Column("id", "id", "BIGINT"),
            Column("part", "part", "INT"),
            Column("payload", "payload", "STRING"),
            Column("n", "n", "BIGINT"),
        ]
        self.model = {}  # id -> row, keyed by column keys
        self.next_id = 1
        self.next_name = 1
        self.deleted_ids = []
        self.snapshots = []
        self.spark_types = {}  # snapshot id -> Spark's types of its columns
        self.known = set()
        self.modes = {}
        self.statements = 0
        self.schema_changes = []  # since the last snapshot
        self.evolutions = 0

    # -- The model's schema --------------------------------------------------------------

    def column(self, key: str) -> Column:
        return next(c for c in self.schema if c.key == key)

    def key_name(self) -> str:
        return self.column("id").name

    def part_name(self) -> str:
        return self.column("part").name

    def non_key_columns(self):
        """What an update sets: every column but the identifier."""
        return [c for c in self.schema if c.key != "id"]

    def value_columns(self):
        """The non-key columns but `part`: what `changed` changes (never empty)."""
        return [c for c in self.schema if c.key not in ("id", "part")]

    def fresh_name(self) -> int:
        self.next_name += 1
        return self.next_name - 1

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
        self.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.{self.namespace}")
        self.sql(f"DROP TABLE IF EXISTS {self.table}")
        self.sql(
            f"CREATE TABLE {self.table} (id BIGINT NOT NULL, part INT NOT NULL, payload STRING, n BIGINT) "
            f"USING iceberg {partitioning} TBLPROPERTIES ({tblprops})"
        )
        self.sql(f"ALTER TABLE {self.table} SET IDENTIFIER FIELDS id")
        meta = self.metadata()
        if meta.get("snapshots"):
            raise StepError("a new table has snapshots")
        self.check_schema(meta)

    def check_schema(self, meta) -> None:
        """The table's current schema must be the model's: the same columns in the same
        order, names and types, identified by `id`'s column. Learns the field ids of
        columns just added."""
        schema = schema_of(meta, meta["current-schema-id"])
        ids = {f["name"]: f["id"] for f in schema["fields"]}
        for c in self.schema:
            if c.field_id is None:
                c.field_id = ids.get(c.name)
        have = [(f["id"], f["name"], f["type"]) for f in schema["fields"]]
        want = [(c.field_id, c.name, TYPES[c.type][0]) for c in self.schema]
        if have != want:
            raise StepError(f"the table's schema differs from the model's\n  table: {have}\n  model: {want}")
        identifier = identifier_names(schema)
        if identifier != [self.key_name()]:
            raise StepError(f"identifier fields {identifier}, not [{self.key_name()!r}]")

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
        # The model's rows are in terms of the current schema: the snapshots must have it.
        self.check_schema(meta)
        want = self.state()
        for i, s in enumerate(chain):
            if s.get("schema-id") != meta["current-schema-id"]:
                raise StepError(
                    f"{label}: snapshot {s['snapshot-id']} has schema {s.get('schema-id')}, not the current one"
                )
            summary = dict(s.get("summary", {}))
            schema = schema_of(meta, s["schema-id"])
            self.known.add(s["snapshot-id"])
            self.spark_types[s["snapshot-id"]] = [spark_type(f["type"]) for f in schema["fields"]]
            self.snapshots.append(
                {
                    "snapshot_id": s["snapshot-id"],
                    "parent_id": s.get("parent-snapshot-id"),
                    "sequence_number": s.get("sequence-number", 0),
                    "operation": summary.pop("operation", None),
                    "statement": label,
                    "sql": statement,
                    "schema_changes": self.schema_changes if i == 0 else [],
                    "modes": dict(self.modes),
                    "summary": summary,
                    "schema_id": s["schema-id"],
                    "columns": [{"id": f["id"], "name": f["name"]} for f in schema["fields"]],
                    "identifier": identifier_names(schema),
                    # What the model says; the last snapshot of a statement only.
                    "expected": want if i == len(chain) - 1 else None,
                }
            )
        self.schema_changes = []

    def state(self):
        """The model's rows as Spark reads them under the current schema: keyed by the
        current names, in schema order, JSON-safe, sorted by id."""
        rows = sorted(self.model.values(), key=lambda r: r["id"])
        return [{c.name: json_value(r[c.key]) for c in self.schema} for r in rows]

    def read_states(self) -> None:
        """Every snapshot's rows, read through Spark (`SELECT * ... VERSION AS OF`) and
        checked against the model, and on v3 tables their lineage. Consecutive snapshots
        of one schema are read in one query (a UNION ALL; different schemas do not union)."""
        states = []
        for _, group in itertools.groupby(self.snapshots, key=lambda s: s["schema_id"]):
            states.extend(self.read_group(list(group)))
        previous, previous_columns = [], []
        for s, (rows, lineage) in zip(self.snapshots, states):
            key = s["identifier"][0]
            rows.sort(key=lambda r: r[key])
            where = f"snapshot {s['snapshot_id']} ({s['statement']}: {s['sql']})"
            expected = s.pop("expected")
            if expected is not None and rows != expected:
                raise StepError(
                    f"Spark's state differs from the model at {where}\n  spark: {rows}\n  model: {expected}"
                )
            # A rewrite may come after a schema change: compare under its schema.
            if s["operation"] == "replace" and rows != project(previous, previous_columns, s["columns"]):
                raise StepError(f"a replace snapshot changed the rows: {where}")
            if len({r[key] for r in rows}) != len(rows):
                raise StepError(f"duplicate ids at {where}")
            s["rows"] = rows
            s["lineage"] = checked_lineage(lineage, where)
            previous, previous_columns = rows, s["columns"]

    def read_group(self, group):
        """The rows of snapshots of one schema, one list per snapshot, and on v3 tables
        each snapshot's lineage (`[id, row id, last updated sequence number]` of its rows;
        None on v2). Time travel to a snapshot id reads with that snapshot's schema (not
        the table's current one): the query's columns must be the snapshot's, by name and
        Spark type. The lineage columns come after them, in the same query: one scan."""
        names = [c["name"] for c in group[0]["columns"]]
        lineage = LINEAGE_COLUMNS if self.format_version >= 3 else ()
        selected = ", ".join(("*",) + lineage)
        query = " UNION ALL ".join(
            f"SELECT {i} AS __snapshot_index, {selected} FROM {self.table} VERSION AS OF {s['snapshot_id']}"
            for i, s in enumerate(group)
        )
        frame = self.spark.sql(query)
        fields = frame.schema.fields[1 : len(frame.schema.fields) - len(lineage)]
        have = [(f.name, f.dataType.simpleString()) for f in fields]
        want = list(zip(names, self.spark_types[group[0]["snapshot_id"]]))
        if have != want:
            raise StepError(
                f"time travel to snapshot {group[0]['snapshot_id']} (schema {group[0]['schema_id']}) "
                f"did not read its schema\n  read: {have}\n  snapshot: {want}"
            )
        key = names.index(group[0]["identifier"][0])
        states = [[] for _ in group]
        lineages = [[] if lineage else None for _ in group]
        for r in frame.collect():
            values = r[1 : 1 + len(names)]
            states[r[0]].append({name: json_value(v) for name, v in zip(names, values)})
            if lineage:
                lineages[r[0]].append([values[key], *r[1 + len(names) :]])
        return list(zip(states, lineages))

    def set_mode(self, prop: str, value: str) -> None:
        self.sql(f"ALTER TABLE {self.table} SET TBLPROPERTIES ('{prop}' = '{value}')")
        self.modes[prop] = value

    # -- Random rows ---------------------------------------------------------------------

    def fresh_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def random_value(self, column: Column, prefix: str = "p"):
        """A value for `column`. Floats are k + 0.5 or k + 0.25 (exact in a FLOAT and
        never integral, so the JSON text of Spark's value is icefeed's); decimals have
        2 fractional digits."""
        rng = self.rng
        if column.key == "part":
            return rng.randrange(PARTS)
        if rng.random() < 0.1:
            return None
        if column.kind == "string":
            return f"{prefix}{rng.randrange(50)}"
        if column.kind == "int":
            return rng.randrange(-1000, 1000) if column.key == "n" else rng.randrange(-50, 50)
        if column.kind == "float":
            return rng.randrange(-20, 20) + rng.choice((0.5, 0.25))
        return (Decimal(rng.randrange(-20000, 20000)) / 100).quantize(CENT)

    def random_row(self, id_: int):
        return {c.key: id_ if c.key == "id" else self.random_value(c) for c in self.schema}

    def changed(self, row):
        rng = self.rng
        new = dict(row)
        columns = self.value_columns()
        k = rng.randrange(4)
        if k == 0:
            # One column.
            c = rng.choice(columns)
            new[c.key] = self.random_value(c, "u")
        elif k == 1:
            # Every column.
            for c in columns:
                new[c.key] = self.random_value(c, "u")
        elif k == 2:
            # One column to null, the others new.
            cleared = rng.choice(columns)
            for c in columns:
                new[c.key] = None if c is cleared else self.random_value(c, "u")
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
        # Every column, by name: the statement does not depend on the column order.
        names = ", ".join(c.name for c in self.schema)
        tuples = ", ".join("(" + ", ".join(lit(r[c.key], c.type) for c in self.schema) + ")" for r in rows)
        self.commit("insert", f"INSERT INTO {self.table} ({names}) VALUES {tuples}", model)

    def update_rows(self, label: str, new_rows) -> None:
        """UPDATE ... SET col = CASE id WHEN ... END for each non-key column, WHERE id IN (...)."""
        key = self.key_name()
        sets = []
        for c in self.non_key_columns():
            cases = " ".join(f"WHEN {r['id']} THEN {lit(r[c.key], c.type)}" for r in new_rows)
            sets.append(f"{c.name} = CASE {key} {cases} ELSE {c.name} END")
        ids = [r["id"] for r in new_rows]
        model = dict(self.model)
        for r in new_rows:
            model[r["id"]] = r
        statement = f"UPDATE {self.table} SET {', '.join(sets)} WHERE {key} IN ({ids_in(ids)})"
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
        sets = ", ".join(f"{c.name} = {c.name}" for c in self.non_key_columns())
        if self.rng.random() < 0.3:
            where = f"{self.part_name()} = {self.rng.choice(sorted({r['part'] for r in self.model.values()}))}"
        else:
            where = f"{self.key_name()} IN ({ids_in(self.pick(1, 4))})"
        self.commit("no-op update", f"UPDATE {self.table} SET {sets} WHERE {where}", self.model)

    def delete(self) -> None:
        ids = self.pick(1, 4)
        model = {k: v for k, v in self.model.items() if k not in ids}
        self.deleted_ids.extend(ids)
        self.commit("delete rows", f"DELETE FROM {self.table} WHERE {self.key_name()} IN ({ids_in(ids)})", model)

    def delete_partition(self) -> None:
        part = self.rng.choice(sorted({r["part"] for r in self.model.values()}))
        model = {k: v for k, v in self.model.items() if v["part"] != part}
        self.deleted_ids.extend(k for k, v in self.model.items() if v["part"] == part)
        self.commit("delete partition", f"DELETE FROM {self.table} WHERE {self.part_name()} = {part}", model)

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
        # The source has the target's current names; each column cast to its type (a
        # column of NULLs only would otherwise have none).
        columns = self.schema
        rows = ", ".join("(" + ", ".join(lit(r[c.key], c.type) for c in columns) + f", '{r['op']}')" for r in source)
        names = ", ".join(c.name for c in columns)
        casts = ", ".join(f"CAST({c.name} AS {c.type}) AS {c.name}" for c in columns)
        updates = ", ".join(f"t.{c.name} = s.{c.name}" for c in self.non_key_columns())
        inserted = ", ".join(f"s.{c.name}" for c in columns)
        key = self.key_name()
        statement = (
            f"MERGE INTO {self.table} t USING (SELECT {casts}, op "
            f"FROM VALUES {rows} AS s({names}, op)) s ON t.{key} = s.{key} "
            f"WHEN MATCHED AND s.op = 'd' THEN DELETE "
            f"WHEN MATCHED THEN UPDATE SET {updates} "
            f"WHEN NOT MATCHED THEN INSERT ({names}) VALUES ({inserted})"
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

    # -- Schema evolution (metadata only, no snapshot) -----------------------------------

    def evolve(self, statement: str, change) -> None:
        """Runs an ALTER TABLE, then `change()` applies it to the model's schema and rows;
        the table must make no snapshot and have the model's schema after it."""
        self.sql(statement)
        meta = self.metadata()
        new = [s["snapshot-id"] for s in meta.get("snapshots", []) if s["snapshot-id"] not in self.known]
        if new:
            raise StepError(f"schema change made snapshots {new}:\n  {statement}")
        change()
        self.check_schema(meta)
        self.schema_changes.append(statement)
        self.evolutions += 1

    def add_column(self) -> None:
        key = f"c{self.fresh_name()}"
        column = Column(key, key, self.rng.choice(ADDED_TYPES), added=True)
        r = self.rng.random()
        if r < 0.2:
            position, index = " FIRST", 0
        elif r < 0.45:
            after = self.rng.choice(self.schema)
            position, index = f" AFTER {after.name}", self.schema.index(after) + 1
        else:
            position, index = "", len(self.schema)

        def change():
            self.schema.insert(index, column)
            # Rows written before read null.
            for row in self.model.values():
                row[column.key] = None

        self.evolve(f"ALTER TABLE {self.table} ADD COLUMN {column.name} {column.type}{position}", change)

    def rename_column(self) -> None:
        # Any column, the identifier and the partition source more often than the others:
        # Iceberg tracks both by field id, a reader going by name would lose them.
        weights = [{"id": 3, "part": 2}.get(c.key, 1) for c in self.schema]
        column = self.rng.choices(self.schema, weights)[0]
        new = f"{column.key}_r{self.fresh_name()}"

        def change():
            column.name = new

        self.evolve(f"ALTER TABLE {self.table} RENAME COLUMN {column.name} TO {new}", change)

    def promotable(self):
        return [c for c in self.schema if c.added and c.type in PROMOTIONS]

    def promote_column(self) -> None:
        column = self.rng.choice(self.promotable())
        wider = PROMOTIONS[column.type]

        def change():
            # The values stay: every old value is one of the wider type.
            column.type = wider

        self.evolve(f"ALTER TABLE {self.table} ALTER COLUMN {column.name} TYPE {wider}", change)

    def droppable(self):
        """Not the identifier, not the partition source (Iceberg refuses both; `part`
        stays in unpartitioned tables too, for the partition steps), and one value
        column stays so that updates change something."""
        columns = self.value_columns()
        return columns if len(columns) > 1 else []

    def drop_column(self) -> None:
        column = self.rng.choice(self.droppable())

        def change():
            self.schema.remove(column)
            for row in self.model.values():
                del row[column.key]

        self.evolve(f"ALTER TABLE {self.table} DROP COLUMN {column.name}", change)

    def move_column(self) -> None:
        column = self.rng.choice(self.schema)
        others = [c for c in self.schema if c is not column]
        if self.rng.random() < 0.4:
            position, order = "FIRST", [column] + others
        else:
            after = self.rng.choice(others)
            i = others.index(after) + 1
            position, order = f"AFTER {after.name}", others[:i] + [column] + others[i:]

        def change():
            self.schema[:] = order

        self.evolve(f"ALTER TABLE {self.table} ALTER COLUMN {column.name} {position}", change)

    def pick_evolution(self) -> str:
        """The name of a random schema change among those possible now."""
        options = [
            ("add_column", 4, True),
            ("rename_column", 3, True),
            # Only possible once a column was added: more weight, not to be rare.
            ("promote_column", 5, bool(self.promotable())),
            ("drop_column", 2, bool(self.droppable())),
            ("move_column", 2, True),
        ]
        names = [n for n, _, ok in options if ok]
        weights = [w for _, w, ok in options if ok]
        return self.rng.choices(names, weights)[0]

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
            name = "switch_mode"
            try:
                if self.upgrades and step == steps // 2:
                    name = "upgrade"
                    self.upgrade()
                if self.mode == "mor" and step > 0 and self.rng.random() < 0.15:
                    self.switch_mode()
                # Schema changes between data steps, sometimes several in a row (schemas
                # no snapshot has); they come on top of the data steps.
                while step > 0 and self.rng.random() < EVOLVE:
                    name = self.pick_evolution()
                    getattr(self, name)()
                name = "insert" if not self.model else self.rng.choice(names)
                getattr(self, name)()
            except StepError as e:
                raise StepError(f"{where} step {step + 1} ({name}): {e}") from e
        try:
            self.read_states()
        except StepError as e:
            raise StepError(f"{where} reading the states back: {e}") from e
        meta = self.metadata()
        self.location = meta["location"]
        self.identifier = identifier_names(schema_of(meta, meta["current-schema-id"]))
        self.seconds = time.time() - started
        ops = {}
        for s in self.snapshots:
            ops[s["operation"]] = ops.get(s["operation"], 0) + 1
        schemas = len({s["schema_id"] for s in self.snapshots})
        log(
            f"seed {self.seed} ({self.mode}, v{self.format_version}, "
            f"{'partitioned' if self.partitioned else 'unpartitioned'}, granularity {self.granularity}): "
            f"{len(self.snapshots)} snapshots {ops} under {schemas} schemas, schema changes {self.evolutions}, "
            f"from {self.statements} statements in {self.seconds:.1f} s"
        )

    def upgrade(self) -> None:
        """Upgrades the table to format version 3 (row lineage, deletion vectors)."""
        self.sql(f"ALTER TABLE {self.table} SET TBLPROPERTIES ('format-version' = '3')")
        if self.metadata()["format-version"] != 3:
            raise StepError("the table was not upgraded to format version 3")
        self.format_version = 3

    def metadata(self):
        return self.tables.metadata(self.spark, self.name)

    def json(self):
        return {
            "seed": self.seed,
            "mode": self.mode,
            "table": self.name,
            "location": self.location,
            "format_version": self.format_version,
            "upgraded": self.upgrades,
            "partitioned": self.partitioned,
            "granularity": self.granularity,
            "seconds": round(self.seconds, 2),
            "identifier": self.identifier,
            "snapshots": self.snapshots,
        }


def checked_lineage(lineage, where: str):
    """A snapshot's lineage sorted by id; a row id that two rows share fails (pairing
    by row id needs them unique)."""
    if lineage is None:
        return None
    lineage.sort(key=lambda entry: entry[0])
    row_ids = [row_id for _, row_id, _ in lineage if row_id is not None]
    if len(set(row_ids)) != len(row_ids):
        raise StepError(f"duplicate row ids at {where}: {lineage}")
    return lineage


def schema_of(meta, schema_id: int):
    return next(s for s in meta["schemas"] if s["schema-id"] == schema_id)


def identifier_names(schema):
    names = {f["id"]: f["name"] for f in schema["fields"]}
    return [names[i] for i in schema.get("identifier-field-ids", [])]


def spark_type(iceberg_type: str) -> str:
    """Spark's name of an Iceberg primitive type of the metadata."""
    return next(spark for iceberg, spark, _ in TYPES.values() if iceberg == iceberg_type)


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
    parser.add_argument("--namespace", default=NAMESPACE)
    parser.add_argument("--catalog-uri", help="an Iceberg REST catalog, instead of the Hadoop warehouse")
    parser.add_argument("--s3-endpoint", help="the S3 endpoint of the REST catalog's tables")
    parser.add_argument("--warehouse-name", default="", help="the REST catalog's warehouse")
    parser.add_argument("--aws-bundle", default=os.environ.get("ICEFEED_TEST_SPARK_AWS_BUNDLE"))
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="more Spark settings")
    args = parser.parse_args()
    if not args.jar or not os.path.isfile(args.jar):
        log(
            f"no Iceberg Spark runtime jar at {args.jar!r}: pass --jar or set ICEFEED_TEST_SPARK_JAR (scripts/spark.sh)"
        )
        return 1
    jars = [args.jar]
    if args.catalog_uri:
        if not args.s3_endpoint:
            log("--catalog-uri needs --s3-endpoint")
            return 1
        if not args.aws_bundle or not os.path.isfile(args.aws_bundle):
            log(
                f"no iceberg-aws-bundle jar at {args.aws_bundle!r}: pass --aws-bundle or set "
                "ICEFEED_TEST_SPARK_AWS_BUNDLE (scripts/spark.sh --aws-bundle)"
            )
            return 1
        jars.append(args.aws_bundle)
    try:
        runs = [(s, "mor") for s in parse_seeds(args.seeds)] + [(s, "cow") for s in parse_seeds(args.cow_seeds)]
    except ValueError:
        log(f"bad seeds {args.seeds!r} / {args.cow_seeds!r}: use `7`, `1..20`, `1..=20` or `3,5,9`")
        return 1
    warehouse = os.path.abspath(args.warehouse)
    os.makedirs(warehouse, exist_ok=True)
    if args.catalog_uri:
        tables = RestTables(args.catalog_uri, args.warehouse_name, args.s3_endpoint)
        into = f"the REST catalog {args.catalog_uri} (warehouse {args.warehouse_name!r}, S3 {args.s3_endpoint})"
    else:
        tables = HadoopTables(warehouse)
        into = warehouse
    started = time.time()
    try:
        spark = start_session(jars, warehouse, tables.catalog(), [c.split("=", 1) for c in args.conf])
    except Exception:  # noqa: BLE001 - whatever it is, say so and stop
        log("could not start Spark (java on PATH or JAVA_HOME? pyspark 3.5?):\n" + traceback.format_exc())
        return 1
    log(f"Spark {spark.version} up in {time.time() - started:.1f} s; {len(runs)} histories into {into}")
    versions = {"spark": spark.version, "iceberg": spark.sparkContext._jvm.org.apache.iceberg.IcebergBuild.version()}
    histories = []
    try:
        for seed, mode in runs:
            history = History(spark, tables, args.namespace, seed, mode)
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
