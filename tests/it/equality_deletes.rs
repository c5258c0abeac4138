//! Merge-on-read tables written by Iceberg's own Java API (tests/iceberg-writer, built by
//! scripts/iceberg-writer.sh, run with `ICEFEED_TEST_ICEBERG_WRITER`): the equality delete
//! cases E1–E20 of the merge-on-read spec's test matrix (MERGE_ON_READ.md §5, as the Flink
//! and other upsert writers commit them), a few file removals (D1–D4) and the explicit
//! data sequence numbers of §1.5, on Hadoop-catalog tables that icefeed reads as a
//! `filesystem` warehouse.
//!
//! One writer run builds every fixture table (the JVM starts once) and, for each, reads
//! the live rows at the last snapshot and at its parent back with Iceberg Java (deletes
//! applied, with `_file` and `_pos`). Two checks use them:
//! * `java_scans_agree_with_the_matrix`: the §1.3 state difference of those two scans
//!   (by `(_file, _pos)`, carry-overs removed, paired by key) equals the hand-written
//!   expected change set of each case. This checks the writer and the expectations,
//!   independently of icefeed.
//! * one test per case: icefeed, registered from the earliest snapshot, publishes exactly
//!   the expected events for the last snapshot.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value, json};

use crate::diffing::change;
use crate::support::{
    Node, fresh_database, id_json, id64, image, in_place, test_settings, wait_until,
};

// ---------------------------------------------------------------------------------------
// The cases
// ---------------------------------------------------------------------------------------

/// One change the last snapshot of a case must publish.
struct Change {
    op: &'static str,
    before: Value,
    after: Value,
}

fn ins(after: Value) -> Change {
    Change {
        op: "insert",
        before: Value::Null,
        after,
    }
}

fn del(before: Value) -> Change {
    Change {
        op: "delete",
        before,
        after: Value::Null,
    }
}

fn upd(before: Value, after: Value) -> Change {
    Change {
        op: "update",
        before,
        after,
    }
}

struct Case {
    /// The matrix's id, e.g. "E1", or "E3/v3" for the format-version-3 run of E3.
    id: &'static str,
    /// The table: `eq.<table>`.
    table: &'static str,
    /// `identifier_columns` of the registration; `None`: the table's (`id`).
    identifier_columns: Option<Value>,
    /// The writer's steps, `create` first.
    steps: Vec<Value>,
    /// The change set of the last snapshot.
    expected: Vec<Change>,
    /// The rows the last snapshot brings back by dropping a delete (M9).
    resurrected: i64,
}

impl Case {
    fn new(
        id: &'static str,
        table: &'static str,
        steps: Vec<Value>,
        expected: Vec<Change>,
    ) -> Self {
        Self {
            id,
            table,
            identifier_columns: None,
            steps,
            expected,
            resurrected: 0,
        }
    }

    fn resurrecting(mut self, rows: i64) -> Self {
        self.resurrected = rows;
        self
    }

    fn keyed_by(mut self, columns: Value) -> Self {
        self.identifier_columns = Some(columns);
        self
    }

    fn key_columns(&self) -> Vec<String> {
        match &self.identifier_columns {
            Some(columns) => columns
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_str().unwrap().to_string())
                .collect(),
            None => vec!["id".into()],
        }
    }
}

/// A row of the matrix's table `t(id, v, cat)`; `cat` null for `None`.
fn row(id: i64, v: &str, cat: Option<&str>) -> Value {
    json!({"id": id, "v": v, "cat": cat})
}

/// A row in partition `cat = 'p'`, where the matrix's rows live.
fn p(id: i64, v: &str) -> Value {
    row(id, v, Some("p"))
}

/// A v3 schema change: column `tier` added with the initial default `basic`.
fn add_tier() -> Value {
    json!({"op": "update_schema",
           "add": [{"name": "tier", "type": "string", "default": "basic"}]})
}

/// A row in partition `cat = 'p'` with a `tier`.
fn tiered(id: i64, v: &str, tier: &str) -> Value {
    json!({"id": id, "v": v, "cat": "p", "tier": tier})
}

/// `create`: the matrix's table, partitioned by `identity(cat)` or not.
fn create(format_version: u8, partitioned: bool) -> Value {
    let partition = if partitioned {
        json!([{"source": "cat", "transform": "identity"}])
    } else {
        json!([])
    };
    json!({"op": "create", "format_version": format_version, "partition": partition})
}

/// `create` of table `name` (`eq.…`).
fn create_named(name: &str, format_version: u8, partitioned: bool) -> Value {
    let mut step = create(format_version, partitioned);
    step["table"] = json!(name);
    step
}

/// The registration of `table` in the Hadoop warehouse `warehouse`, polled every 100 ms,
/// from `start` (`None`: the default).
fn registration(warehouse: &std::path::Path, table: &str, start: Option<&str>) -> Value {
    let mut body = json!({
        "catalog": {"type": "filesystem",
                    "warehouse": format!("file://{}", warehouse.display())},
        "table": table, "poll_interval_ms": 100,
    });
    if let Some(start) = start {
        body["start"] = json!(start);
    }
    body
}

fn file(name: &str, rows: Vec<Value>) -> Value {
    json!({"name": name, "rows": rows})
}

/// S0 of the matrix: F1=[(1,a),(2,b),(3,c)] and F2=[(4,d),(5,e)] in one append.
fn s0() -> Value {
    append(
        "S0",
        vec![
            file("F1", vec![p(1, "a"), p(2, "b"), p(3, "c")]),
            file("F2", vec![p(4, "d"), p(5, "e")]),
        ],
    )
}

fn append(name: &str, files: Vec<Value>) -> Value {
    json!({"op": "append", "name": name, "files": files})
}

/// An equality delete file on `columns`, in partition `cat = 'p'` (ignored when the spec
/// is unpartitioned).
fn ed(name: &str, columns: &[&str], rows: Vec<Value>) -> Value {
    json!({"name": name, "columns": columns, "rows": rows, "partition": {"cat": "p"}})
}

/// An equality delete of ids (`deleteKey` of an upsert writer).
fn ed_ids(name: &str, ids: &[i64]) -> Value {
    let rows = ids.iter().map(|id| json!({ "id": id })).collect();
    ed(name, &["id"], rows)
}

/// A position delete file (v2) or deletion vector (v3) for positions of one data file.
fn pd(name: &str, file: &str, positions: &[i64]) -> Value {
    json!({"name": name, "targets": [{"file": file, "positions": positions}]})
}

/// One `newRowDelta()` commit.
fn row_delta(name: &str, data: Vec<Value>, equality: Vec<Value>, position: Vec<Value>) -> Value {
    json!({"op": "row_delta", "name": name, "data": data, "equality_deletes": equality,
           "position_deletes": position})
}

fn cases() -> Vec<Case> {
    let mut cases = vec![
        Case::new(
            "E1",
            "e01",
            vec![
                create(2, true),
                s0(),
                row_delta(
                    "S1",
                    vec![file("F3", vec![p(2, "B")])],
                    vec![ed_ids("ED1", &[2])],
                    vec![],
                ),
            ],
            vec![upd(p(2, "b"), p(2, "B"))],
        ),
        Case::new(
            "E1/v3",
            "e01_v3",
            vec![
                create(3, true),
                s0(),
                row_delta(
                    "S1",
                    vec![file("F3", vec![p(2, "B")])],
                    vec![ed_ids("ED1", &[2])],
                    vec![],
                ),
            ],
            vec![upd(p(2, "b"), p(2, "B"))],
        ),
        Case::new(
            "E2",
            "e02",
            vec![
                create(2, true),
                s0(),
                row_delta(
                    "S1",
                    vec![file("F3", vec![p(9, "z")])],
                    vec![ed_ids("ED1", &[9])],
                    vec![],
                ),
            ],
            vec![ins(p(9, "z"))],
        ),
    ];
    // E3: an upsert and a delete of a new key in one checkpoint: nothing.
    for (id, table, version) in [("E3", "e03", 2), ("E3/v3", "e03_v3", 3)] {
        cases.push(Case::new(
            id,
            table,
            vec![
                create(version, true),
                s0(),
                row_delta(
                    "S1",
                    vec![file("F3", vec![p(9, "z")])],
                    vec![ed_ids("ED1", &[9])],
                    vec![pd("PD1", "F3", &[0])],
                ),
            ],
            vec![],
        ));
    }
    // E4: two upserts of key 2 in one checkpoint: the second wins.
    for (id, table, version) in [("E4", "e04", 2), ("E4/v3", "e04_v3", 3)] {
        cases.push(Case::new(
            id,
            table,
            vec![
                create(version, true),
                s0(),
                row_delta(
                    "S1",
                    vec![file("F3", vec![p(2, "B"), p(2, "C")])],
                    vec![ed_ids("ED1", &[2])],
                    vec![pd("PD1", "F3", &[0])],
                ),
            ],
            vec![upd(p(2, "b"), p(2, "C"))],
        ));
    }
    cases.extend([
        Case::new(
            "E5",
            "e05",
            vec![
                create(2, true),
                s0(),
                row_delta("S1", vec![], vec![ed_ids("ED1", &[2])], vec![]),
            ],
            vec![del(p(2, "b"))],
        ),
        Case::new(
            "E6",
            "e06",
            vec![
                create(2, true),
                s0(),
                row_delta("S1", vec![], vec![ed_ids("ED1", &[2])], vec![]),
                row_delta("S2", vec![], vec![ed_ids("ED2", &[2])], vec![]),
            ],
            vec![],
        ),
        Case::new(
            "E7",
            "e07",
            vec![
                create(2, true),
                s0(),
                row_delta("S1", vec![], vec![ed_ids("ED1", &[2])], vec![]),
                row_delta(
                    "S2",
                    vec![file("F4", vec![p(2, "X")])],
                    vec![ed_ids("ED2", &[2])],
                    vec![],
                ),
            ],
            vec![ins(p(2, "X"))],
        ),
    ]);
    // E8: an equality delete of a row a position delete (DV) already deleted.
    for (id, table, version) in [("E8", "e08", 2), ("E8/v3", "e08_v3", 3)] {
        cases.push(Case::new(
            id,
            table,
            vec![
                create(version, true),
                s0(),
                row_delta("S1", vec![], vec![], vec![pd("PD1", "F1", &[1])]),
                row_delta("S2", vec![], vec![ed_ids("ED1", &[2])], vec![]),
            ],
            vec![],
        ));
    }
    cases.extend([
        // E9: two equality delete files of one snapshot hit key 2, one holds it twice.
        Case::new(
            "E9",
            "e09",
            vec![
                create(2, true),
                s0(),
                row_delta(
                    "S1",
                    vec![],
                    vec![ed_ids("ED1", &[2, 2]), ed_ids("ED2", &[2])],
                    vec![],
                ),
            ],
            vec![del(p(2, "b"))],
        ),
        // E10 raw: two rows with id 2; without identifier columns nothing pairs.
        Case::new(
            "E10",
            "e10",
            vec![
                create(2, true),
                append(
                    "S0",
                    vec![
                        file("F1", vec![p(1, "a"), p(2, "b"), p(3, "c")]),
                        file("F2", vec![p(2, "bb"), p(5, "e")]),
                    ],
                ),
                row_delta(
                    "S1",
                    vec![file("F3", vec![p(2, "B")])],
                    vec![ed_ids("ED1", &[2])],
                    vec![],
                ),
            ],
            vec![del(p(2, "b")), del(p(2, "bb")), ins(p(2, "B"))],
        )
        .keyed_by(json!([])),
        // E11: equality on a non-identifier column deletes every matching row.
        Case::new(
            "E11",
            "e11",
            vec![
                create(2, true),
                s0(),
                append("S1", vec![file("F3", vec![p(6, "f"), p(7, "b")])]),
                row_delta(
                    "S2",
                    vec![],
                    vec![ed(
                        "ED1",
                        &["v"],
                        vec![json!({"v": "b"}), json!({"v": "nope"})],
                    )],
                    vec![],
                ),
            ],
            vec![del(p(2, "b")), del(p(7, "b"))],
        ),
    ]);
    // E12: NULLs, unpartitioned so that every row meets every delete row.
    let nulls_s0 = || {
        append(
            "S0",
            vec![
                file("F1", vec![p(1, "a"), p(2, "b"), p(3, "c")]),
                file("F2", vec![row(4, "d", None), row(5, "e", None)]),
                file("F3", vec![row(6, "f", Some("x"))]),
            ],
        )
    };
    cases.extend([
        // (a) [id, cat] = (4, NULL) deletes 4 only; (1, NULL) does not match (1, 'p').
        Case::new(
            "E12a",
            "e12a",
            vec![
                create(2, false),
                nulls_s0(),
                row_delta(
                    "S1",
                    vec![],
                    vec![ed(
                        "ED1",
                        &["id", "cat"],
                        vec![json!({"id": 4, "cat": null}), json!({"id": 1, "cat": null})],
                    )],
                    vec![],
                ),
            ],
            vec![del(row(4, "d", None))],
        ),
        // (b) [cat] = 'x' deletes 6 only; the NULL-cat rows survive.
        Case::new(
            "E12b",
            "e12b",
            vec![
                create(2, false),
                nulls_s0(),
                row_delta(
                    "S1",
                    vec![],
                    vec![ed("ED1", &["cat"], vec![json!({"cat": "x"})])],
                    vec![],
                ),
            ],
            vec![del(row(6, "f", Some("x")))],
        ),
        // (c) [cat] = NULL: null matches null, and only null.
        Case::new(
            "E12c",
            "e12c",
            vec![
                create(2, false),
                nulls_s0(),
                row_delta(
                    "S1",
                    vec![],
                    vec![ed("ED1", &["cat"], vec![json!({"cat": null})])],
                    vec![],
                ),
            ],
            vec![del(row(4, "d", None)), del(row(5, "e", None))],
        ),
        // E13: a partition-scoped equality delete leaves the same key in another partition.
        Case::new(
            "E13",
            "e13",
            vec![
                create(2, true),
                append(
                    "S0",
                    vec![
                        file("F1", vec![row(1, "a", Some("p1")), row(2, "b", Some("p1"))]),
                        file("F2", vec![row(2, "B", Some("p2")), row(3, "c", Some("p2"))]),
                    ],
                ),
                row_delta(
                    "S1",
                    vec![],
                    vec![
                        json!({"name": "ED1", "columns": ["id"], "rows": [{"id": 2}],
                                "partition": {"cat": "p1"}}),
                    ],
                    vec![],
                ),
            ],
            vec![del(row(2, "b", Some("p1")))],
        )
        .keyed_by(json!(["id", "cat"])),
        // E14: a global equality delete (the unpartitioned spec 0) on a table now
        // partitioned by spec 1 hits rows under both specs.
        Case::new(
            "E14",
            "e14",
            vec![
                create(2, false),
                s0(),
                json!({"op": "update_spec", "add": [{"source": "cat", "transform": "identity"}]}),
                append(
                    "S1",
                    vec![
                        file("F3", vec![row(6, "f", Some("q"))]),
                        file("F4", vec![row(7, "g", Some("r"))]),
                    ],
                ),
                row_delta(
                    "S2",
                    vec![],
                    vec![json!({"name": "ED1", "columns": ["id"], "global": true,
                                "rows": [{"id": 2}, {"id": 6}, {"id": 99}]})],
                    vec![],
                ),
            ],
            vec![del(p(2, "b")), del(row(6, "f", Some("q")))],
        ),
        // E15: an equality delete under spec 1 does not apply to spec-0 files, even with
        // the same partition tuple (spec 1 only renames the field); it does apply to a
        // spec-1 file of that partition.
        Case::new(
            "E15",
            "e15",
            vec![
                create(2, true),
                s0(),
                json!({"op": "update_spec", "rename": {"cat": "kind"}}),
                append("S1", vec![file("F3", vec![p(6, "f")])]),
                row_delta("S2", vec![], vec![ed_ids("ED1", &[2, 6])], vec![]),
            ],
            vec![del(p(6, "f"))],
        ),
        // E16: writer A inserts key 9, writer B deletes it (a whole-row delete file keyed
        // by id), in one snapshot: same data sequence number, so the insert stays.
        Case::new(
            "E16",
            "e16",
            vec![
                create(2, true),
                s0(),
                row_delta(
                    "S1",
                    vec![file("F3", vec![p(9, "z")])],
                    vec![
                        json!({"name": "ED1", "columns": ["id"], "row_columns": "all",
                                "rows": [p(9, "z")], "partition": {"cat": "p"}}),
                    ],
                    vec![],
                ),
            ],
            vec![ins(p(9, "z"))],
        ),
        // E17: a file appended with an explicit older data sequence number (1) is hit by
        // the live equality delete of S1 (sequence number 2).
        Case::new(
            "E17",
            "e17",
            vec![
                create(2, true),
                s0(),
                row_delta("S1", vec![], vec![ed_ids("ED1", &[9])], vec![]),
                json!({"op": "append", "name": "S2", "data_sequence_number": 1,
                       "files": [file("F3", vec![p(9, "z"), p(10, "y")])]}),
            ],
            vec![ins(p(10, "y"))],
        ),
        // E17 as compaction does it (M2): a rewrite keeping the starting sequence number
        // (1) of F1, committed after S1's equality delete of key 2, which therefore still
        // applies to the output: the replace changes nothing...
        Case::new(
            "E17/replace",
            "e17_replace",
            vec![
                create(2, true),
                s0(),
                row_delta("S1", vec![], vec![ed_ids("ED1", &[2])], vec![]),
                json!({"op": "rewrite", "name": "S2", "data_sequence_number": 1,
                       "remove": ["F1"],
                       "add": [file("F1c", vec![p(1, "a"), p(2, "b"), p(3, "c")])]}),
            ],
            vec![],
        ),
        // ... and the next equality delete deletes only what was still live.
        Case::new(
            "E17/after-replace",
            "e17_after_replace",
            vec![
                create(2, true),
                s0(),
                row_delta("S1", vec![], vec![ed_ids("ED1", &[2])], vec![]),
                json!({"op": "rewrite", "name": "S2", "data_sequence_number": 1,
                       "remove": ["F1"],
                       "add": [file("F1c", vec![p(1, "a"), p(2, "b"), p(3, "c")])]}),
                row_delta("S3", vec![], vec![ed_ids("ED2", &[2, 3])], vec![]),
            ],
            vec![del(p(3, "c"))],
        ),
        // E18: the equality delete's column is dropped later; its historical snapshot...
        Case::new(
            "E18",
            "e18",
            vec![
                create(2, false),
                s0(),
                row_delta(
                    "S1",
                    vec![],
                    vec![ed("ED1", &["v"], vec![json!({"v": "b"})])],
                    vec![],
                ),
                json!({"op": "update_schema", "drop": ["v"]}),
            ],
            vec![del(p(2, "b"))],
        ),
        // ... and a later snapshot, whose rows lack the column, must still apply it: row
        // 2 is dead in the parent, so deleting its position again changes nothing.
        Case::new(
            "E18/after-drop",
            "e18_after_drop",
            vec![
                create(2, false),
                s0(),
                row_delta(
                    "S1",
                    vec![],
                    vec![ed("ED1", &["v"], vec![json!({"v": "b"})])],
                    vec![],
                ),
                json!({"op": "update_schema", "drop": ["v"]}),
                row_delta("S2", vec![], vec![], vec![pd("PD1", "F1", &[0, 1])]),
            ],
            vec![del(json!({"id": 1, "cat": "p"}))],
        ),
        // E19: `cat` added after F1 was written reads as NULL there, and a NULL in the
        // delete row matches it.
        Case::new(
            "E19",
            "e19",
            vec![
                json!({"op": "create", "format_version": 2, "identifier": ["id"],
                       "schema": [{"name": "id", "type": "long", "required": true},
                                  {"name": "v", "type": "string"}]}),
                append(
                    "S0",
                    vec![
                        file(
                            "F1",
                            vec![json!({"id": 1, "v": "a"}), json!({"id": 2, "v": "b"})],
                        ),
                        file("F2", vec![json!({"id": 3, "v": "c"})]),
                    ],
                ),
                json!({"op": "update_schema", "add": [{"name": "cat", "type": "string"}]}),
                row_delta(
                    "S1",
                    vec![],
                    vec![ed(
                        "ED1",
                        &["id", "cat"],
                        vec![json!({"id": 1, "cat": null}), json!({"id": 2, "cat": "b"})],
                    )],
                    vec![],
                ),
            ],
            vec![del(row(1, "a", None))],
        ),
        // E20: Flink without upsert: +I(2,X), +I(2,Y) in one checkpoint, no equality
        // delete; (2,b) stays, and the table now holds key 2 twice.
        Case::new(
            "E20",
            "e20",
            vec![
                create(2, true),
                s0(),
                row_delta(
                    "S1",
                    vec![file("F3", vec![p(2, "X"), p(2, "Y")])],
                    vec![],
                    vec![pd("PD1", "F3", &[0])],
                ),
            ],
            vec![ins(p(2, "Y"))],
        ),
        // V3D1: v3, a column added with an initial default: the rows of older files read
        // as the default, in a deletion vector's update as in its parent.
        Case::new(
            "V3D1",
            "v3d1",
            vec![
                create(3, true),
                s0(),
                add_tier(),
                row_delta(
                    "S1",
                    vec![file("F3", vec![tiered(2, "B", "gold")])],
                    vec![],
                    vec![pd("DV1", "F1", &[1])],
                ),
            ],
            vec![upd(tiered(2, "b", "basic"), tiered(2, "B", "gold"))],
        ),
        // V3D2: ... and an equality delete on that column matches the default in older files.
        Case::new(
            "V3D2",
            "v3d2",
            vec![
                create(3, false),
                s0(),
                add_tier(),
                append("S1", vec![file("F3", vec![tiered(6, "f", "gold")])]),
                row_delta(
                    "S2",
                    vec![],
                    vec![ed("ED1", &["tier"], vec![json!({"tier": "basic"})])],
                    vec![],
                ),
            ],
            [(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, "e")]
                .into_iter()
                .map(|(id, v)| del(tiered(id, v, "basic")))
                .collect(),
        ),
        // D1: a removed file is read with the parent's position deletes.
        Case::new(
            "D1",
            "d1",
            vec![
                create(2, true),
                s0(),
                row_delta("S1", vec![], vec![], vec![pd("PD1", "F1", &[1])]),
                json!({"op": "delete_file", "name": "S2", "files": ["F1"]}),
            ],
            vec![del(p(1, "a")), del(p(3, "c"))],
        ),
        // D2: ... and with the parent's equality deletes.
        Case::new(
            "D2",
            "d2",
            vec![
                create(2, true),
                s0(),
                row_delta("S1", vec![], vec![ed_ids("ED1", &[3])], vec![]),
                json!({"op": "delete_file", "name": "S2", "files": ["F1"]}),
            ],
            vec![del(p(1, "a")), del(p(2, "b"))],
        ),
        // D3: a copy-on-write rewrite of a file with a position delete (mixed modes).
        Case::new(
            "D3",
            "d3",
            vec![
                create(2, true),
                s0(),
                row_delta("S1", vec![], vec![], vec![pd("PD1", "F1", &[1])]),
                json!({"op": "overwrite", "name": "S2", "remove": ["F1"],
                       "add": [file("F1c", vec![p(1, "a"), p(3, "C")])]}),
            ],
            vec![upd(p(3, "c"), p(3, "C"))],
        ),
        // D4: v3, the file and its DV removed together.
        Case::new(
            "D4",
            "d4",
            vec![
                create(3, true),
                s0(),
                row_delta("S1", vec![], vec![], vec![pd("DV1", "F1", &[1])]),
                json!({"op": "row_delta", "name": "S2", "remove_data": ["F1"],
                       "remove_deletes": ["DV1"]}),
            ],
            vec![del(p(1, "a")), del(p(3, "c"))],
        ),
        // M9: a live delete removed without a replacement in a non-replace commit brings
        // its rows back (a metadata edit; no engine commits this).
        Case::new(
            "M9",
            "m9",
            vec![
                create(2, true),
                s0(),
                row_delta("S1", vec![], vec![], vec![pd("PD1", "F1", &[1])]),
                json!({"op": "row_delta", "name": "S2", "remove_deletes": ["PD1"]}),
            ],
            vec![ins(p(2, "b"))],
        )
        .resurrecting(1),
        Case::new(
            "M9/v3",
            "m9v3",
            vec![
                create(3, true),
                s0(),
                row_delta("S1", vec![], vec![], vec![pd("DV1", "F1", &[1])]),
                json!({"op": "row_delta", "name": "S2", "remove_deletes": ["DV1"]}),
            ],
            vec![ins(p(2, "b"))],
        )
        .resurrecting(1),
    ]);
    cases
}

// ---------------------------------------------------------------------------------------
// Building the fixtures: one writer run for all cases
// ---------------------------------------------------------------------------------------

/// The command that runs the writer: `ICEFEED_TEST_ICEBERG_WRITER`, else what
/// scripts/iceberg-writer.sh prints (it builds the writer when needed).
fn writer_command() -> Vec<String> {
    let command = match std::env::var("ICEFEED_TEST_ICEBERG_WRITER") {
        Ok(command) => command,
        Err(_) => {
            let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/iceberg-writer.sh");
            let out = Command::new(script)
                .stderr(Stdio::inherit())
                .output()
                .expect("run scripts/iceberg-writer.sh (or set ICEFEED_TEST_ICEBERG_WRITER)");
            assert!(out.status.success(), "scripts/iceberg-writer.sh failed");
            String::from_utf8(out.stdout).unwrap()
        }
    };
    command.split_whitespace().map(str::to_string).collect()
}

/// What the writer made of one case.
struct Built {
    /// The snapshot ids of its commits, in order.
    snapshots: Vec<i64>,
    /// Live rows (with `_file`, `_pos`) at the last snapshot's parent and at the last
    /// snapshot, both in the last snapshot's schema.
    parent_rows: Vec<Value>,
    last_rows: Vec<Value>,
    /// The live files of the last snapshot, for failure messages.
    files: Value,
}

struct Fixtures {
    /// The Hadoop catalog's warehouse directory.
    warehouse: tempfile::TempDir,
    built: HashMap<&'static str, Built>,
}

fn fixtures() -> &'static Fixtures {
    static FIXTURES: OnceLock<Result<Fixtures, String>> = OnceLock::new();
    match FIXTURES.get_or_init(build) {
        Ok(f) => f,
        Err(e) => panic!("{e}"),
    }
}

/// Runs the writer's `steps` on the Hadoop warehouse `warehouse`; its output lines.
fn run_writer(warehouse: &std::path::Path, steps: Vec<Value>) -> Result<String, String> {
    let script = json!({"warehouse": format!("file:{}", warehouse.display()), "steps": steps});
    let command = writer_command();
    let mut child = Command::new(&command[0])
        .args(&command[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("start the Iceberg writer {command:?}: {e}"))?;
    let mut stdin = child.stdin.take().unwrap();
    let input = serde_json::to_vec(&script).unwrap();
    let feeder = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, &input));
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap().unwrap();
    if !out.status.success() {
        return Err(format!(
            "the Iceberg writer failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8(out.stdout).unwrap())
}

fn build() -> Result<Fixtures, String> {
    let warehouse = tempfile::tempdir().unwrap();
    let mut steps = Vec::new();
    for case in cases() {
        for (i, step) in case.steps.iter().enumerate() {
            let mut step = step.clone();
            if i == 0 {
                step["table"] = json!(format!("eq.{}", case.table));
            }
            steps.push(step);
        }
        steps.push(json!({"op": "scan", "snapshot": "parent", "schema_of": "current"}));
        steps.push(json!({"op": "scan", "snapshot": "current"}));
        steps.push(json!({"op": "files", "snapshot": "current"}));
    }
    let started = std::time::Instant::now();
    let stdout = run_writer(warehouse.path(), steps)?;
    eprintln!(
        "equality_deletes: the Iceberg writer built {} tables in {:.1} s",
        cases().len(),
        started.elapsed().as_secs_f64()
    );
    let mut built: HashMap<&'static str, Built> = HashMap::new();
    let cases = cases();
    let by_table: HashMap<String, &Case> = cases
        .iter()
        .map(|c| (format!("eq.{}", c.table), c))
        .collect();
    let mut scans: HashMap<&'static str, Vec<Vec<Value>>> = HashMap::new();
    for line in stdout.lines() {
        let v: Value = serde_json::from_str(line).map_err(|e| format!("{e}: {line}"))?;
        let case = by_table[v["table"].as_str().unwrap()];
        let entry = built.entry(case.id).or_insert_with(|| Built {
            snapshots: Vec::new(),
            parent_rows: Vec::new(),
            last_rows: Vec::new(),
            files: Value::Null,
        });
        match v["op"].as_str().unwrap() {
            "scan" => scans
                .entry(case.id)
                .or_default()
                .push(v["rows"].as_array().unwrap().clone()),
            "files" => entry.files = v["files"].clone(),
            _ => {
                if let Some(id) = v["snapshot_id"].as_i64() {
                    entry.snapshots.push(id);
                }
            }
        }
    }
    for (id, mut rows) in scans {
        let entry = built.get_mut(id).unwrap();
        entry.last_rows = rows.pop().unwrap();
        entry.parent_rows = rows.pop().unwrap();
    }
    Ok(Fixtures { warehouse, built })
}

// ---------------------------------------------------------------------------------------
// Changes, normalized
// ---------------------------------------------------------------------------------------

/// An event's `key`: null without identifier columns (icefeed then sends none).
fn key_of(row: &Value, key_columns: &[String]) -> Value {
    if key_columns.is_empty() {
        return Value::Null;
    }
    let key: serde_json::Map<String, Value> = key_columns
        .iter()
        .map(|c| (c.clone(), row[c].clone()))
        .collect();
    Value::Object(key)
}

fn expected(case: &Case) -> Vec<String> {
    let key_columns = case.key_columns();
    let mut out: Vec<String> = case
        .expected
        .iter()
        .map(|c| {
            let image = if c.op == "insert" {
                &c.after
            } else {
                &c.before
            };
            change(c.op, &key_of(image, &key_columns), &c.before, &c.after)
        })
        .collect();
    out.sort();
    out
}

/// MERGE_ON_READ.md §1.3 on two scans: the rows of the parent that are gone, by
/// `(_file, _pos)`, and the new ones; then equal rows cancel (carry-over) and the rest
/// pair by key (one delete and one insert of a key: an update).
fn state_difference(parent: &[Value], last: &[Value], key_columns: &[String]) -> Vec<String> {
    let identity = |r: &Value| {
        (
            r["_file"].as_str().unwrap().to_string(),
            r["_pos"].as_i64().unwrap(),
        )
    };
    let image = |r: &Value| {
        let mut r = r.clone();
        let o = r.as_object_mut().unwrap();
        o.remove("_file");
        o.remove("_pos");
        r
    };
    let before: BTreeSet<_> = parent.iter().map(identity).collect();
    let after: BTreeSet<_> = last.iter().map(identity).collect();
    let mut deleted: Vec<Value> = parent
        .iter()
        .filter(|r| !after.contains(&identity(r)))
        .map(image)
        .collect();
    let mut inserted: Vec<Value> = last
        .iter()
        .filter(|r| !before.contains(&identity(r)))
        .map(image)
        .collect();
    // Carry-over: a deleted and an inserted row with equal values cancel.
    let mut i = 0;
    while i < deleted.len() {
        if let Some(j) = inserted.iter().position(|r| *r == deleted[i]) {
            inserted.remove(j);
            deleted.remove(i);
        } else {
            i += 1;
        }
    }
    let mut by_key: BTreeMap<String, (Vec<Value>, Vec<Value>)> = BTreeMap::new();
    for r in deleted {
        let k = key_of(&r, key_columns).to_string();
        by_key.entry(k).or_default().0.push(r);
    }
    for r in inserted {
        let k = key_of(&r, key_columns).to_string();
        by_key.entry(k).or_default().1.push(r);
    }
    let mut out = Vec::new();
    for (dels, inss) in by_key.values() {
        if !key_columns.is_empty() && dels.len() == 1 && inss.len() == 1 {
            let key = key_of(&dels[0], key_columns);
            out.push(change("update", &key, &dels[0], &inss[0]));
            continue;
        }
        for r in dels {
            out.push(change("delete", &key_of(r, key_columns), r, &Value::Null));
        }
        for r in inss {
            out.push(change("insert", &key_of(r, key_columns), &Value::Null, r));
        }
    }
    out.sort();
    out
}

// ---------------------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------------------

/// The writer and the expectations, without icefeed: Iceberg Java's own reads of each
/// fixture differ between the parent and the last snapshot by exactly the expected
/// change set.
#[test]
fn java_scans_agree_with_the_matrix() {
    let fixtures = fixtures();
    let mut failures = Vec::new();
    for case in cases() {
        let built = &fixtures.built[case.id];
        let have = state_difference(&built.parent_rows, &built.last_rows, &case.key_columns());
        let want = expected(&case);
        if have != want {
            failures.push(format!(
                "{}: Iceberg Java's scans differ by\n  {have:?}\nthe matrix expects\n  {want:?}\nlive rows: parent {:?}\nlast {:?}",
                case.id, built.parent_rows, built.last_rows
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// icefeed, registered on the case's table from the earliest snapshot, publishes the
/// expected events for its last snapshot.
async fn icefeed_publishes(id: &str) {
    let store = tempfile::tempdir().unwrap();
    let settings = test_settings(&fresh_database().await, store.path());
    icefeed_publishes_on(id, settings).await;
}

/// [`icefeed_publishes`] on a node of `settings`.
async fn icefeed_publishes_on(id: &str, settings: icefeed::config::Settings) {
    let fixtures = fixtures();
    let cases = cases();
    let case = cases.iter().find(|c| c.id == id).unwrap();
    let built = &fixtures.built[case.id];
    let last = *built.snapshots.last().unwrap();

    let node = Node::start(settings).await;
    let table_name = format!("eq.{}", case.table);
    let mut body = registration(fixtures.warehouse.path(), &table_name, Some("earliest"));
    if let Some(columns) = &case.identifier_columns {
        body["identifier_columns"] = columns.clone();
    }
    let table = node.register(&body).await;
    let wait = tokio::spawn({
        let base = node.base.clone();
        let table = table.clone();
        async move { Node::remote(base).wait_for_checkpoint(&table, last).await }
    });
    if let Err(e) = wait.await {
        panic!(
            "{id}: icefeed did not publish the last snapshot {last} (snapshots {:?}): {e}\nlive files of the last snapshot: {:#}",
            built.snapshots, built.files
        );
    }
    let (events, _) = node.all_events(&table, None, 500).await;
    for e in &events {
        let snapshot = id64(&e["snapshot_id"]).unwrap();
        assert!(
            built.snapshots.contains(&snapshot),
            "{id}: an event of an unknown snapshot: {e}"
        );
    }
    let member = |e: &Value, name: &str| e.get(name).cloned().unwrap_or(Value::Null);
    let mut have: Vec<String> = events
        .iter()
        .filter(|e| id64(&e["snapshot_id"]) == Some(last))
        .map(|e| {
            change(
                e["op"].as_str().unwrap(),
                &member(e, "key"),
                &member(e, "before"),
                &member(e, "after"),
            )
        })
        .collect();
    have.sort();
    let anomalies: Vec<&Value> = events
        .iter()
        .filter(|e| e.get("anomaly").is_some())
        .collect();
    let resurrected: Vec<&Value> = anomalies
        .iter()
        .copied()
        .filter(|e| {
            e["anomaly"] == "resurrected"
                && e["op"] == "insert"
                && id64(&e["snapshot_id"]) == Some(last)
        })
        .collect();
    assert_eq!(
        (anomalies.len(), resurrected.len() as i64),
        (resurrected.len(), case.resurrected),
        "{id}: only the last snapshot's regained rows are flagged, as inserts: {anomalies:#?}"
    );
    assert_eq!(
        have,
        expected(case),
        "{id}: icefeed's events of the last snapshot {last}\nlive files: {:#}",
        built.files
    );
    let (_, listing) = node
        .get(&format!("/v1/tables/{table}/change-sets?limit=1"))
        .await;
    let newest = &listing["change_sets"][0];
    assert_eq!(
        newest["resurrected_rows"].as_i64().unwrap_or(0),
        case.resurrected,
        "{id}: {newest}"
    );
    node.shutdown().await;
}

/// M9 on a node whose map tasks may hold only 4 KB: regained rows keep their flag through
/// spill partitions too.
#[tokio::test]
async fn m9_regained_rows_are_flagged_when_map_tasks_spill() {
    let store = tempfile::tempdir().unwrap();
    let mut settings = test_settings(&fresh_database().await, store.path());
    settings.scheduler.map_memory_bytes = 4096;
    icefeed_publishes_on("M9", settings).await;
}

/// Every case again on nodes that compute rewrites in place (as small ones are by
/// default), not through the shuffle's tasks: the same change sets.
#[tokio::test]
async fn every_case_computed_in_place_publishes_alike() {
    for case in cases() {
        let store = tempfile::tempdir().unwrap();
        let settings = in_place(test_settings(&fresh_database().await, store.path()));
        icefeed_publishes_on(case.id, settings).await;
    }
}

macro_rules! icefeed_cases {
    ($($test:ident => $id:literal,)*) => {
        $(
            #[tokio::test]
            async fn $test() {
                icefeed_publishes($id).await;
            }
        )*
    };
}

icefeed_cases! {
    e01_an_upsert_of_a_live_key_is_an_update => "E1",
    e01_v3_an_upsert_of_a_live_key_is_an_update => "E1/v3",
    e02_an_upsert_of_a_new_key_is_an_insert => "E2",
    e03_a_key_inserted_and_deleted_in_one_snapshot_is_no_event => "E3",
    e03_v3_a_key_inserted_and_deleted_in_one_snapshot_is_no_event => "E3/v3",
    e04_two_upserts_in_one_snapshot_publish_the_last => "E4",
    e04_v3_two_upserts_in_one_snapshot_publish_the_last => "E4/v3",
    e05_an_equality_delete_deletes => "E5",
    e06_deleting_a_deleted_key_again_is_no_event => "E6",
    e07_a_deleted_key_upserted_again_is_an_insert => "E7",
    e08_an_equality_delete_of_a_position_deleted_row_is_no_event => "E8",
    e08_v3_an_equality_delete_of_a_dv_deleted_row_is_no_event => "E8/v3",
    e09_a_row_deleted_by_several_delete_rows_is_one_delete => "E9",
    e10_duplicate_keys_without_identifier_columns_stay_unpaired => "E10",
    e11_an_equality_delete_on_a_non_key_column_deletes_every_match => "E11",
    e12a_a_null_in_a_delete_row_matches_only_null => "E12a",
    e12b_a_value_in_a_delete_row_never_matches_null => "E12b",
    e12c_a_null_delete_row_matches_every_null => "E12c",
    e13_an_equality_delete_applies_to_its_partition_only => "E13",
    e14_a_global_equality_delete_applies_to_every_spec => "E14",
    e15_an_equality_delete_applies_to_its_spec_only => "E15",
    e16_an_equality_delete_never_hits_a_file_of_its_own_snapshot => "E16",
    e17_a_file_with_an_older_data_sequence_number_meets_later_deletes => "E17",
    e17_a_rewrite_keeping_its_sequence_number_changes_nothing => "E17/replace",
    e17_deletes_after_such_a_rewrite_see_what_it_kept_dead => "E17/after-replace",
    e18_a_dropped_delete_column_still_deletes => "E18",
    e18_a_dropped_delete_column_still_counts_in_the_parent => "E18/after-drop",
    e19_a_column_added_later_reads_as_null_for_deletes => "E19",
    e20_a_non_upsert_duplicate_insert_publishes_the_last => "E20",
    d1_a_removed_file_is_read_with_its_position_deletes => "D1",
    d2_a_removed_file_is_read_with_its_equality_deletes => "D2",
    d3_a_copy_on_write_rewrite_of_a_file_with_deletes => "D3",
    d4_v3_a_file_removed_with_its_dv => "D4",
    m9_a_delete_dropped_without_replacement_brings_its_rows_back => "M9",
    m9_v3_a_vector_dropped_without_replacement_brings_its_rows_back => "M9/v3",
    v3d1_older_files_read_a_column_added_later_as_its_initial_default => "V3D1",
    v3d2_equality_deletes_match_the_initial_default_in_older_files => "V3D2",
}

/// Registered with the default start, icefeed exports each case's table at its last
/// snapshot: exactly the rows Iceberg Java reads as live there (position deletes,
/// deletion vectors and equality deletes applied), as inserts.
#[tokio::test]
async fn exports_of_tables_with_delete_files_publish_exactly_their_live_rows() {
    let fixtures = fixtures();
    let (node, _store) = Node::start_fresh().await;
    let mut failures = Vec::new();
    for case in cases() {
        let built = &fixtures.built[case.id];
        let last = *built.snapshots.last().unwrap();
        let table_name = format!("eq.{}", case.table);
        let mut body = registration(fixtures.warehouse.path(), &table_name, None);
        if let Some(columns) = &case.identifier_columns {
            body["identifier_columns"] = columns.clone();
        }
        let table = node.register(&body).await;
        node.wait_for_checkpoint(&table, last).await;
        let (events, _) = node.all_events(&table, None, 500).await;
        let mut have: Vec<String> = events
            .iter()
            .map(|e| format!("{} {}", e["op"].as_str().unwrap(), e["after"]))
            .collect();
        have.sort();
        let mut want: Vec<String> = built
            .last_rows
            .iter()
            .map(|row| {
                let mut row = row.clone();
                let fields = row.as_object_mut().unwrap();
                fields.remove("_file");
                fields.remove("_pos");
                format!("insert {row}")
            })
            .collect();
        want.sort();
        if have != want {
            failures.push(format!(
                "{}: the export of snapshot {last} published\n  {have:?}\nbut the live rows are\n  {want:?}\nlive files: {:#}",
                case.id, built.files
            ));
        }
    }
    node.shutdown().await;
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The snapshot id of each commit in the writer's output lines.
fn committed(stdout: &str) -> Vec<i64> {
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).unwrap()["snapshot_id"].as_i64())
        .collect()
}

/// The key follows its column by field id: a table registered before its identifier
/// column is renamed still pairs an upsert into one update, keyed by the new name; a
/// table whose key column is dropped stops with an error naming the column.
#[tokio::test]
async fn the_key_follows_a_renamed_column_and_a_dropped_one_stops_the_table() {
    let warehouse = tempfile::tempdir().unwrap();
    let first = run_writer(
        warehouse.path(),
        vec![
            create_named("eq.renamed", 2, true),
            s0(),
            create_named("eq.dropped", 2, false),
            s0(),
        ],
    )
    .unwrap();
    let (node, _store) = Node::start_fresh().await;
    let register = |table: &str, key: Option<&str>| {
        let mut body = registration(warehouse.path(), table, Some("earliest"));
        if let Some(key) = key {
            body["identifier_columns"] = json!([key]);
        }
        body
    };
    let renamed = node.register(&register("eq.renamed", None)).await;
    let dropped = node.register(&register("eq.dropped", Some("v"))).await;
    let s0 = committed(&first);
    node.wait_for_checkpoint(&renamed, s0[0]).await;
    node.wait_for_checkpoint(&dropped, s0[1]).await;

    let upsert = row_delta(
        "S1",
        vec![file("F3", vec![json!({"key": 2, "v": "B", "cat": "p"})])],
        vec![ed("ED1", &["key"], vec![json!({"key": 2})])],
        vec![],
    );
    let second = run_writer(
        warehouse.path(),
        vec![
            json!({"op": "update_schema", "table": "eq.renamed", "rename": {"id": "key"}}),
            upsert,
            json!({"op": "update_schema", "table": "eq.dropped", "drop": ["v"]}),
            append("S1", vec![file("F3", vec![json!({"id": 6, "cat": "p"})])]),
        ],
    )
    .unwrap();
    let s1 = committed(&second);

    node.wait_for_checkpoint(&renamed, s1[0]).await;
    let (events, _) = node.all_events(&renamed, None, 100).await;
    let last: Vec<&Value> = events
        .iter()
        .filter(|e| id64(&e["snapshot_id"]) == Some(s1[0]))
        .collect();
    assert_eq!(last.len(), 1, "{events:#?}");
    assert_eq!(last[0]["op"], "update", "{:#}", last[0]);
    assert_eq!(last[0]["key"], json!({"key": 2}));
    assert_eq!(last[0]["before"], json!({"key": 2, "v": "b", "cat": "p"}));
    assert_eq!(last[0]["after"], json!({"key": 2, "v": "B", "cat": "p"}));
    // The events of the first snapshot keep their schema's name.
    let first_keys: Vec<&Value> = events
        .iter()
        .filter(|e| id64(&e["snapshot_id"]) == Some(s0[0]))
        .map(|e| &e["key"])
        .collect();
    assert_eq!(first_keys.len(), 5);
    assert!(
        first_keys.iter().all(|k| k.get("id").is_some()),
        "{first_keys:?}"
    );

    let t = node.wait_for_state(&dropped, "error").await;
    assert_eq!(t["error_snapshot_id"], id_json(s1[1]), "{t:#}");
    let error = t["last_error"].as_str().unwrap();
    assert!(
        error.contains(&format!("snapshot {}", s1[1]))
            && error.contains("identifier column \"v\" (field id 2)"),
        "{error}"
    );
    node.shutdown().await;
}

/// Snapshots expired before icefeed published them (MERGE_ON_READ §1.5, M7), as Iceberg
/// Java expires them, keeping the parent link of the oldest snapshot left: an expired
/// checkpoint is followed through its child, whose own manifests tell what it changed;
/// a file the child's change needs that the expiry deleted is a gap, never a skip.
#[tokio::test]
async fn snapshots_expired_before_they_were_published_are_followed_or_named_a_gap() {
    let warehouse = tempfile::tempdir().unwrap();
    let first = run_writer(
        warehouse.path(),
        vec![
            create_named("eq.expired", 2, false),
            append("S0", vec![file("F1", vec![p(1, "a"), p(2, "b")])]),
        ],
    )
    .unwrap();
    let s0 = committed(&first)[0];
    let (node, _store) = Node::start_fresh().await;
    let id = node
        .register(&registration(
            warehouse.path(),
            "eq.expired",
            Some("latest"),
        ))
        .await;
    node.wait_for_checkpoint(&id, s0).await;

    // The checkpoint expires (its files kept) before its children are published.
    node.set_paused(&id, true).await;
    let second = run_writer(
        warehouse.path(),
        vec![
            json!({"op": "append", "table": "eq.expired", "name": "S1",
                   "files": [file("F2", vec![p(3, "c"), p(4, "d")])]}),
            json!({"op": "overwrite", "name": "S2", "remove": ["F2"],
                   "add": [file("F2b", vec![p(3, "c")])]}),
            json!({"op": "expire", "snapshot_ids": [s0]}),
        ],
    )
    .unwrap();
    let [s1, s2] = committed(&second).try_into().unwrap();
    node.set_paused(&id, false).await;
    node.wait_for_checkpoint(&id, s2).await;
    let (events, _) = node.all_events(&id, None, 100).await;
    let changes: Vec<(String, i64, i64)> = events
        .iter()
        .map(|e| {
            let op = e["op"].as_str().unwrap().to_string();
            (
                op,
                id64(&e["snapshot_id"]).unwrap(),
                image(e)["id"].as_i64().unwrap(),
            )
        })
        .collect();
    let expected = [("insert", s1, 3), ("insert", s1, 4), ("delete", s2, 4)]
        .map(|(op, s, id)| (op.to_string(), s, id))
        .to_vec();
    assert_eq!(changes, expected);

    // Now the checkpoint expires with the files only it held, one of which its child's
    // change is computed from.
    node.set_paused(&id, true).await;
    let third = run_writer(
        warehouse.path(),
        vec![
            json!({"op": "overwrite", "table": "eq.expired", "name": "S3", "remove": ["F2b"],
                   "add": [file("F2c", vec![p(3, "C")])]}),
            json!({"op": "expire", "snapshot_ids": [s2], "clean_files": true}),
        ],
    )
    .unwrap();
    let s3 = committed(&third)[0];
    node.set_paused(&id, false).await;
    let stopped = node.wait_for_state(&id, "error").await;
    let error = stopped["last_error"].as_str().unwrap();
    assert!(
        error.starts_with(&format!("gap: snapshot {s2}, the parent of snapshot {s3}")),
        "{error}"
    );
    assert_eq!(stopped["last_error_code"], "gap");
    assert_eq!(stopped["checkpoint"]["snapshot_id"], id_json(s2));
    let (events, _) = node.all_events(&id, None, 100).await;
    assert_eq!(events.len(), 3, "nothing is published past a gap");
    node.shutdown().await;
}

/// The change sets of table `id`, oldest first, each with its events.
async fn change_sets_with_events(node: &Node, id: &str) -> Vec<(Value, Vec<Value>)> {
    let (status, listing) = node
        .get(&format!("/v1/tables/{id}/change-sets?limit=1000"))
        .await;
    assert_eq!(status, 200, "{listing}");
    let mut out = Vec::new();
    for c in listing["change_sets"].as_array().unwrap().iter().rev() {
        let count = c["event_count"].as_i64().unwrap() as usize;
        let (mut events, _) = node
            .all_events(id, Some(c["position"].as_str().unwrap()), 500)
            .await;
        events.truncate(count);
        out.push((c.clone(), events));
    }
    out
}

/// Events as the oracle's changes, sorted.
fn changes_of(events: &[Value]) -> Vec<String> {
    let member = |e: &Value, name: &str| e.get(name).cloned().unwrap_or(Value::Null);
    let mut changes: Vec<String> = events
        .iter()
        .map(|e| {
            change(
                e["op"].as_str().unwrap(),
                &member(e, "key"),
                &member(e, "before"),
                &member(e, "after"),
            )
        })
        .collect();
    changes.sort();
    changes
}

/// The rows of the writer's `scan` outputs in `stdout`, in order.
fn scans(stdout: &str) -> Vec<Vec<Value>> {
    stdout
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|v| v["op"] == "scan")
        .map(|v| v["rows"].as_array().unwrap().clone())
        .collect()
}

/// A branch rolled back past the checkpoint publishes a `reset` change set that turns
/// the checkpoint's state into the state rolled back to (MERGE_ON_READ M8), exactly as
/// Iceberg Java's reads of the two states differ; rolled forward again, the snapshots are
/// followed (and published) again; reset to a new lineage, the shared ancestor's state
/// comes first and the new snapshots follow. Replaying the whole feed gives the table's
/// rows at every step. Merge-on-read (equality and position deletes or vectors) and
/// copy-on-write snapshots, on v2 and v3 tables.
async fn rollbacks_reset_the_feed_to_the_state_rolled_back_to(format_version: u8) {
    let warehouse = tempfile::tempdir().unwrap();
    let name = format!("eq.rolled{format_version}");
    let first = run_writer(
        warehouse.path(),
        vec![
            create_named(&name, format_version, true),
            s0(),
            row_delta(
                "S1",
                vec![file("F3", vec![p(2, "B")])],
                vec![ed_ids("ED1", &[2])],
                vec![pd("PD1", "F2", &[0])],
            ),
            append("S2", vec![file("F4", vec![p(6, "f")])]),
            json!({"op": "overwrite", "name": "S3", "remove": ["F1"],
                   "add": [file("F1b", vec![p(1, "A"), p(3, "c")])]}),
        ],
    )
    .unwrap();
    let [s0, s1, s2, s3] = committed(&first).try_into().unwrap();
    let (node, _store) = Node::start_fresh().await;
    let id = node
        .register(&registration(warehouse.path(), &name, Some("earliest")))
        .await;
    node.wait_for_checkpoint(&id, s3).await;
    let published = |n: usize| {
        let (node, id) = (&node, &id);
        async move {
            wait_until(Duration::from_secs(30), || async {
                let sets = change_sets_with_events(node, id).await;
                (sets.len() >= n).then_some(sets)
            })
            .await
        }
    };
    let key = vec!["id".to_string()];

    // Back to S1: one reset from S3's state to S1's.
    let back = run_writer(
        warehouse.path(),
        vec![
            json!({"op": "scan", "table": name, "snapshot": s3}),
            json!({"op": "rollback", "snapshot_id": s1}),
            json!({"op": "scan", "snapshot": s1}),
        ],
    )
    .unwrap();
    let [at_s3, at_s1]: [Vec<Value>; 2] = scans(&back).try_into().unwrap();
    let sets = published(5).await;
    let (reset, events) = &sets[4];
    assert_eq!(
        (&reset["kind"], &reset["operation"]),
        (&json!("reset"), &json!("reset"))
    );
    assert_eq!(reset["snapshot_id"], id_json(s1));
    assert_eq!(reset["reset_from_snapshot_id"], id_json(s3));
    let want = state_difference(&at_s3, &at_s1, &key);
    assert!(!want.is_empty());
    assert_eq!(changes_of(events), want, "the reset from S3 back to S1");
    let table = node.wait_for_checkpoint(&id, s1).await;
    assert_eq!(table["state"], "active");

    // Forward again to S3: S2 and S3 are published again, each exactly.
    let forward = run_writer(
        warehouse.path(),
        vec![
            json!({"op": "set_current", "table": name, "snapshot_id": s3}),
            json!({"op": "scan", "snapshot": s2}),
        ],
    )
    .unwrap();
    let [at_s2]: [Vec<Value>; 1] = scans(&forward).try_into().unwrap();
    let sets = published(7).await;
    for (n, snapshot, parent, rows) in [(5, s2, &at_s1, &at_s2), (6, s3, &at_s2, &at_s3)] {
        let (c, events) = &sets[n];
        assert_eq!(
            (&c["kind"], &c["snapshot_id"]),
            (&json!("snapshot"), &id_json(snapshot))
        );
        assert_eq!(changes_of(events), state_difference(parent, rows, &key));
    }

    // Reset to a new lineage: back to S0 and a new commit on it.
    let fork = run_writer(
        warehouse.path(),
        vec![
            json!({"op": "rollback", "table": name, "snapshot_id": s0}),
            json!({"op": "scan", "snapshot": "current"}),
            append("S5", vec![file("F5", vec![p(7, "g"), p(8, "h")])]),
            json!({"op": "scan", "snapshot": "current"}),
        ],
    )
    .unwrap();
    let s5 = *committed(&fork).last().unwrap();
    let [at_s0, at_s5]: [Vec<Value>; 2] = scans(&fork).try_into().unwrap();
    node.wait_for_checkpoint(&id, s5).await;
    let sets = published(9).await;
    let ((reset, to_s0), (next, to_s5)) = (&sets[7], &sets[8]);
    assert_eq!(reset["kind"], "reset");
    assert_eq!(reset["reset_from_snapshot_id"], id_json(s3));
    assert_eq!(changes_of(to_s0), state_difference(&at_s3, &at_s0, &key));
    assert_eq!(next["snapshot_id"], id_json(s5));
    assert_eq!(changes_of(to_s5), state_difference(&at_s0, &at_s5, &key));

    // The whole feed, replayed by key, is the table as it is now.
    let mut state: BTreeMap<i64, Value> = BTreeMap::new();
    for (_, events) in &sets {
        replay(&mut state, events);
    }
    let mut now: Vec<Value> = at_s5.iter().map(without_metadata).collect();
    now.sort_by_key(|r| r["id"].as_i64());
    assert_eq!(state.into_values().collect::<Vec<_>>(), now);
    node.shutdown().await;
}

#[tokio::test]
async fn rollbacks_reset_the_feed_to_the_state_rolled_back_to_v2() {
    rollbacks_reset_the_feed_to_the_state_rolled_back_to(2).await;
}

#[tokio::test]
async fn rollbacks_reset_the_feed_to_the_state_rolled_back_to_v3() {
    rollbacks_reset_the_feed_to_the_state_rolled_back_to(3).await;
}

/// A push subscription keeps its index equal to the table through a rollback and a roll
/// forward: the reset's versions beat the documents of the snapshots it undoes, and the
/// snapshots published again beat the reset's.
#[tokio::test]
async fn a_push_subscription_follows_a_rollback_and_a_roll_forward() {
    use crate::push::{documents, push_node, target, unique_index};

    let warehouse = tempfile::tempdir().unwrap();
    let first = run_writer(
        warehouse.path(),
        vec![
            create_named("eq.pushed", 2, true),
            s0(),
            row_delta(
                "S1",
                vec![file("F3", vec![p(2, "B")])],
                vec![ed_ids("ED1", &[2])],
                vec![pd("PD1", "F2", &[0])],
            ),
            json!({"op": "scan", "snapshot": "current"}),
        ],
    )
    .unwrap();
    let [s0, s1, _] = committed(&first).try_into().unwrap();
    let [at_s1]: [Vec<Value>; 1] = scans(&first).try_into().unwrap();
    let (node, _dir) = push_node().await;
    let table = node
        .register(&registration(
            warehouse.path(),
            "eq.pushed",
            Some("earliest"),
        ))
        .await;
    let index = unique_index("rollback");
    let (status, sub) = node
        .post(
            "/v1/subscriptions",
            &json!({"name": index, "tables": [table], "kind": "opensearch",
                    "target": target(&crate::support::opensearch_url(), &index, json!({}))}),
        )
        .await;
    assert_eq!(status, 201, "{sub}");
    let index_holds = |rows: Vec<Value>| {
        let index = index.clone();
        let want: BTreeMap<String, Value> = rows
            .iter()
            .map(|r| (r["id"].to_string(), without_metadata(r)))
            .collect();
        async move {
            wait_until(Duration::from_secs(60), || async {
                // The first batch creates the index.
                let url = format!("{}/{index}", crate::support::opensearch_url());
                let head = reqwest::Client::new().head(url).send().await.unwrap();
                if !head.status().is_success() {
                    return None;
                }
                let have: BTreeMap<String, Value> = documents(&index)
                    .await
                    .into_iter()
                    .map(|(id, (_, source))| (id, source))
                    .collect();
                (have == want).then_some(())
            })
            .await
        }
    };
    index_holds(at_s1.clone()).await;

    let back = run_writer(
        warehouse.path(),
        vec![
            json!({"op": "rollback", "table": "eq.pushed", "snapshot_id": s0}),
            json!({"op": "scan", "snapshot": "current"}),
        ],
    )
    .unwrap();
    let [at_s0]: [Vec<Value>; 1] = scans(&back).try_into().unwrap();
    assert_ne!(at_s0, at_s1);
    index_holds(at_s0).await;

    run_writer(
        warehouse.path(),
        vec![json!({"op": "set_current", "table": "eq.pushed", "snapshot_id": s1})],
    )
    .unwrap();
    index_holds(at_s1).await;
    node.shutdown().await;
}

/// Random histories with rollbacks and moves of the branch between them (M8): Iceberg
/// Java appends, upserts through equality deletes, deletes by position (v3: vectors),
/// rewrites files copy-on-write, rolls back to a random ancestor or sets the branch to a
/// random earlier snapshot, one operation at a time while icefeed follows. After each,
/// the change sets it published replayed onto the rows it had equal Iceberg Java's scan
/// of the new head, and a single change set (one commit, or a rollback to an ancestor)
/// equals the difference of the two scans. Seeds: `ICEFEED_ROLLBACK_SEEDS` (default 1-2).
#[tokio::test]
async fn random_histories_with_rollbacks_match_iceberg_java() {
    use rand::{Rng, SeedableRng, rngs::StdRng};

    let seeds: Vec<u64> = std::env::var("ICEFEED_ROLLBACK_SEEDS")
        .map(|s| s.split(',').map(|n| n.trim().parse().unwrap()).collect())
        .unwrap_or_else(|_| vec![1, 2]);
    let (node, _store) = Node::start_fresh().await;
    for seed in seeds {
        let mut rng = StdRng::seed_from_u64(seed);
        let format_version = 2 + (seed % 2) as u8;
        let name = format!("eq.random{seed}");
        let warehouse = tempfile::tempdir().unwrap();
        let mut next_id = 1;
        let mut rows = |n: usize, rng: &mut StdRng| -> Vec<Value> {
            (0..n)
                .map(|_| {
                    next_id += 1;
                    p(next_id, &format!("v{}", rng.random_range(0..1000)))
                })
                .collect()
        };
        let first = run_writer(
            warehouse.path(),
            vec![
                create_named(&name, format_version, true),
                append("S0", vec![file("F0", rows(6, &mut rng))]),
                json!({"op": "scan", "snapshot": "current"}),
            ],
        )
        .unwrap();
        let mut lineage = vec![committed(&first)[0]];
        let mut known = lineage.clone();
        let [mut live]: [Vec<Value>; 1] = scans(&first).try_into().unwrap();
        let id = node
            .register(&registration(warehouse.path(), &name, Some("earliest")))
            .await;
        node.wait_for_checkpoint(&id, lineage[0]).await;
        let mut seen = change_sets_with_events(&node, &id).await.len();
        let mut state: BTreeMap<i64, Value> = BTreeMap::new();
        for (_, events) in change_sets_with_events(&node, &id).await {
            replay(&mut state, &events);
        }

        for round in 0..12 {
            let label = format!("seed {seed} round {round}");
            let pick =
                |rng: &mut StdRng, from: &[Value]| from[rng.random_range(0..from.len())].clone();
            let op = match rng.random_range(0..6) {
                _ if live.is_empty() => {
                    json!({"op": "append", "files": [file("A", rows(3, &mut rng))]})
                }
                0 => json!({"op": "append", "files": [file("A", rows(3, &mut rng))]}),
                1 => {
                    let row = pick(&mut rng, &live);
                    let k = row["id"].as_i64().unwrap();
                    row_delta(
                        "U",
                        vec![file("U", vec![p(k, &format!("u{round}"))])],
                        vec![ed_ids("E", &[k])],
                        vec![],
                    )
                }
                2 => {
                    let row = pick(&mut rng, &live);
                    row_delta(
                        "D",
                        vec![],
                        vec![],
                        vec![pd(
                            "P",
                            row["_file"].as_str().unwrap(),
                            &[row["_pos"].as_i64().unwrap()],
                        )],
                    )
                }
                3 => {
                    let victim = pick(&mut rng, &live)["_file"].clone();
                    let mut kept: Vec<Value> = live
                        .iter()
                        .filter(|r| r["_file"] == victim)
                        .map(|r| p(r["id"].as_i64().unwrap(), r["v"].as_str().unwrap()))
                        .collect();
                    kept[0]["v"] = json!(format!("w{round}"));
                    json!({"op": "overwrite", "remove": [victim], "add": [file("W", kept)]})
                }
                4 if lineage.len() > 1 => {
                    let to = lineage[rng.random_range(0..lineage.len() - 1)];
                    json!({"op": "rollback", "snapshot_id": to})
                }
                _ => {
                    let head = *lineage.last().unwrap();
                    let others: Vec<i64> = known.iter().copied().filter(|s| *s != head).collect();
                    if others.is_empty() {
                        continue;
                    }
                    json!({"op": "set_current", "snapshot_id": others[rng.random_range(0..others.len())]})
                }
            };
            let kind = op["op"].as_str().unwrap().to_string();
            eprintln!("random rollback histories: {label}: {kind}");
            let mut op = op;
            op["table"] = json!(name);
            let out = run_writer(
                warehouse.path(),
                vec![
                    op.clone(),
                    json!({"op": "scan", "snapshot": "current"}),
                    json!({"op": "history"}),
                ],
            )
            .unwrap_or_else(|e| panic!("{label}: {op}: {e}"));
            let [now]: [Vec<Value>; 1] = scans(&out).try_into().unwrap();
            let head = out
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .find(|v| v["op"] == "history")
                .unwrap();
            lineage = head["lineage"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_i64().unwrap())
                .collect();
            let head = *lineage.last().unwrap();
            if !known.contains(&head) {
                known.push(head);
            }
            node.wait_for_checkpoint(&id, head).await;
            let sets = change_sets_with_events(&node, &id).await;
            let new = &sets[seen..];
            for (_, events) in new {
                replay(&mut state, events);
            }
            let mut want: Vec<Value> = now.iter().map(without_metadata).collect();
            want.sort_by_key(|r| r["id"].as_i64());
            assert_eq!(
                state.values().cloned().collect::<Vec<_>>(),
                want,
                "{label}: {op}"
            );
            if kind != "set_current" {
                assert_eq!(new.len(), 1, "{label}: {op}");
                assert_eq!(
                    changes_of(&new[0].1),
                    state_difference(&live, &now, &["id".to_string()]),
                    "{label}: {op}: {}",
                    new[0].0
                );
            }
            seen = sets.len();
            live = now;
        }
    }
    node.shutdown().await;
}

/// A row without the scan's `_file` and `_pos`.
fn without_metadata(row: &Value) -> Value {
    let mut row = row.clone();
    row.as_object_mut()
        .unwrap()
        .retain(|k, _| !k.starts_with('_'));
    row
}

/// Applies events to rows by `id`.
fn replay(state: &mut BTreeMap<i64, Value>, events: &[Value]) {
    for e in events {
        let row = image(e).clone();
        let id = row["id"].as_i64().unwrap();
        match e["op"].as_str().unwrap() {
            "delete" => assert!(
                state.remove(&id).is_some(),
                "a delete of an absent row: {e}"
            ),
            _ => drop(state.insert(id, row)),
        }
    }
}
