//! Writing an Arrow IPC stream whose record batches' bodies are, for flat columns (numbers,
//! times, booleans, strings, binaries), the columns' own buffers: sent as slices of the
//! decoded arrays instead of copied into a message (arrow's writer copies every buffer into
//! a growing body, which was a fifth of serving an Arrow page). Batches with other columns
//! (structs, lists, maps) are encoded by arrow's writer. The stream reads as any other.
//! Must not reach: `api`, `workers`
//! (delivery renders and sends; the HTTP layer and workers call it).

use arrow::array::{ArrayData, OffsetSizeTrait, RecordBatch};
use arrow::buffer::Buffer;
use arrow::datatypes::{DataType, Schema};
use arrow::error::ArrowError;
use arrow::ipc::writer::{
    CompressionContext, DictionaryTracker, EncodedData, IpcDataGenerator, IpcWriteOptions,
    write_message,
};
use arrow::ipc::{FieldNode, MessageBuilder, MessageHeader, MetadataVersion, RecordBatchBuilder};
use bytes::Bytes;
use flatbuffers::FlatBufferBuilder;

use super::page_body::PageBody;

/// Where each buffer of a body starts (arrow's writer aligns them alike).
const ALIGNMENT: usize = 64;
const VERSION: MetadataVersion = MetadataVersion::V5;
const PADDING: [u8; ALIGNMENT] = [0; ALIGNMENT];
/// The end of a stream: a continuation marker and a message of no bytes.
const END_OF_STREAM: [u8; 8] = [0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0];

/// `batches` of `schema` as an IPC stream.
pub fn write_stream(schema: &Schema, batches: &[RecordBatch]) -> Result<PageBody, ArrowError> {
    let options = IpcWriteOptions::try_new(ALIGNMENT, false, VERSION)?;
    let generator = IpcDataGenerator::default();
    let mut tracker = DictionaryTracker::new(false);
    let mut context = CompressionContext::default();
    let mut body = PageBody::default();
    let encoded = generator.schema_to_bytes_with_dictionary_tracker(schema, &mut tracker, &options);
    push_message(&mut body, encoded, &options)?;
    for batch in batches {
        match SharedBody::of(batch) {
            Some(shared) => {
                let message = shared.message(batch.num_rows());
                push_message(&mut body, message, &options)?;
                body.append(shared.body);
            }
            None => {
                let (dictionaries, message) =
                    generator.encode(batch, &mut tracker, &options, &mut context)?;
                for encoded in dictionaries.into_iter().chain([message]) {
                    push_message(&mut body, encoded, &options)?;
                }
            }
        }
    }
    body.push_shared(Bytes::from_static(&END_OF_STREAM), 0);
    Ok(body)
}

/// Appends `encoded`'s framed header, then its body as it is (not copied).
fn push_message(
    body: &mut PageBody,
    encoded: EncodedData,
    options: &IpcWriteOptions,
) -> Result<(), ArrowError> {
    let EncodedData {
        ipc_message,
        arrow_data,
    } = encoded;
    let mut head = Vec::with_capacity(ipc_message.len() + 16);
    let header = EncodedData {
        ipc_message,
        arrow_data: Vec::new(),
    };
    write_message(&mut head, header, options)?;
    body.push(head);
    body.push(arrow_data);
    Ok(())
}

/// How a flat column's values are laid out.
enum Values {
    /// So many bytes per value.
    Fixed(usize),
    /// A bit per value.
    Bits,
    /// Offsets of 4 (or, large, 8) bytes into a buffer of bytes.
    Offsets { large: bool },
}

impl Values {
    fn of(data_type: &DataType) -> Option<Self> {
        match data_type {
            DataType::Boolean => Some(Self::Bits),
            DataType::Utf8 | DataType::Binary => Some(Self::Offsets { large: false }),
            DataType::LargeUtf8 | DataType::LargeBinary => Some(Self::Offsets { large: true }),
            DataType::FixedSizeBinary(width) => Some(Self::Fixed(usize::try_from(*width).ok()?)),
            other => other.primitive_width().map(Self::Fixed),
        }
    }
}

/// A record batch's body as slices of its columns' buffers, with the nodes and buffer
/// descriptions of its message.
#[derive(Default)]
struct SharedBody {
    body: PageBody,
    nodes: Vec<FieldNode>,
    buffers: Vec<arrow::ipc::Buffer>,
}

impl SharedBody {
    /// `batch`'s body, if it has rows and all its columns are flat.
    fn of(batch: &RecordBatch) -> Option<Self> {
        if batch.num_rows() == 0 {
            return None;
        }
        let mut body = Self::default();
        for column in batch.columns() {
            let data = column.to_data();
            let values = Values::of(data.data_type())?;
            body.column(&data, values);
        }
        Some(body)
    }

    fn column(&mut self, data: &ArrayData, values: Values) {
        let (offset, len) = (data.offset(), data.len());
        let null_count = data.null_count();
        self.nodes
            .push(FieldNode::new(len as i64, null_count as i64));
        match data.nulls() {
            // A column without nulls may send no validity (Message.fbs, FieldNode).
            Some(nulls) if null_count > 0 => self.buffer(nulls.inner().sliced()),
            _ => self.buffer(Buffer::from(Vec::<u8>::new())),
        }
        let buffer = &data.buffers()[0];
        match values {
            Values::Fixed(width) => {
                self.buffer(buffer.slice_with_length(offset * width, len * width))
            }
            Values::Bits => self.buffer(buffer.bit_slice(offset, len)),
            Values::Offsets { large: false } => self.offsets::<i32>(data),
            Values::Offsets { large: true } => self.offsets::<i64>(data),
        }
    }

    /// The offsets of `data`'s values, starting from 0, and the bytes they point into.
    fn offsets<O: OffsetSizeTrait>(&mut self, data: &ArrayData) {
        let (offset, len) = (data.offset(), data.len());
        let buffer = &data.buffers()[0];
        let offsets = &buffer.typed_data::<O>()[offset..=offset + len];
        let (first, last) = (offsets[0], offsets[len]);
        self.buffer(match first.as_usize() {
            0 => buffer.slice_with_length(offset * size_of::<O>(), (len + 1) * size_of::<O>()),
            _ => offsets.iter().map(|&o| o - first).collect(),
        });
        let bytes = &data.buffers()[1];
        self.buffer(bytes.slice_with_length(first.as_usize(), (last - first).as_usize()));
    }

    /// Appends `buffer`, padded to [`ALIGNMENT`]. A buffer that is at least a quarter of
    /// the allocation it keeps alive is shared; a smaller slice is copied, so that a page
    /// does not hold whole decoded batches for a few of their rows.
    fn buffer(&mut self, buffer: Buffer) {
        let len = buffer.len();
        let whole = buffer.capacity();
        self.buffers
            .push(arrow::ipc::Buffer::new(self.body.len() as i64, len as i64));
        if whole > 0 && len * 4 >= whole {
            self.body
                .push_shared(Bytes::from_owner(Shared(buffer)), whole);
        } else {
            self.body.push(buffer.to_vec());
        }
        let padding = (ALIGNMENT - len % ALIGNMENT) % ALIGNMENT;
        self.body
            .push_shared(Bytes::from_static(&PADDING[..padding]), 0);
    }

    /// The message describing this body, for a batch of `rows` rows.
    fn message(&self, rows: usize) -> EncodedData {
        let mut fbb = FlatBufferBuilder::new();
        let nodes = fbb.create_vector(&self.nodes);
        let buffers = fbb.create_vector(&self.buffers);
        let mut batch = RecordBatchBuilder::new(&mut fbb);
        batch.add_length(rows as i64);
        batch.add_nodes(nodes);
        batch.add_buffers(buffers);
        let batch = batch.finish().as_union_value();
        let mut message = MessageBuilder::new(&mut fbb);
        message.add_version(VERSION);
        message.add_header_type(MessageHeader::RecordBatch);
        message.add_bodyLength(self.body.len() as i64);
        message.add_header(batch);
        let message = message.finish();
        fbb.finish(message, None);
        EncodedData {
            ipc_message: fbb.finished_data().to_vec(),
            arrow_data: Vec::new(),
        }
    }
}

/// An arrow buffer as the owner of a [`Bytes`].
struct Shared(Buffer);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        self.0.as_slice()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{
        Array, ArrayRef, BinaryArray, BooleanArray, Decimal128Array, DictionaryArray,
        FixedSizeBinaryArray, Float64Array, Int8Array, Int32Array, Int64Array, LargeStringArray,
        ListArray, StringArray, StructArray, TimestampMicrosecondArray, new_null_array,
    };
    use arrow::datatypes::{Field, Int32Type};
    use arrow::ipc::reader::StreamReader;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    fn read(body: &PageBody) -> Vec<RecordBatch> {
        let bytes = body.to_vec();
        assert_eq!(bytes.len(), body.len());
        StreamReader::try_new(std::io::Cursor::new(bytes), None)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    fn batch(columns: Vec<ArrayRef>) -> RecordBatch {
        let fields: Vec<Field> = columns
            .iter()
            .enumerate()
            .map(|(i, c)| Field::new(format!("c{i}"), c.data_type().clone(), true))
            .collect();
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
    }

    /// Columns of every flat type, `len` rows, about a quarter of them null.
    fn flat_columns(rng: &mut StdRng, len: usize) -> Vec<ArrayRef> {
        let mut value =
            |bound: i64| (rng.random_range(0..4) > 0).then(|| rng.random_range(0..bound));
        let ints: Vec<Option<i64>> = (0..len).map(|_| value(1000)).collect();
        let small: Vec<Option<i64>> = (0..len).map(|_| value(5)).collect();
        vec![
            Arc::new(Int64Array::from(ints.clone())),
            Arc::new(Int32Array::from_iter(
                small.iter().map(|v| v.map(|v| v as i32)),
            )),
            Arc::new(Int8Array::from_iter(
                small.iter().map(|v| v.map(|v| v as i8)),
            )),
            Arc::new(Float64Array::from_iter(
                ints.iter().map(|v| v.map(|v| v as f64 / 3.0)),
            )),
            Arc::new(BooleanArray::from_iter(
                small.iter().map(|v| v.map(|v| v % 2 == 0)),
            )),
            Arc::new(TimestampMicrosecondArray::from(ints.clone()).with_timezone("UTC")),
            Arc::new(
                Decimal128Array::from_iter(ints.iter().map(|v| v.map(i128::from)))
                    .with_precision_and_scale(20, 2)
                    .unwrap(),
            ),
            Arc::new(StringArray::from_iter(
                small.iter().map(|v| v.map(|v| "s".repeat(v as usize))),
            )),
            Arc::new(LargeStringArray::from_iter(
                ints.iter().map(|v| v.map(|v| v.to_string())),
            )),
            Arc::new(BinaryArray::from_iter(
                small.iter().map(|v| v.map(|v| vec![7u8; v as usize])),
            )),
            Arc::new(
                FixedSizeBinaryArray::try_from_sparse_iter_with_size(
                    ints.iter().map(|v| v.map(|v| v.to_le_bytes())),
                    8,
                )
                .unwrap(),
            ),
            new_null_array(&DataType::Utf8, len),
            new_null_array(&DataType::Int64, len),
        ]
    }

    #[test]
    fn slices_of_flat_columns_read_back_as_they_were_written() {
        let mut rng = StdRng::seed_from_u64(0x1bc);
        for _ in 0..200 {
            let len = rng.random_range(1..400);
            let columns = flat_columns(&mut rng, len);
            let whole = batch(columns);
            // Batches that start anywhere (within a byte of validity, past the first
            // string), some of them a small part of what they are sliced from.
            let batches: Vec<RecordBatch> = (0..rng.random_range(1..4))
                .map(|_| {
                    let first = rng.random_range(0..len);
                    whole.slice(first, rng.random_range(1..=len - first))
                })
                .collect();
            let body = write_stream(&whole.schema(), &batches).unwrap();
            assert_eq!(read(&body), batches);
        }
    }

    #[test]
    fn batches_with_nested_or_dictionary_columns_are_written_by_arrow() {
        let ints: ArrayRef = Arc::new(Int32Array::from(vec![Some(1), None, Some(3), Some(4)]));
        let list: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
            Some(vec![Some(1), None]),
            None,
            Some(vec![]),
            Some(vec![Some(4)]),
        ]));
        let strukt: ArrayRef = Arc::new(StructArray::from(vec![(
            Arc::new(Field::new("x", DataType::Int32, true)),
            ints.clone(),
        )]));
        let dictionary: ArrayRef = Arc::new(
            vec![Some("a"), Some("b"), None, Some("a")]
                .into_iter()
                .collect::<DictionaryArray<Int32Type>>(),
        );
        let nested = batch(vec![ints.clone(), list, strukt, dictionary]);
        let batches = vec![nested.slice(1, 3), nested.slice(0, 1)];
        let body = write_stream(&nested.schema(), &batches).unwrap();
        assert_eq!(read(&body), batches);
        // No batches: the schema alone; and a batch of no rows.
        let flat = batch(vec![ints]);
        for batches in [vec![], vec![flat.slice(2, 0)]] {
            assert_eq!(
                read(&write_stream(&flat.schema(), &batches).unwrap()),
                batches
            );
        }
    }

    #[test]
    fn a_page_shares_the_buffers_it_is_most_of_and_copies_small_slices() {
        let rows = 100_000;
        let values: ArrayRef = Arc::new(Int64Array::from_iter_values(0..rows));
        let whole = batch(vec![values]);
        let decoded = 8 * rows as usize;
        // All of it: the column's buffer is sent as it is, and held.
        let body = write_stream(&whole.schema(), std::slice::from_ref(&whole)).unwrap();
        assert!(
            body.held() >= decoded && body.held() < decoded + 4096,
            "{}",
            body.held()
        );
        // A hundred rows of it: copied, so the page holds what it sends.
        let body = write_stream(&whole.schema(), &[whole.slice(5000, 100)]).unwrap();
        assert!(body.held() < 4096, "{}", body.held());
        assert_eq!(read(&body), vec![whole.slice(5000, 100)]);
    }
}
