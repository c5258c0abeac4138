"""Seeded random histories written by pyiceberg while the table's schema evolves.

The writer and the oracle of the schema evolution test (tests/it/schema_evolution.rs).
For every seed it creates `py.evolve_<seed>` in a SQL catalog on SQLite
(<warehouse>/catalog.db, catalog name `py`, files below <warehouse>/warehouse): `id long`
required and the identifier field, `region string`, `qty int`, `price float`,
`amount decimal(9,2)`, `note string`; odd seeds partition by identity on `region`. Then
12-20 random steps mix data commits (append; delete by filter, which pyiceberg commits
copy-on-write: whole files dropped in a `delete` snapshot, partly matched files rewritten
in an `overwrite` one; overwrite with a filter; upsert by the identifier) with schema
changes (`update_schema()`: add a column, sometimes under the name of a dropped one;
rename; promote int to long, float to double, decimal(p,s) to decimal(p',s); drop a
column that is neither the identifier nor the partition source; move_first /
move_before / move_after). Seeds divisible by 3 also rename the identifier column
(once or twice); the others never do. A history ends with a copy-on-write rewrite of
files written under an older schema than the rewrite's own if it had none yet.

A plain model of the rows (keyed by field id, so renames, moves and promotions are free)
checks every state: after every commit each new snapshot is read back through pyiceberg
(`table.scan(snapshot_id=...)`, checked to read with that snapshot's schema). The last
snapshot of a step must equal the model; the snapshots a step makes before its last one
(a delete then an overwrite, then an append, ...) must keep every row the step leaves
alone and hold only rows of the state before or after the step.

Usage:
  pyiceberg_history.py --warehouse <dir> --out <file.json> --seeds 1..=6
Seeds: `7`, `1..20`, `1..=20` or `3,5,9`. The JSON written to --out:
  {"pyiceberg": version, "seconds", "histories": [
     {"seed", "table", "partitioned", "identifier": [current names], "seconds",
      "steps": [{"kind", "detail", "snapshots": n}],
      "snapshots": [{"snapshot_id", "parent_id", "sequence_number", "operation",
                     "statement", "schema_changes": [changes since the previous snapshot],
                     "schema_id", "columns": [{"id", "name", "type"}], "identifier": [names],
                     "summary": {...}, "removed_file_schemas": [schema ids the removed
                     data files were written with], "rows": [{name: value}]}]}]}
Values: ints, floats k+0.5 / k+0.25 (exact, never integral), decimals as strings with
exactly the column's scale digits, strings, null. Progress and errors go to stderr;
exit status 1 on error.
"""

import argparse
import json
import os
import random
import sys
import time
import traceback
import warnings
from decimal import Decimal

import pyarrow as pa
import pyiceberg
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import (
    And,
    EqualTo,
    GreaterThanOrEqual,
    IsNull,
    LessThan,
    Or,
)
from pyiceberg.manifest import ManifestContent, ManifestEntryStatus
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import (
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
)

CATALOG = "py"
NAMESPACE = "py"
REGIONS = ("r0", "r1", "r2")


def log(message: str) -> None:
    print(f"pyiceberg_history: {message}", file=sys.stderr, flush=True)


class StepError(Exception):
    pass


def parse_seeds(spec: str):
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


# ---------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------


def type_name(t) -> str:
    if isinstance(t, DecimalType):
        return f"decimal({t.precision},{t.scale})"
    return str(t)


def random_value(rng: random.Random, t, nullable: bool):
    """A random value of Iceberg type `t` in its JSON form (decimals as strings)."""
    if nullable and rng.random() < 0.15:
        return None
    if isinstance(t, (IntegerType, LongType)):
        return rng.randint(-60, 60)
    if isinstance(t, (FloatType, DoubleType)):
        # Exact in float32, never integral: icefeed writes 1.0 as `1`, Python as `1.0`.
        return rng.randint(-100, 100) + rng.choice((0.5, 0.25))
    if isinstance(t, DecimalType):
        digits = min(t.precision - t.scale, 5)
        unscaled = rng.randint(-(10 ** (digits + t.scale)) + 1, 10 ** (digits + t.scale) - 1)
        return decimal_text(Decimal(unscaled).scaleb(-t.scale), t.scale)
    if isinstance(t, StringType):
        return f"s{rng.randint(0, 999)}"
    raise StepError(f"no values of type {t}")


def decimal_text(d: Decimal, scale: int) -> str:
    return str(d.quantize(Decimal(1).scaleb(-scale)))


def to_arrow_value(value, t):
    if value is None:
        return None
    if isinstance(t, DecimalType):
        return Decimal(value)
    return value


def from_arrow_value(value, t):
    """A value pyarrow read, in its JSON form (checked to be one the writer can write)."""
    if value is None:
        return None
    if isinstance(t, DecimalType):
        if not isinstance(value, Decimal):
            raise StepError(f"decimal column read as {value!r}")
        return decimal_text(value, t.scale)
    if isinstance(t, (FloatType, DoubleType)):
        if value == int(value):
            raise StepError(f"integral float {value!r} read back")
        return float(value)
    return value


# ---------------------------------------------------------------------------------------
# Filters: ("range", fid, lo, hi) lo <= v < hi, ("eq", fid, v), ("lt", fid, v),
# ("isnull", fid), ("and", a, b), ("or", a, b); a comparison with null is false.
# ---------------------------------------------------------------------------------------


def matches(f, row) -> bool:
    kind = f[0]
    if kind == "and":
        return matches(f[1], row) and matches(f[2], row)
    if kind == "or":
        return matches(f[1], row) or matches(f[2], row)
    v = row.get(f[1])
    if kind == "isnull":
        return v is None
    if v is None:
        return False
    if kind == "range":
        return f[2] <= v < f[3]
    if kind == "eq":
        return v == f[2]
    if kind == "lt":
        return v < f[2]
    raise StepError(f"filter {f}")


def expression(f, schema):
    kind = f[0]
    if kind in ("and", "or"):
        a, b = expression(f[1], schema), expression(f[2], schema)
        return And(a, b) if kind == "and" else Or(a, b)
    name = schema.find_column_name(f[1])
    if kind == "isnull":
        return IsNull(name)
    if kind == "range":
        return And(GreaterThanOrEqual(name, f[2]), LessThan(name, f[3]))
    if kind == "eq":
        return EqualTo(name, f[2])
    if kind == "lt":
        return LessThan(name, f[2])
    raise StepError(f"filter {f}")


def describe(f, schema) -> str:
    kind = f[0]
    if kind in ("and", "or"):
        return f"({describe(f[1], schema)} {kind} {describe(f[2], schema)})"
    name = schema.find_column_name(f[1])
    if kind == "isnull":
        return f"{name} is null"
    if kind == "range":
        return f"{f[2]} <= {name} < {f[3]}"
    if kind == "eq":
        return f"{name} == {f[2]!r}"
    return f"{name} < {f[2]}"


# ---------------------------------------------------------------------------------------
# One history
# ---------------------------------------------------------------------------------------


class History:
    def __init__(self, catalog, seed: int):
        self.catalog = catalog
        self.seed = seed
        self.rng = random.Random(seed)
        self.name = f"{NAMESPACE}.evolve_{seed}"
        self.partitioned = seed % 2 == 1
        self.renames_identifier = seed % 3 == 0
        self.model = {}  # id value -> {field id: JSON value}
        self.next_id = 1
        self.names = 0  # counter for fresh column names
        self.dropped = []  # names of dropped columns (re-added now and then)
        self.snapshots = []
        self.steps = []
        self.pending_changes = []  # schema changes since the last snapshot
        self.file_schema = {}  # data file path -> schema id it was written with
        self.cross_schema_rewrite = False
        self.seconds = 0.0

    # -- schema helpers -----------------------------------------------------------------

    @property
    def schema(self):
        return self.table.schema()

    def id_field(self):
        return self.schema.find_field(self.schema.identifier_field_ids[0])

    def partition_source(self):
        return 2 if self.partitioned else None

    def render(self, row, schema):
        return {f.name: row.get(f.field_id) for f in schema.fields}

    def model_rows(self, schema):
        return sorted((self.render(r, schema) for r in self.model.values()), key=canonical)

    def new_row(self, rid):
        row = {}
        for f in self.schema.fields:
            if f.field_id == self.id_field().field_id:
                row[f.field_id] = rid
            elif f.field_id == 2:
                row[f.field_id] = self.rng.choice(REGIONS)
            else:
                row[f.field_id] = random_value(self.rng, f.field_type, not f.required)
        return row

    def changed(self, row):
        """`row` with one or two of its other columns changed (maybe to null, maybe moving
        to another partition)."""
        new = dict(row)
        others = [f for f in self.schema.fields if f.field_id != self.id_field().field_id]
        for f in self.rng.sample(others, min(len(others), self.rng.randint(1, 2))):
            if f.field_id == 2:
                new[2] = self.rng.choice(REGIONS)
            else:
                new[f.field_id] = random_value(self.rng, f.field_type, not f.required)
        return new

    def arrow(self, rows):
        schema = self.schema
        data = [{f.name: to_arrow_value(r.get(f.field_id), f.field_type) for f in schema.fields} for r in rows]
        return pa.Table.from_pylist(data, schema=schema.as_arrow())

    def fresh_name(self, stem: str) -> str:
        self.names += 1
        return f"{stem}_{self.names}"

    # -- running ------------------------------------------------------------------------

    def run(self):
        started = time.time()
        self.create()
        steps = self.rng.randint(12, 20)
        rename_at = self.rng.randint(3, 8) if self.renames_identifier else None
        self.step_append(self.rng.randint(10, 20))
        for i in range(1, steps):
            if i == rename_at or (self.renames_identifier and i > 10 and self.rng.random() < 0.08):
                self.schema_step(force="rename_identifier")
            elif self.rng.random() < 0.4:
                self.schema_step()
            else:
                self.data_step()
        if not self.cross_schema_rewrite:
            self.force_cross_schema_rewrite()
        self.seconds = time.time() - started
        log(
            f"{self.name}: {len(self.snapshots)} snapshots, {len(self.schema.fields)} columns, "
            f"schema {self.schema.schema_id}, {len(self.model)} rows in {self.seconds:.1f} s"
        )

    def create(self):
        self.catalog.create_namespace_if_not_exists(NAMESPACE)
        schema = Schema(
            NestedField(1, "id", LongType(), required=True),
            NestedField(2, "region", StringType(), required=False),
            NestedField(3, "qty", IntegerType(), required=False),
            NestedField(4, "price", FloatType(), required=False),
            NestedField(5, "amount", DecimalType(9, 2), required=False),
            NestedField(6, "note", StringType(), required=False),
            identifier_field_ids=[1],
        )
        spec = PartitionSpec()
        if self.partitioned:
            spec = PartitionSpec(
                PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region")
            )
        self.table = self.catalog.create_table(self.name, schema=schema, partition_spec=spec)

    def head(self):
        s = self.table.current_snapshot()
        return s.snapshot_id if s else None

    def commit(self, kind: str, detail: str, action, after: dict, touched=()):
        """Runs `action` (the pyiceberg calls of one step), then reads back each snapshot
        it made; `after` is the model after the step, `touched` the ids of the rows it
        deletes or writes."""
        before = self.model
        parent = self.head()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            action()
        self.table = self.catalog.load_table(self.name)
        new = []
        s = self.table.current_snapshot()
        while s is not None and s.snapshot_id != parent:
            new.append(s)
            s = self.table.snapshot_by_id(s.parent_snapshot_id) if s.parent_snapshot_id else None
        new.reverse()
        self.model = after
        self.steps.append({"kind": kind, "detail": detail, "snapshots": len(new)})
        if not new:
            if canonical_rows(self.model_rows(self.schema)) != canonical_rows(
                sorted((self.render(r, self.schema) for r in before.values()), key=canonical)
            ):
                raise StepError(f"{self.name}: {kind} {detail} made no snapshot but the model changed")
            return
        for i, snap in enumerate(new):
            self.record(snap, f"{kind}: {detail}" + (f" (snapshot {i + 1} of {len(new)})" if len(new) > 1 else ""))
            rows = self.snapshots[-1]["rows"]
            schema = self.schema
            if snap.schema_id != schema.schema_id:
                raise StepError(
                    f"{self.name}: snapshot {snap.snapshot_id} has schema {snap.schema_id}, not {schema.schema_id}"
                )
            if i == len(new) - 1:
                want = self.model_rows(schema)
                if canonical_rows(rows) != canonical_rows(want):
                    raise StepError(
                        f"{self.name}: after {kind} {detail}, pyiceberg reads {len(rows)} rows at "
                        f"snapshot {snap.snapshot_id}, the model has {len(want)}:\n"
                        f"  read:  {sorted(canonical_rows(rows) - canonical_rows(want))}\n"
                        f"  model: {sorted(canonical_rows(want) - canonical_rows(rows))}"
                    )
            else:
                old = canonical_rows(self.render(r, schema) for r in before.values())
                now = canonical_rows(self.render(r, schema) for r in after.values())
                kept = canonical_rows(self.render(r, schema) for k, r in before.items() if k not in touched)
                have = canonical_rows(rows)
                if not kept <= have or not have <= (old | now):
                    raise StepError(
                        f"{self.name}: {kind} {detail}: intermediate snapshot {snap.snapshot_id} "
                        f"lost untouched rows {sorted(kept - have)} or has rows of neither "
                        f"state {sorted(have - (old | now))}"
                    )

    def record(self, snap, statement: str):
        schema = next(s for s in self.table.schemas().values() if s.schema_id == snap.schema_id)
        scan = self.table.scan(snapshot_id=snap.snapshot_id)
        projection = scan.projection()
        if projection.schema_id != schema.schema_id or projection.fields != schema.fields:
            raise StepError(
                f"{self.name}: pyiceberg scans snapshot {snap.snapshot_id} with schema "
                f"{projection.schema_id}, not the snapshot's {schema.schema_id}"
            )
        arrow = scan.to_arrow()
        if arrow.schema.names != [f.name for f in schema.fields]:
            raise StepError(f"{self.name}: read columns {arrow.schema.names}, schema has {schema.fields}")
        types = {f.name: f.field_type for f in schema.fields}
        rows = [{k: from_arrow_value(v, types[k]) for k, v in r.items()} for r in arrow.to_pylist()]
        rows.sort(key=canonical)
        added, removed = snapshot_files(self.table, snap)
        removed_schemas = sorted({self.file_schema.get(f, -1) for f in removed})
        for f in added:
            self.file_schema[f] = snap.schema_id
        summary = {k: v for k, v in snap.summary.additional_properties.items()}
        operation = snap.summary.operation.value
        if (
            operation == "overwrite"
            and any(s < snap.schema_id for s in removed_schemas)
            and int(summary.get("added-records", "0")) > 0
        ):
            self.cross_schema_rewrite = True
        self.snapshots.append(
            {
                "snapshot_id": snap.snapshot_id,
                "parent_id": snap.parent_snapshot_id,
                "sequence_number": snap.sequence_number,
                "operation": operation,
                "statement": statement,
                "schema_changes": self.pending_changes,
                "schema_id": schema.schema_id,
                "columns": [{"id": f.field_id, "name": f.name, "type": type_name(f.field_type)} for f in schema.fields],
                "identifier": [schema.find_column_name(i) for i in schema.identifier_field_ids],
                "summary": summary,
                "removed_file_schemas": removed_schemas,
                "rows": rows,
            }
        )
        self.pending_changes = []

    # -- data steps ---------------------------------------------------------------------

    def data_step(self):
        kind = self.rng.choices(("append", "delete", "overwrite", "upsert"), (3, 3, 2, 2))[0]
        if not self.model and kind != "append":
            kind = "append"
        if kind == "upsert" and self.table.current_snapshot().schema_id != self.schema.schema_id:
            # pyiceberg 0.12's upsert reads the matched rows with the branch head's schema
            # (`use_ref`), so right after a schema change it fails on the cast.
            kind = "overwrite"
        if kind == "append":
            self.step_append(self.rng.randint(3, 10))
        elif kind == "delete":
            self.step_delete(self.random_filter())
        elif kind == "overwrite":
            self.step_overwrite()
        else:
            self.step_upsert()

    def step_append(self, n: int):
        rows = []
        for _ in range(n):
            rows.append(self.new_row(self.next_id))
            self.next_id += 1
        after = dict(self.model)
        idf = self.id_field().field_id
        for r in rows:
            after[r[idf]] = r
        ids = [r[idf] for r in rows]
        self.commit("append", f"{n} rows, ids {ids[0]}..{ids[-1]}", lambda: self.table.append(self.arrow(rows)), after)

    def random_filter(self):
        """A filter on the current schema matching a few rows, usually: an id range, a
        region, a comparison or a null test on another column."""
        schema = self.schema
        idf = self.id_field().field_id
        ids = sorted(self.model)
        choice = self.rng.random()
        lo = self.rng.choice(ids)
        narrow = ("range", idf, lo, lo + self.rng.randint(1, 3))
        has_region = any(f.field_id == 2 for f in schema.fields)  # dropped on unpartitioned tables
        if choice < 0.45 or (choice < 0.7 and not has_region):
            return narrow
        if choice < 0.6:
            return ("and", ("eq", 2, self.rng.choice(REGIONS)), ("range", idf, lo, lo + self.rng.randint(2, 8)))
        if choice < 0.7:
            return ("eq", 2, self.rng.choice(REGIONS)) if len(self.model) > 20 else narrow
        numeric = [
            f
            for f in schema.fields
            if isinstance(f.field_type, (IntegerType, LongType, FloatType, DoubleType)) and f.field_id != idf
        ]
        nullable = [f for f in schema.fields if not f.required and f.field_id != 2]
        if choice < 0.85 and numeric:
            f = self.rng.choice(numeric)
            return ("and", ("lt", f.field_id, self.rng.randint(-40, 0)), ("range", idf, lo, lo + 10))
        if nullable:
            f = self.rng.choice(nullable)
            return ("and", ("isnull", f.field_id), ("range", idf, lo, lo + 6))
        return narrow

    def step_delete(self, f):
        schema = self.schema
        after = {k: r for k, r in self.model.items() if not matches(f, r)}
        text = describe(f, schema)
        self.commit(
            "delete",
            f"where {text} ({len(self.model) - len(after)} rows)",
            lambda: self.table.delete(expression(f, schema)),
            after,
            {k for k, r in self.model.items() if matches(f, r)},
        )

    def step_overwrite(self):
        schema = self.schema
        f = self.random_filter()
        matched = [r for r in self.model.values() if matches(f, r)]
        after = {k: r for k, r in self.model.items() if not matches(f, r)}
        idf = self.id_field().field_id
        rows = [self.changed(r) for r in matched if self.rng.random() < 0.6]
        for _ in range(self.rng.randint(0, 3)):
            rows.append(self.new_row(self.next_id))
            self.next_id += 1
        for r in rows:
            after[r[idf]] = r
        text = describe(f, schema)
        self.commit(
            "overwrite",
            f"where {text}: {len(matched)} rows replaced by {len(rows)}",
            lambda: self.table.overwrite(self.arrow(rows), overwrite_filter=expression(f, schema)),
            after,
            {r[idf] for r in matched + rows},
        )

    def step_upsert(self):
        idf = self.id_field().field_id
        existing = self.rng.sample(sorted(self.model), min(len(self.model), self.rng.randint(1, 4)))
        rows = []
        for rid in existing:
            # Now and then a row that is already there, which upsert leaves alone.
            rows.append(dict(self.model[rid]) if self.rng.random() < 0.2 else self.changed(self.model[rid]))
        for _ in range(self.rng.randint(0, 3)):
            rows.append(self.new_row(self.next_id))
            self.next_id += 1
        self.rng.shuffle(rows)
        after = dict(self.model)
        for r in rows:
            after[r[idf]] = r
        updated = sum(1 for r in rows if r[idf] in self.model and self.model[r[idf]] != r)
        inserted = sum(1 for r in rows if r[idf] not in self.model)
        self.commit(
            "upsert",
            f"{len(rows)} rows: {updated} updated, {inserted} inserted, {len(rows) - updated - inserted} unchanged",
            lambda: self.table.upsert(self.arrow(rows)),
            after,
            {r[idf] for r in rows},
        )

    # -- schema steps -------------------------------------------------------------------

    def schema_step(self, force=None):
        ops = [force] if force else []
        if not force:
            for _ in range(self.rng.choice((1, 1, 1, 2, 3))):
                ops.append(self.rng.choices(("add", "rename", "promote", "drop", "move"), (3, 2, 2, 1.5, 1.5))[0])
        for op in ops:
            getattr(self, f"schema_{op}")()

    def update(self, kind: str, detail: str, change):
        with self.table.update_schema() as u:
            change(u)
        self.table = self.catalog.load_table(self.name)
        self.steps.append({"kind": kind, "detail": detail, "snapshots": 0})
        self.pending_changes.append(f"{kind} {detail} -> schema {self.schema.schema_id}")

    def schema_add(self):
        kinds = [IntegerType(), LongType(), FloatType(), DoubleType(), StringType(), DecimalType(7, 3)]
        t = self.rng.choice(kinds)
        current = {f.name for f in self.schema.fields}
        revived = [n for n in self.dropped if n not in current]
        name = self.rng.choice(revived) if revived and self.rng.random() < 0.5 else self.fresh_name("c")
        self.update("add_column", f"{name} {type_name(t)}", lambda u: u.add_column(name, t))
        fid = self.schema.find_field(name).field_id
        for r in self.model.values():
            r[fid] = None

    def schema_rename(self):
        idf = self.id_field().field_id
        fields = [f for f in self.schema.fields if f.field_id != idf]
        f = self.rng.choice(fields)
        current = {x.name for x in self.schema.fields}
        revived = [n for n in self.dropped if n not in current]
        new = self.rng.choice(revived) if revived and self.rng.random() < 0.3 else self.fresh_name(f.name.split("_")[0])
        self.update("rename_column", f"{f.name} -> {new}", lambda u: u.rename_column(f.name, new))

    def schema_rename_identifier(self):
        f = self.id_field()
        new = self.fresh_name("key")
        self.update("rename_identifier", f"{f.name} -> {new}", lambda u: u.rename_column(f.name, new))

    def schema_promote(self):
        candidates = []
        for f in self.schema.fields:
            t = f.field_type
            if isinstance(t, IntegerType):
                candidates.append((f, LongType()))
            elif isinstance(t, FloatType):
                candidates.append((f, DoubleType()))
            elif isinstance(t, DecimalType) and t.precision < 38:
                candidates.append((f, DecimalType(min(38, t.precision + self.rng.randint(1, 9)), t.scale)))
        if not candidates:
            return self.schema_add()
        f, t = self.rng.choice(candidates)
        self.update(
            "promote",
            f"{f.name} {type_name(f.field_type)} -> {type_name(t)}",
            lambda u: u.update_column(f.name, field_type=t),
        )

    def schema_drop(self):
        idf = self.id_field().field_id
        fields = [f for f in self.schema.fields if f.field_id not in (idf, self.partition_source())]
        if len(self.schema.fields) <= 3 or not fields:
            return self.schema_add()
        f = self.rng.choice(fields)
        self.update("delete_column", f.name, lambda u: u.delete_column(f.name))
        self.dropped.append(f.name)
        for r in self.model.values():
            r.pop(f.field_id, None)

    def schema_move(self):
        fields = self.schema.fields
        f = self.rng.choice(fields)
        others = [x for x in fields if x.field_id != f.field_id]
        how = self.rng.choice(("first", "after", "before"))
        if how == "first":
            self.update("move", f"{f.name} first", lambda u: u.move_first(f.name))
        else:
            o = self.rng.choice(others)
            if how == "after":
                self.update("move", f"{f.name} after {o.name}", lambda u: u.move_after(f.name, o.name))
            else:
                self.update("move", f"{f.name} before {o.name}", lambda u: u.move_before(f.name, o.name))

    def force_cross_schema_rewrite(self):
        """A column added, then single rows deleted until a rewrite carried rows of files
        written under an older schema into new ones."""
        self.schema_add()
        idf = self.id_field().field_id
        for _ in range(8):
            if len(self.model) < 2:
                self.step_append(6)
            rid = self.rng.choice(sorted(self.model))
            self.step_delete(("range", idf, rid, rid + 1))
            if self.cross_schema_rewrite:
                return
        raise StepError(f"{self.name}: no copy-on-write rewrite across schemas")

    def json(self):
        return {
            "seed": self.seed,
            "table": self.name,
            "partitioned": self.partitioned,
            "identifier": [self.schema.find_column_name(i) for i in self.schema.identifier_field_ids],
            "seconds": round(self.seconds, 2),
            "steps": self.steps,
            "snapshots": self.snapshots,
        }


def canonical(row) -> str:
    return json.dumps(row, sort_keys=True)


def canonical_rows(rows):
    out = set()
    for r in rows:
        c = canonical(r)
        if c in out:
            raise StepError(f"duplicate row {c}")
        out.add(c)
    return out


def snapshot_files(table, snap):
    """The data files `snap` added and removed."""
    added, removed = [], []
    for m in snap.manifests(table.io):
        if m.content != ManifestContent.DATA or m.added_snapshot_id != snap.snapshot_id:
            continue
        for e in m.fetch_manifest_entry(table.io, discard_deleted=False):
            if e.snapshot_id != snap.snapshot_id:
                continue
            if e.status == ManifestEntryStatus.ADDED:
                added.append(e.data_file.file_path)
            elif e.status == ManifestEntryStatus.DELETED:
                removed.append(e.data_file.file_path)
    return added, removed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seeds", default="1..=6")
    args = parser.parse_args()
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError:
        log(f"bad seeds {args.seeds!r}: use `7`, `1..20`, `1..=20` or `3,5,9`")
        return 1
    warehouse = os.path.abspath(args.warehouse)
    os.makedirs(os.path.join(warehouse, "warehouse"), exist_ok=True)
    catalog = SqlCatalog(CATALOG, uri=f"sqlite:///{warehouse}/catalog.db", warehouse=f"file://{warehouse}/warehouse")
    started = time.time()
    histories = []
    try:
        for seed in seeds:
            history = History(catalog, seed)
            history.run()
            histories.append(history.json())
    except StepError as e:
        log(f"error: {e}")
        return 1
    except Exception:  # noqa: BLE001 - whatever it is, say which seed and stop
        log(f"error in seed {seed}:\n{traceback.format_exc()}")
        return 1
    document = {"pyiceberg": pyiceberg.__version__, "seconds": round(time.time() - started, 2), "histories": histories}
    with open(args.out + ".tmp", "w") as f:
        json.dump(document, f)
    os.replace(args.out + ".tmp", args.out)
    log(f"{len(histories)} histories in {document['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
