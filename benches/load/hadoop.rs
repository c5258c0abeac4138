//! Merge-on-read commits on the benchmark table: scratch copies of it in a Hadoop
//! catalog's layout (`warehouse/bench/taxi/metadata/vN.metadata.json` and
//! `version-hint.text`), which Iceberg's own Java API commits to (the writer of
//! `tests/iceberg-writer`, built by `scripts/iceberg-writer.sh`) and icefeed reads as a
//! `filesystem` warehouse; and the writer's steps that delete or update planned rows
//! with position deletes, deletion vectors or equality deletes.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use anyhow::{Context, bail};
use iceberg::TableIdent;
use iceberg::spec::{DataFile, ManifestStatus};
use iceberg::table::Table;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::cdc::{Planned, copy_table, day_of};
use crate::generate::{CATALOG_NAME, NAMESPACE, TABLE};

/// The Iceberg Java writer: `ICEFEED_BENCH_ICEBERG_WRITER` (a command line), else the one
/// `scripts/iceberg-writer.sh` prints (building it when its sources changed).
pub struct JavaWriter {
    command: Vec<String>,
}

impl JavaWriter {
    pub fn new() -> anyhow::Result<Self> {
        let command = match std::env::var("ICEFEED_BENCH_ICEBERG_WRITER") {
            Ok(command) => command,
            Err(_) => {
                let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/iceberg-writer.sh");
                let out = std::process::Command::new(script)
                    .stderr(Stdio::inherit())
                    .output()
                    .with_context(|| format!("running {script}"))?;
                anyhow::ensure!(out.status.success(), "{script} failed");
                String::from_utf8(out.stdout)?
            }
        };
        // The script's JVM options suit the tests' short runs (C1 only); a benchmark's
        // commits read and write millions of rows, where the optimizing compiler pays.
        let command: Vec<String> = command
            .split_whitespace()
            .filter(|option| *option != "-XX:TieredStopAtLevel=1")
            .map(str::to_string)
            .collect();
        anyhow::ensure!(!command.is_empty(), "empty Iceberg writer command");
        Ok(Self { command })
    }

    /// Runs `steps` on the Hadoop catalog of `warehouse` in one JVM; the output line of
    /// each step, and when the last one was read (the last commit returned).
    pub async fn run(
        &self,
        warehouse: &Path,
        steps: &[Value],
    ) -> anyhow::Result<(Vec<Value>, Instant)> {
        let script = json!({
            "warehouse": format!("file:{}", warehouse.display()),
            "steps": steps,
        });
        let mut child = tokio::process::Command::new(&self.command[0])
            .args(&self.command[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting the Iceberg writer {:?}", self.command[0]))?;
        let mut stdin = child.stdin.take().context("writer stdin")?;
        let input = serde_json::to_vec(&script)?;
        let feeder = tokio::spawn(async move {
            stdin.write_all(&input).await?;
            stdin.shutdown().await
        });
        let mut lines = BufReader::new(child.stdout.take().context("writer stdout")?).lines();
        let mut out = Vec::new();
        let mut last = Instant::now();
        while let Some(line) = lines.next_line().await? {
            last = Instant::now();
            out.push(serde_json::from_str(&line).with_context(|| format!("writer said {line}"))?);
        }
        feeder.await??;
        let status = child.wait().await?;
        if !status.success() || out.len() != steps.len() {
            bail!(
                "the Iceberg writer exited with {status} after {} of {} steps",
                out.len(),
                steps.len()
            );
        }
        Ok((out, last))
    }
}

/// A scratch copy of the benchmark table in a Hadoop catalog's layout.
pub struct HadoopTable {
    pub dir: PathBuf,
}

impl HadoopTable {
    /// Copies the table under `source` (see [`copy_table`]) to `dest` and makes its
    /// current metadata file `v1.metadata.json` of a Hadoop catalog.
    pub async fn copy(source: &Path, dest: &Path) -> anyhow::Result<Self> {
        copy_table(source, dest).await?;
        let catalog = icefeed_testkit::writer::open_sql_catalog(dest, CATALOG_NAME).await?;
        let ident = TableIdent::from_strs([NAMESPACE, TABLE])?;
        let table = iceberg::Catalog::load_table(&catalog, &ident).await?;
        let current = table
            .metadata_location()
            .context("the copy has no metadata location")?;
        let table = Self {
            dir: dest.to_path_buf(),
        };
        let metadata = table
            .warehouse()
            .join(NAMESPACE)
            .join(TABLE)
            .join("metadata");
        std::fs::create_dir_all(&metadata)?;
        std::fs::copy(
            crate::cdc::local_path(current),
            metadata.join("v1.metadata.json"),
        )?;
        std::fs::write(metadata.join("version-hint.text"), "1")?;
        Ok(table)
    }

    pub fn warehouse(&self) -> PathBuf {
        self.dir.join("warehouse")
    }

    /// The body to POST to `/v1/tables` (with `start` and the rest to add).
    pub fn registration(&self) -> Value {
        json!({
            "catalog": {"type": "filesystem", "warehouse": self.warehouse().display().to_string()},
            "table": format!("{NAMESPACE}.{TABLE}"),
        })
    }

    /// The table at its current metadata, loaded as icefeed loads it.
    pub async fn load(&self) -> anyhow::Result<Table> {
        let config = icefeed::catalog::CatalogConfig::from_json(&self.registration()["catalog"])?;
        let ident = TableIdent::from_strs([NAMESPACE, TABLE])?;
        let reach = icefeed::catalog::Reach {
            local: icefeed::catalog::LocalPaths::only(&[self.warehouse()]),
            ..Default::default()
        };
        Ok(config.load_table(&ident, &reach).await?)
    }

    /// Runs `steps` (without `table`: this one's is added to the first) with `writer`;
    /// their output lines and when the last commit returned.
    pub async fn commit(
        &self,
        writer: &JavaWriter,
        mut steps: Vec<Value>,
    ) -> anyhow::Result<(Vec<Value>, Instant)> {
        if let Some(first) = steps.first_mut() {
            first["table"] = json!(format!("{NAMESPACE}.{TABLE}"));
        }
        writer.run(&self.warehouse(), &steps).await
    }
}

/// A step making the table merge-on-read (as Spark reads the properties) in format
/// `version` (Iceberg upgrades a v2 table's metadata to v3 in place).
pub fn merge_on_read(version: u8) -> Value {
    json!({"op": "set_properties", "properties": {
        "format-version": version.to_string(),
        "write.delete.mode": "merge-on-read",
        "write.update.mode": "merge-on-read",
        "write.merge.mode": "merge-on-read",
    }})
}

fn targets<'a>(plan: impl IntoIterator<Item = &'a Planned>) -> Vec<Value> {
    plan.into_iter()
        .map(|p| json!({"file": p.file.file_path(), "positions": p.rows}))
        .collect()
}

/// The `position_deletes` of a row delta that deletes the planned rows: on v2 one entry
/// (one position delete file) per partition, since a position delete file belongs to
/// one; on v3 one entry, a deletion vector per data file in one Puffin file.
pub fn position_deletes(plan: &[Planned], format_version: u8) -> Vec<Value> {
    if format_version >= 3 {
        return vec![json!({"name": "dv", "targets": targets(plan)})];
    }
    let mut by_day: std::collections::BTreeMap<i32, Vec<&Planned>> = Default::default();
    for p in plan {
        by_day.entry(day_of(&p.file)).or_default().push(p);
    }
    by_day
        .into_values()
        .map(|files| json!({"name": "pos", "targets": targets(files)}))
        .collect()
}

/// A `data` entry of a row delta: the planned rows, read by the writer from their files,
/// with `fare_amount + 1` (the update of `crate::cdc::apply`), one file per partition.
pub fn updated_rows(name: &str, plan: &[Planned]) -> Value {
    json!({"name": name, "from": targets(plan), "add": {"fare_amount": 1.0}})
}

/// One row delta: an UPDATE of the planned rows through position deletes (v2) or
/// deletion vectors (v3) and new data files.
pub fn update_by_position(plan: &[Planned], format_version: u8) -> Value {
    json!({"op": "row_delta", "data": [updated_rows("upd", plan)],
           "position_deletes": position_deletes(plan, format_version)})
}

/// One row delta: a DELETE of the planned rows through position deletes or DVs.
pub fn delete_by_position(plan: &[Planned], format_version: u8) -> Value {
    json!({"op": "row_delta", "position_deletes": position_deletes(plan, format_version)})
}

/// One row delta: an upsert of the planned rows' keys (`trip_id`) with new values, as an
/// upsert writer (Flink) commits it: an equality delete file of the keys per partition
/// and the new rows.
pub fn upsert_by_equality(plan: &[Planned]) -> Value {
    json!({"op": "row_delta", "data": [updated_rows("ups", plan)],
           "equality_deletes": [{"name": "eq", "columns": ["trip_id"], "keys_of": "ups"}]})
}

/// The data and delete files the table's current snapshot added.
pub async fn added_files(table: &Table) -> anyhow::Result<Vec<DataFile>> {
    let snapshot = table.metadata().current_snapshot().context("no snapshot")?;
    let list = table.manifest_list_reader(snapshot).load().await?;
    let mut files = Vec::new();
    for manifest in list.entries() {
        if manifest.added_snapshot_id != snapshot.snapshot_id() {
            continue;
        }
        let loaded = manifest.load_manifest(table.file_io()).await?;
        for entry in loaded.entries() {
            if entry.status() == ManifestStatus::Added {
                files.push(entry.data_file().clone());
            }
        }
    }
    Ok(files)
}
