//! Buffers of response bodies, handed from a sent body to the next one instead of back to
//! the allocator.
//!
//! A page is megabytes. A buffer allocated afresh is memory the kernel maps and zeroes
//! page by page as the body is written (a tenth of an NDJSON page's CPU); a buffer kept
//! from a body already sent is mapped. A node keeps at most [`KEPT_BYTES`].
//! Must not reach: `api`, `workers`
//! (delivery renders and sends; the HTTP layer and workers call it).

use std::sync::Mutex;

use bytes::Bytes;

/// Bytes of buffers a node keeps, at most.
const KEPT_BYTES: usize = 32 << 20;
/// Buffers larger than this (a page of very wide rows) go back to the allocator.
const LARGEST_KEPT: usize = 16 << 20;
/// Buffers smaller than this are cheap to allocate; not worth keeping.
const SMALLEST_KEPT: usize = 64 << 10;

/// The buffers of this node's bodies.
static BODIES: Pool = Pool::new();

/// An empty buffer for a body of about `capacity` bytes: one kept from a sent body if
/// there is one, grown if it is smaller.
pub fn buffer(capacity: usize) -> Vec<u8> {
    BODIES.take(capacity)
}

/// `body` as the bytes of a response; its buffer is kept for another body once the last
/// clone of them is dropped.
pub fn into_bytes(body: Vec<u8>) -> Bytes {
    BODIES.sent(body)
}

/// Buffers of sent bodies, emptied.
struct Pool(Mutex<Kept>);

struct Kept {
    buffers: Vec<Vec<u8>>,
    /// Their capacities, summed.
    bytes: usize,
}

impl Pool {
    const fn new() -> Self {
        Self(Mutex::new(Kept {
            buffers: Vec::new(),
            bytes: 0,
        }))
    }

    fn take(&self, capacity: usize) -> Vec<u8> {
        let kept = {
            let mut kept = self.0.lock().expect("kept buffers");
            let buffer = kept.buffers.pop();
            if let Some(b) = &buffer {
                kept.bytes -= b.capacity();
            }
            buffer
        };
        match kept {
            Some(mut buffer) => {
                buffer.reserve(capacity);
                buffer
            }
            None => Vec::with_capacity(capacity),
        }
    }

    fn sent(&'static self, body: Vec<u8>) -> Bytes {
        Bytes::from_owner(Sent(body, self))
    }

    fn keep(&self, mut buffer: Vec<u8>) {
        let size = buffer.capacity();
        if !(SMALLEST_KEPT..=LARGEST_KEPT).contains(&size) {
            return;
        }
        let mut kept = self.0.lock().expect("kept buffers");
        if kept.bytes + size <= KEPT_BYTES {
            buffer.clear();
            kept.bytes += size;
            kept.buffers.push(buffer);
        }
    }
}

/// A body being sent; its buffer goes back to its pool when it is dropped.
struct Sent(Vec<u8>, &'static Pool);

impl AsRef<[u8]> for Sent {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Sent {
    fn drop(&mut self) {
        self.1.keep(std::mem::take(&mut self.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sent_body_leaves_its_buffer_to_the_next_and_the_kept_bytes_stay_bounded() {
        let pool: &'static Pool = Box::leak(Box::new(Pool::new()));
        let mut body = pool.take(1 << 20);
        body.extend_from_slice(b"events");
        let address = body.as_ptr();
        let bytes = pool.sent(body);
        let clone = bytes.clone();
        drop(bytes);
        // Still being sent by the clone.
        assert!(pool.0.lock().unwrap().buffers.is_empty());
        assert_eq!(&clone[..], b"events");
        drop(clone);
        let again = pool.take(1 << 10);
        assert!(again.is_empty());
        assert_eq!(again.as_ptr(), address, "not the sent body's buffer");
        assert!(again.capacity() >= 1 << 20);

        // Kept up to the bound, then freed.
        let sent: Vec<Bytes> = (0..2 * KEPT_BYTES / LARGEST_KEPT + 2)
            .map(|_| pool.sent(Vec::with_capacity(LARGEST_KEPT)))
            .collect();
        drop(sent);
        let kept = pool.0.lock().unwrap();
        assert_eq!(kept.buffers.len(), KEPT_BYTES / LARGEST_KEPT);
        assert_eq!(kept.bytes, KEPT_BYTES);
        drop(kept);
        // Too large or too small: not kept.
        let pool: &'static Pool = Box::leak(Box::new(Pool::new()));
        drop(pool.sent(Vec::with_capacity(LARGEST_KEPT + 1)));
        drop(pool.sent(Vec::with_capacity(SMALLEST_KEPT - 1)));
        assert!(pool.0.lock().unwrap().buffers.is_empty());
    }
}
