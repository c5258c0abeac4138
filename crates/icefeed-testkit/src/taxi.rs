//! A table shaped like the NYC Yellow Taxi 2023 data, with synthetic rows, so the demo and
//! the benchmark exercise realistic column types, nulls and day partitions without a download.
//! Must not reach: the rest of the crate (schema and rows only, no I/O).

use std::sync::Arc;

use arrow::array::{
    ArrayRef, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use arrow::buffer::{Buffer, NullBuffer, OffsetBuffer};
use arrow::datatypes::SchemaRef as ArrowSchemaRef;
use iceberg::spec::{NestedField, PrimitiveType, Schema, Transform, Type, UnboundPartitionSpec};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Field id of `trip_id`, the table's identifier field.
pub const TRIP_ID_FIELD_ID: i32 = 1;
/// Field id of `tpep_pickup_datetime`, the partition source.
pub const PICKUP_FIELD_ID: i32 = 3;
/// 2023-01-01T00:00:00 in microseconds since the epoch, where generated pickups start.
pub const START_MICROS: i64 = 1_672_531_200_000_000;

const DAY_MICROS: i64 = 86_400_000_000;
const MINUTE_MICROS: i64 = 60_000_000;
/// Share of rows whose passenger/ratecode/flag/surcharge columns are null, as in the real
/// data (where those rows come from street-hail records without a meter upload).
const NULL_RATE: f64 = 0.025;

/// The Iceberg schema: `trip_id` (required identifier) plus the 19 Yellow Taxi columns.
pub fn schema() -> Schema {
    use PrimitiveType::{Double, Int, Long, Timestamp};
    let opt = |id, name: &str, t| Arc::new(NestedField::optional(id, name, Type::Primitive(t)));
    let mut fields = vec![
        Arc::new(NestedField::required(
            TRIP_ID_FIELD_ID,
            "trip_id",
            Type::Primitive(Long),
        )),
        opt(2, "VendorID", Int),
        opt(PICKUP_FIELD_ID, "tpep_pickup_datetime", Timestamp),
        opt(4, "tpep_dropoff_datetime", Timestamp),
        opt(5, "passenger_count", Long),
        opt(6, "trip_distance", Double),
        opt(7, "RatecodeID", Long),
        opt(8, "store_and_fwd_flag", PrimitiveType::String),
        opt(9, "PULocationID", Int),
        opt(10, "DOLocationID", Int),
        opt(11, "payment_type", Long),
    ];
    for (i, name) in MONEY_COLUMNS.iter().enumerate() {
        fields.push(opt(12 + i as i32, name, Double));
    }
    Schema::builder()
        .with_schema_id(0)
        .with_identifier_field_ids([TRIP_ID_FIELD_ID])
        .with_fields(fields)
        .build()
        .expect("taxi schema is valid")
}

const MONEY_COLUMNS: [&str; 9] = [
    "fare_amount",
    "extra",
    "mta_tax",
    "tip_amount",
    "tolls_amount",
    "improvement_surcharge",
    "total_amount",
    "congestion_surcharge",
    "airport_fee",
];

/// `day(tpep_pickup_datetime)`, the layout a real taxi lake would use.
pub fn partition_spec() -> UnboundPartitionSpec {
    UnboundPartitionSpec::builder()
        .add_partition_field(PICKUP_FIELD_ID, "tpep_pickup_datetime_day", Transform::Day)
        .expect("taxi partition spec is valid")
        .build()
}

/// The Arrow schema the iceberg writer expects for [`schema`] (with field-id metadata).
pub fn arrow_schema() -> ArrowSchemaRef {
    Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema()).expect("taxi schema converts"))
}

/// Deterministic source of taxi rows: same seed and call sequence, same batches.
#[derive(Debug, Clone)]
pub struct TaxiGenerator {
    rng: SmallRng,
    next_trip_id: i64,
    span_micros: i64,
    schema: ArrowSchemaRef,
}

impl TaxiGenerator {
    /// Rows get ids from `first_trip_id` on and pickups spread over `days` days from 2023-01-01.
    pub fn new(seed: u64, first_trip_id: i64, days: u32) -> Self {
        Self {
            rng: SmallRng::seed_from_u64(seed),
            next_trip_id: first_trip_id,
            span_micros: i64::from(days.max(1)) * DAY_MICROS,
            schema: arrow_schema(),
        }
    }

    /// The id the next generated row will get.
    pub fn next_trip_id(&self) -> i64 {
        self.next_trip_id
    }

    /// The Arrow schema of generated batches.
    pub fn arrow_schema(&self) -> ArrowSchemaRef {
        self.schema.clone()
    }

    /// Generates the next `rows` rows.
    pub fn next_batch(&mut self, rows: usize) -> RecordBatch {
        // Plain vectors turned into arrays at the end: no per-row allocation, and the hot
        // loop does not depend on how well arrow's builders were optimised.
        let rng = &mut self.rng;
        let first_id = self.next_trip_id;
        self.next_trip_id += rows as i64;
        let mut metered = Vec::with_capacity(rows);
        let mut vendor = Vec::with_capacity(rows);
        let mut pickup = Vec::with_capacity(rows);
        let mut dropoff = Vec::with_capacity(rows);
        let mut passengers = Vec::with_capacity(rows);
        let mut distance = Vec::with_capacity(rows);
        let mut ratecode = Vec::with_capacity(rows);
        let mut flag_offsets = Vec::with_capacity(rows + 1);
        let mut flag_bytes = Vec::with_capacity(rows);
        let mut pu = Vec::with_capacity(rows);
        let mut du = Vec::with_capacity(rows);
        let mut payment = Vec::with_capacity(rows);
        let mut money: [Vec<f64>; 9] = std::array::from_fn(|_| Vec::with_capacity(rows));
        flag_offsets.push(0i32);

        for _ in 0..rows {
            let meter = !rng.random_bool(NULL_RATE);
            metered.push(meter);
            vendor.push(if rng.random_bool(0.73) { 2i32 } else { 1 });

            let start = START_MICROS + rng.random_range(0..self.span_micros);
            // Exponential distance with a 3.4 mile mean, like the real trip mix.
            let miles = cents(-(1.0 - rng.random::<f64>()).ln() * 3.4);
            let minutes = miles * 3.0 + rng.random_range(2.0..12.0);
            pickup.push(start);
            dropoff.push(start + (minutes * MINUTE_MICROS as f64) as i64);
            distance.push(miles);

            let airport = rng.random_bool(0.08);
            let r: f64 = rng.random();
            passengers.push(match r {
                _ if !meter => 0,
                _ if r < 0.72 => 1,
                _ if r < 0.87 => 2,
                _ if r < 0.92 => 3,
                _ if r < 0.98 => rng.random_range(4..=6),
                _ => 0,
            });
            ratecode.push(if airport && rng.random_bool(0.4) {
                2i64
            } else {
                1
            });
            if meter {
                flag_bytes.push(if rng.random_bool(0.005) { b'Y' } else { b'N' });
            }
            flag_offsets.push(flag_bytes.len() as i32);
            pu.push(if airport {
                132i32
            } else {
                rng.random_range(1..=265)
            });
            du.push(rng.random_range(1..=265i32));
            let kind: f64 = rng.random();
            let pay: i64 = match kind {
                _ if !meter => 0,
                _ if kind < 0.78 => 1,
                _ if kind < 0.97 => 2,
                _ => rng.random_range(3..=4),
            };
            payment.push(pay);

            let fare = cents(3.0 + 1.75 * miles + 0.7 * minutes);
            let extra = [0.0, 1.0, 2.5, 5.0][rng.random_range(0..4)];
            let tip = if pay == 1 {
                cents(fare * rng.random_range(0.1..0.3))
            } else {
                0.0
            };
            let tolls = if rng.random_bool(0.06) { 6.94 } else { 0.0 };
            let congestion = if rng.random_bool(0.85) { 2.5 } else { 0.0 };
            let airport_fee = if airport { 1.25 } else { 0.0 };
            let total = cents(fare + extra + 0.5 + tip + tolls + 1.0 + congestion + airport_fee);
            let values = [
                fare,
                extra,
                0.5,
                tip,
                tolls,
                1.0,
                total,
                congestion,
                airport_fee,
            ];
            for (column, value) in money.iter_mut().zip(values) {
                column.push(value);
            }
        }

        // Un-metered rows lack passenger count, rate code, flag and the last two surcharges.
        let nulls = Some(NullBuffer::from(metered));
        let flags = StringArray::new(
            OffsetBuffer::new(flag_offsets.into()),
            Buffer::from_vec(flag_bytes),
            nulls.clone(),
        );
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(first_id..self.next_trip_id)),
            Arc::new(Int32Array::new(vendor.into(), None)),
            Arc::new(TimestampMicrosecondArray::new(pickup.into(), None)),
            Arc::new(TimestampMicrosecondArray::new(dropoff.into(), None)),
            Arc::new(Int64Array::new(passengers.into(), nulls.clone())),
            Arc::new(Float64Array::new(distance.into(), None)),
            Arc::new(Int64Array::new(ratecode.into(), nulls.clone())),
            Arc::new(flags),
            Arc::new(Int32Array::new(pu.into(), None)),
            Arc::new(Int32Array::new(du.into(), None)),
            Arc::new(Int64Array::new(payment.into(), None)),
        ];
        for (i, column) in money.into_iter().enumerate() {
            let column_nulls = if i >= 7 { nulls.clone() } else { None };
            columns.push(Arc::new(Float64Array::new(column.into(), column_nulls)));
        }
        RecordBatch::try_new(self.schema.clone(), columns).expect("columns match the taxi schema")
    }
}

fn cents(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Int64Type, TimestampMicrosecondType};

    use super::*;

    #[test]
    fn generated_batch_matches_schema() {
        let mut generator = TaxiGenerator::new(42, 1000, 7);
        let batch = generator.next_batch(10_000);
        assert_eq!(batch.schema(), arrow_schema());
        assert_eq!(batch.num_columns(), 20);
        assert_eq!(batch.num_rows(), 10_000);
        let ids = batch.column(0).as_primitive::<Int64Type>();
        assert_eq!(ids.null_count(), 0);
        assert!(ids.values().iter().copied().eq(1000..11_000));
        assert_eq!(generator.next_trip_id(), 11_000);

        let pickups = batch.column(2).as_primitive::<TimestampMicrosecondType>();
        let (lo, hi) = (START_MICROS, START_MICROS + 7 * DAY_MICROS);
        assert!(pickups.values().iter().all(|t| (lo..hi).contains(t)));
        // Nulls show up where the real data has them, but rarely.
        let passenger_nulls = batch.column(4).null_count();
        assert!(
            passenger_nulls > 0 && passenger_nulls < 1000,
            "{passenger_nulls}"
        );

        let next = generator.next_batch(5);
        assert_eq!(next.column(0).as_primitive::<Int64Type>().value(0), 11_000);
        // Same seed, same rows.
        assert_eq!(TaxiGenerator::new(42, 1000, 7).next_batch(10_000), batch);
    }

    #[test]
    fn schema_has_trip_id_identifier() {
        let schema = schema();
        assert_eq!(schema.identifier_field_ids().collect::<Vec<_>>(), vec![1]);
        assert_eq!(schema.as_struct().fields().len(), 20);
        let bound = partition_spec().bind(schema).unwrap();
        assert_eq!(bound.fields()[0].source_id, PICKUP_FIELD_ID);
    }
}
