//! Tables of wide rows: a page ends once its events store 8 MiB in the change store, or
//! decode to 32 MiB, before `limit`, and the pages still hold every event once, in
//! order, in every format, as net pages and as a stream; a rewrite decodes them a few at
//! a time and its changes are exact however it is computed, also when its rows decode to
//! far more than their stored sizes promised.

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array, RecordBatch, StringArray, UInt32Array};
use arrow::compute::{concat_batches, take_record_batch};
use icefeed::config::Settings;
use icefeed_testkit::letters::letters;
use serde_json::{Value, json};

use crate::fixtures::{orders, orders_schema};
use crate::stream::SseClient;
use crate::support::{Node, Warehouse, counter, fresh_database, head, id_json, test_settings};

/// Wide rows of the table: enough for three pages, and far fewer than `limit`.
const ROWS: i64 = 180;
/// Narrow rows appended after them.
const NARROW: i64 = 10;
/// Bytes of each row's name.
const NAME_BYTES: usize = 200_000;
/// Bytes of stored events a page holds at most, as the README says.
const PAGE_STORED_BYTES: u64 = 8 << 20;
/// Bytes of decoded events a page holds at most, as the README says.
const PAGE_DECODED_BYTES: usize = 32 << 20;

/// Bytes of the Parquet files below `dir`.
fn parquet_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .map(|path| match path.is_dir() {
            true => parquet_bytes(&path),
            false if path.extension().is_some_and(|e| e == "parquet") => {
                path.metadata().unwrap().len()
            }
            false => 0,
        })
        .sum()
}

/// `orders` rows whose names are [`NAME_BYTES`] of letters no codec compresses much.
fn wide_orders(ids: std::ops::Range<i64>) -> RecordBatch {
    let narrow = orders(ids.clone());
    let names: StringArray = ids.map(|id| Some(letters(id as u64, NAME_BYTES))).collect();
    let mut columns: Vec<ArrayRef> = narrow.columns().to_vec();
    columns[1] = Arc::new(names);
    RecordBatch::try_new(narrow.schema(), columns).unwrap()
}

/// The ids of a page's events, in the page's order.
pub(crate) fn page_ids(accept: &str, body: &[u8]) -> Vec<i64> {
    let id = |event: &Value| event["after"]["id"].as_i64().unwrap();
    match accept {
        "application/json" => {
            let page: Value = serde_json::from_slice(body).unwrap();
            page["events"].as_array().unwrap().iter().map(id).collect()
        }
        "application/x-ndjson" => body
            .split(|b| *b == b'\n')
            .filter(|line| !line.is_empty())
            .map(|line| id(&serde_json::from_slice(line).unwrap()))
            .collect(),
        _ => {
            let body = std::io::Cursor::new(body);
            let reader = arrow::ipc::reader::StreamReader::try_new(body, None).unwrap();
            let mut ids = Vec::new();
            for batch in reader {
                let batch = batch.unwrap();
                let column = batch.column_by_name("id").unwrap();
                let column = column.as_any().downcast_ref::<Int64Array>().unwrap();
                ids.extend(column.iter().map(Option::unwrap));
            }
            ids
        }
    }
}

#[tokio::test]
async fn pages_of_wide_rows_end_early_and_together_hold_every_event() {
    let wh = Warehouse::new().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let table = wh.append(&t, &[wide_orders(0..ROWS)]).await;
    // The export's events are the rows of the table's data file, as stored there.
    let stored_per_event = parquet_bytes(wh.dir.path()) / ROWS as u64;
    let (node, _store) = Node::start_fresh().await;
    let id = node
        .register(&wh.registration("shop.orders", json!({})))
        .await;
    node.wait_for_checkpoint(&id, head(&table)).await;
    // Narrow events after wide ones: a page that has no room left for one more wide
    // event still has some for narrow ones, yet must not skip the wide ones to them.
    let table = wh.append(&table, &[orders(ROWS..ROWS + NARROW)]).await;
    node.wait_for_checkpoint(&id, head(&table)).await;
    let per_page = (PAGE_STORED_BYTES / stored_per_event) as usize;
    let mut end = String::new();
    assert!(
        per_page < ROWS as usize / 2,
        "{stored_per_event} bytes an event"
    );
    for accept in [
        "application/json",
        "application/x-ndjson",
        "application/vnd.apache.arrow.stream",
    ] {
        let (mut ids, mut pages, mut after) = (Vec::new(), 0, String::new());
        let next_of_last = loop {
            let path = format!("/v1/tables/{id}/changes?limit=1000{after}");
            let (status, [_, next, more, count], body) =
                crate::feed::raw_page(&node, &path, accept).await;
            assert_eq!(status, 200, "{accept}: {}", String::from_utf8_lossy(&body));
            let page = page_ids(accept, &body);
            assert_eq!(page.len().to_string(), count, "{accept}: Icefeed-Count");
            let left = (ROWS + NARROW) as usize - ids.len();
            assert_eq!(page.len(), per_page.min(left), "{accept}: page {pages}");
            ids.extend(page);
            pages += 1;
            if more == "false" {
                break next;
            }
            after = format!("&after={next}");
        };
        let all: Vec<i64> = (0..ROWS + NARROW).collect();
        assert_eq!(ids, all, "{accept}: every event once, in order");
        end = next_of_last;
    }
    // Net changes of the whole feed: pages of wide rows end early too.
    let mut path = format!("/v1/tables/{id}/changes?net=true&until={end}&limit=1000&wait=60");
    let mut ids = Vec::new();
    loop {
        let (status, page) = node.get(&path).await;
        assert_eq!(status, 200, "{path}: {page}");
        let events = page["events"].as_array().unwrap();
        assert!(events.len() < 2 * per_page, "net: {} events", events.len());
        ids.extend(events.iter().map(|e| e["after"]["id"].as_i64().unwrap()));
        let next = page["next"].as_str().unwrap();
        if next == end {
            break;
        }
        path = format!("/v1/tables/{id}/changes?after={next}&limit=1000&wait=60");
    }
    ids.sort_unstable();
    assert_eq!(
        ids,
        (0..ROWS + NARROW).collect::<Vec<_>>(),
        "net: every row once"
    );
    // A stream reads on without waiting for a publish when a read ends at its bytes.
    let path = format!("/v1/tables/{id}/changes/stream?limit=1000");
    let mut stream = SseClient::connect(&node, &path, None).await;
    for expected in 0..ROWS + NARROW {
        let event = stream.expect(Duration::from_secs(10)).await.change();
        assert_eq!(
            event["after"]["id"], expected,
            "stream: every event once, in order"
        );
    }
    node.shutdown().await;
}

/// `rows` rewritten the way an UPDATE and DELETE and INSERT commit by copy-on-write: row
/// 3 deleted, the names of rows 50 and 99 reversed (still wide), `inserted` (row 1000)
/// added, the other rows copied.
fn rewritten(rows: &RecordBatch, inserted: RecordBatch) -> RecordBatch {
    let kept: Vec<u32> = (0..rows.num_rows() as u32).filter(|&i| i != 3).collect();
    let kept = take_record_batch(rows, &UInt32Array::from(kept)).unwrap();
    let ids = kept.column(0).as_primitive::<arrow::datatypes::Int64Type>();
    let names = kept.column(1).as_string::<i32>();
    let names: StringArray = (0..kept.num_rows())
        .map(|i| match ids.value(i) {
            50 | 99 => Some(names.value(i).chars().rev().collect::<String>()),
            _ => Some(names.value(i).to_string()),
        })
        .collect();
    let mut columns = kept.columns().to_vec();
    columns[1] = Arc::new(names);
    let kept = RecordBatch::try_new(kept.schema(), columns).unwrap();
    concat_batches(&kept.schema(), &[kept.clone(), inserted]).unwrap()
}

/// The name of row `id` of `batch`.
fn name_of(batch: &RecordBatch, id: i64) -> &str {
    let ids = batch
        .column(0)
        .as_primitive::<arrow::datatypes::Int64Type>();
    let at = ids.values().iter().position(|&i| i == id).unwrap();
    batch.column(1).as_string::<i32>().value(at)
}

/// How a rewrite is computed, set by `scheduler` settings, and the counters that grow
/// when it is computed that way.
type Way = (&'static str, fn(&mut Settings), &'static [&'static str]);
const WAYS: [Way; 3] = [
    (
        "in place",
        |s| {
            s.scheduler.shuffle_from_bytes = u64::MAX;
            s.scheduler.map_memory_bytes = 1 << 40;
        },
        &["icefeed_rewrites_total{how=\"in_place\"}"],
    ),
    (
        "by map tasks in memory",
        |s| s.scheduler.map_memory_bytes = 1 << 40,
        &["icefeed_rewrites_total{how=\"shuffled\"}"],
    ),
    // Far less than the rows decoded: every map task spills.
    (
        "by map tasks through spill partitions",
        |s| s.scheduler.map_memory_bytes = 1 << 20,
        &["icefeed_shuffle_spilled_partitions_total"],
    ),
];

#[tokio::test]
async fn rewrites_of_wide_rows_are_exact_however_they_are_computed() {
    // 100 rows of 200 KB: a decoded batch holds about 8 MiB, so each side of the rewrite
    // is read in several batches.
    let rows = wide_orders(0..100);
    let after = rewritten(&rows, wide_orders(1000..1001));
    for way in WAYS {
        rewrite_exactly(way, &rows, &after).await;
    }
}

/// `orders` rows whose names are [`NAME_BYTES`] of one letter after their id: a few
/// hundred bytes stored, 200 KB decoded.
fn repetitive_orders(ids: std::ops::Range<i64>) -> RecordBatch {
    let narrow = orders(ids.clone());
    let names: StringArray = ids
        .map(|id| Some(format!("{id}{}", "x".repeat(NAME_BYTES))))
        .collect();
    let mut columns: Vec<ArrayRef> = narrow.columns().to_vec();
    columns[1] = Arc::new(names);
    RecordBatch::try_new(narrow.schema(), columns).unwrap()
}

#[tokio::test]
async fn pages_of_rows_decoding_far_larger_than_stored_end_by_what_they_decode_to() {
    // Rows that store a few hundred bytes and decode to 200 KB: counted by what they
    // store, one page of `limit` would hold all of them. A page ends by what its events
    // decode to, for an export (a copied data file, known by its footer) as for an
    // update of every row (a segment icefeed encoded, two images an event).
    let wh = Warehouse::new().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let rows = repetitive_orders(0..ROWS);
    let table = wh.append(&t, std::slice::from_ref(&rows)).await;
    let (node, _store) = Node::start_fresh().await;
    let id = node
        .register(&wh.registration("shop.orders", json!({})))
        .await;
    node.wait_for_checkpoint(&id, head(&table)).await;
    let (exported, cursor) = pages_decoding_within(&node, &id, "", 1).await;
    assert_eq!(
        exported,
        (0..ROWS).collect::<Vec<_>>(),
        "the export, in order"
    );

    let names = rows.column(1).as_string::<i32>();
    let reversed: StringArray = names
        .iter()
        .map(|name| name.map(|n| n.chars().rev().collect::<String>()))
        .collect();
    let mut columns = rows.columns().to_vec();
    columns[1] = Arc::new(reversed);
    let after = RecordBatch::try_new(rows.schema(), columns).unwrap();
    let table = wh.overwrite_all(&table, &[after]).await;
    node.wait_for_checkpoint(&id, head(&table)).await;
    let (mut updated, _) = pages_decoding_within(&node, &id, &format!("&after={cursor}"), 2).await;
    updated.sort_unstable();
    assert_eq!(
        updated,
        (0..ROWS).collect::<Vec<_>>(),
        "every row updated once"
    );
    node.shutdown().await;
}

/// Pages through `id`'s feed after `after` as JSON pages of `limit=1000`, checking that
/// each holds no more events than decode to [`PAGE_DECODED_BYTES`] (at least `images`
/// names an event) and that there were several; the ids of their events and the cursor
/// after the last.
async fn pages_decoding_within(
    node: &Node,
    id: &str,
    after: &str,
    images: usize,
) -> (Vec<i64>, String) {
    let most = PAGE_DECODED_BYTES / (images * NAME_BYTES);
    let (mut ids, mut pages, mut after) = (Vec::new(), 0, after.to_string());
    loop {
        let path = format!("/v1/tables/{id}/changes?limit=1000{after}");
        let (status, [_, next, more, _], body) =
            crate::feed::raw_page(node, &path, "application/json").await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let page = page_ids("application/json", &body);
        assert!(
            !page.is_empty() && page.len() <= most,
            "page {pages}: {} events of {images} x {NAME_BYTES} bytes decoded",
            page.len()
        );
        ids.extend(page);
        pages += 1;
        if more == "false" {
            assert!(pages > 1, "{} events in one page", ids.len());
            return (ids, next);
        }
        after = format!("&after={next}");
    }
}

/// `batch`'s rows in reverse order.
fn reversed(batch: &RecordBatch) -> RecordBatch {
    let rows: Vec<u32> = (0..batch.num_rows() as u32).rev().collect();
    take_record_batch(batch, &UInt32Array::from(rows)).unwrap()
}

#[tokio::test]
async fn rewrites_of_rows_decoding_far_larger_than_stored_stay_within_memory() {
    // The files store ~100x less than their rows decode to, so planned from stored
    // sizes the rewrite fits a budget of 4 MiB in place and in one map task's memory;
    // decoded, 20 MB do not: it goes on through the shuffle, whose map task goes on
    // through spill partitions.
    let rows = repetitive_orders(0..100);
    let after = rewritten(&rows, repetitive_orders(1000..1001));
    let configure = |s: &mut Settings| {
        s.scheduler.shuffle_from_bytes = u64::MAX;
        s.scheduler.map_memory_bytes = 4 << 20;
    };
    let way: Way = (
        "rows decoding past the budget",
        configure,
        &[
            "icefeed_decoded_over_estimate_total{where=\"in_place\"}",
            "icefeed_decoded_over_estimate_total{where=\"map\"}",
            "icefeed_shuffle_spilled_partitions_total{level=\"0\"}",
        ],
    );
    rewrite_exactly(way, &rows, &after).await;
    // Rewritten in reverse order, nothing is paired on the way: every row is spilled, and
    // partitions sized for what the budget saw hold more than a quarter of it once
    // decoded, so they are split again.
    let way: Way = (
        "rows decoding past the budget, rewritten in reverse order",
        configure,
        &[
            "icefeed_decoded_over_estimate_total{where=\"map\"}",
            "icefeed_shuffle_spilled_partitions_total{level=\"1\"}",
        ],
    );
    rewrite_exactly(way, &rows, &reversed(&after)).await;
}

/// Registers a table of `rows`, overwrites them with `after` (as [`rewritten`] does) and
/// checks the rewrite's changes, computed `way`: exactly its delete, two updates and
/// insert, with their images.
async fn rewrite_exactly((way, configure, grows): Way, rows: &RecordBatch, after: &RecordBatch) {
    let wh = Warehouse::new().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let table = wh.append(&t, std::slice::from_ref(rows)).await;
    let store = tempfile::tempdir().unwrap();
    let mut settings = test_settings(&fresh_database().await, store.path());
    configure(&mut settings);
    let node = Node::start(settings).await;
    let id = node
        .register(&wh.registration("shop.orders", json!({})))
        .await;
    node.wait_for_checkpoint(&id, head(&table)).await;
    let (_, cursor) = node.all_events(&id, None, 1000).await;
    let mut before = Vec::new();
    for name in grows {
        before.push(counter(&node, name).await);
    }
    let table = wh.overwrite_all(&table, std::slice::from_ref(after)).await;
    node.wait_for_checkpoint(&id, head(&table)).await;
    let (events, _) = node.all_events(&id, Some(&cursor), 1000).await;
    let name = |image: &Value| image["name"].as_str().unwrap().to_string();
    let mut seen: Vec<(i64, String)> = events
        .iter()
        .map(|e| {
            assert_eq!(e["snapshot_id"], id_json(head(&table)), "{way}");
            let image = if e["op"] == "delete" {
                &e["before"]
            } else {
                &e["after"]
            };
            (
                image["id"].as_i64().unwrap(),
                e["op"].as_str().unwrap().into(),
            )
        })
        .collect();
    seen.sort();
    let expected = [
        (3, "delete"),
        (50, "update"),
        (99, "update"),
        (1000, "insert"),
    ];
    let expected: Vec<(i64, String)> = expected
        .iter()
        .map(|(i, op)| (*i, op.to_string()))
        .collect();
    assert_eq!(
        seen, expected,
        "{way}: the rewrite's changes, every copy cancelled"
    );
    for e in &events {
        let (before, after_image) = (&e["before"], &e["after"]);
        match e["op"].as_str().unwrap() {
            "delete" => assert!(name(before) == name_of(rows, 3), "{way}: row 3"),
            "insert" => assert!(name(after_image) == name_of(after, 1000), "{way}"),
            _ => {
                let row = before["id"].as_i64().unwrap();
                assert!(name(before) == name_of(rows, row), "{way}: {row} before");
                assert!(
                    name(after_image) == name_of(after, row),
                    "{way}: {row} after"
                );
            }
        }
    }
    for (name, before) in grows.iter().zip(before) {
        assert!(
            counter(&node, name).await > before,
            "{way}: {name} did not grow"
        );
    }
    node.shutdown().await;
}
