//! A page's bytes as the parts they were written in, sent one after another without being
//! copied into one buffer: most of an Arrow page's parts are the decoded columns' own
//! buffers ([`super::ipc_stream`]).
//! Must not reach: `api`, `workers`
//! (delivery renders and sends; the HTTP layer and workers call it).

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};

/// A response body of parts; cheap to clone (the parts are shared).
#[derive(Clone, Debug, Default)]
pub struct PageBody {
    parts: VecDeque<Bytes>,
    len: usize,
    held: usize,
}

impl PageBody {
    /// Bytes of the body.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of memory the body keeps alive: its own parts, and the whole buffers its
    /// shared parts are slices of.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Appends bytes of the body's own (all of their allocation is held).
    pub fn push(&mut self, part: Vec<u8>) {
        let held = part.capacity();
        self.push_shared(part.into(), held);
    }

    /// Appends a slice of a buffer of `held` bytes that the body keeps alive.
    pub fn push_shared(&mut self, part: Bytes, held: usize) {
        self.len += part.len();
        self.held += held;
        if !part.is_empty() {
            self.parts.push_back(part);
        }
    }

    /// Appends the parts of `other`.
    pub fn append(&mut self, other: PageBody) {
        self.len += other.len;
        self.held += other.held;
        self.parts.extend(other.parts);
    }

    /// The whole body in one buffer (a copy).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len);
        for part in &self.parts {
            out.extend_from_slice(part);
        }
        out
    }
}

impl From<Vec<u8>> for PageBody {
    fn from(bytes: Vec<u8>) -> Self {
        let mut body = Self::default();
        body.push(bytes);
        body
    }
}

impl http_body::Body for PageBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let part = self.parts.pop_front();
        if let Some(part) = &part {
            self.len -= part.len();
        }
        Poll::Ready(part.map(|p| Ok(Frame::data(p))))
    }

    fn is_end_stream(&self) -> bool {
        self.parts.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len as u64)
    }
}

#[cfg(test)]
mod tests {
    use http_body::Body as _;
    use http_body_util::BodyExt;

    use super::*;

    #[tokio::test]
    async fn a_body_sends_its_parts_in_order_and_says_its_length() {
        let mut body = PageBody::from(Vec::with_capacity(10));
        body.push(b"ab".to_vec());
        body.push_shared(Bytes::from_static(b"cde"), 1000);
        assert_eq!((body.len(), body.held()), (5, 1012));
        assert_eq!(body.to_vec(), b"abcde");
        assert_eq!(body.size_hint().exact(), Some(5));
        let sent = body.clone().collect().await.unwrap().to_bytes();
        assert_eq!(&sent[..], b"abcde");
        // A clone is sent whole however much of another was.
        let mut first = body.clone();
        let _ = std::pin::pin!(&mut first).frame().await;
        assert_eq!(first.size_hint().exact(), Some(3));
        assert_eq!(body.clone().collect().await.unwrap().to_bytes().len(), 5);
    }
}
