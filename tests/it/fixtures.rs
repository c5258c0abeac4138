//! Small tables used across the tests.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, Decimal128Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
use iceberg::table::Table;
use serde_json::json;

use crate::support::{Node, Warehouse, head};

/// `orders`: id (identifier), name, amount decimal(10,2), ts timestamptz.
pub fn orders_schema() -> Schema {
    Schema::builder()
        .with_schema_id(0)
        .with_identifier_field_ids(vec![1])
        .with_fields(vec![
            NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::optional(2, "name", Type::Primitive(PrimitiveType::String)).into(),
            NestedField::optional(
                3,
                "amount",
                Type::Primitive(PrimitiveType::Decimal {
                    precision: 10,
                    scale: 2,
                }),
            )
            .into(),
            NestedField::optional(4, "ts", Type::Primitive(PrimitiveType::Timestamptz)).into(),
        ])
        .build()
        .unwrap()
}

/// `shop.orders` of a fresh warehouse, registered with a fresh node. Bind every field
/// (`_name` for unused ones): the warehouse and the change store are deleted when dropped.
pub struct RegisteredOrders {
    pub wh: Warehouse,
    /// The table as of its one snapshot.
    pub table: Table,
    pub node: Node,
    /// The node's change store.
    pub store: tempfile::TempDir,
    /// The registered table's id.
    pub id: String,
}

/// `shop.orders` holding `ids` in one snapshot, registered with a fresh node whose
/// checkpoint has reached that snapshot.
pub async fn registered_orders(ids: impl IntoIterator<Item = i64>) -> RegisteredOrders {
    let wh = Warehouse::new().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let table = wh.append(&t, &[orders(ids)]).await;
    let (node, store) = Node::start_fresh().await;
    let id = node
        .register(&wh.registration("shop.orders", json!({})))
        .await;
    node.wait_for_checkpoint(&id, head(&table)).await;
    RegisteredOrders {
        wh,
        table,
        node,
        store,
        id,
    }
}

/// Rows of `orders` for ids in `ids`: name `n<id>`, amount `<id>.05`, ts `<id>` seconds after 2026-01-01.
pub fn orders(ids: impl IntoIterator<Item = i64>) -> RecordBatch {
    orders_named(ids, "")
}

/// Like [`orders`], with names `n<id><suffix>` (an updated version of the same rows).
pub fn orders_named(ids: impl IntoIterator<Item = i64>, suffix: &str) -> RecordBatch {
    let ids: Vec<i64> = ids.into_iter().collect();
    let schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(&orders_schema()).unwrap());
    let base = 1_767_225_600_000_000i64; // 2026-01-01T00:00:00Z
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(ids.clone())),
        Arc::new(StringArray::from(
            ids.iter()
                .map(|i| format!("n{i}{suffix}"))
                .collect::<Vec<_>>(),
        )),
        Arc::new(
            Decimal128Array::from(ids.iter().map(|i| *i as i128 * 100 + 5).collect::<Vec<_>>())
                .with_precision_and_scale(10, 2)
                .unwrap(),
        ),
        Arc::new(
            TimestampMicrosecondArray::from(
                ids.iter().map(|i| base + i * 1_000_000).collect::<Vec<_>>(),
            )
            .with_timezone("+00:00"),
        ),
    ];
    RecordBatch::try_new(schema, columns).unwrap()
}

/// The `after` image an `orders` row with `id` must have in events.
pub fn order_json(id: i64) -> serde_json::Value {
    let ts = chrono::DateTime::from_timestamp(1_767_225_600 + id, 0).unwrap();
    serde_json::json!({
        "id": id,
        "name": format!("n{id}"),
        "amount": format!("{id}.05"),
        "ts": ts.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(),
    })
}
