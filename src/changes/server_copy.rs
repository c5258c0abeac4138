//! Server-side copies: when the change store is the S3 bucket a data file lives in, at
//! the same endpoint, an insert segment is made by the S3 server (CopyObject) and the
//! rows never pass through the node. `object_store` copies within its own bucket only,
//! so a change store in another bucket streams copies through the node.
//! Must not reach: the rest of the crate.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path;
use url::Url;

/// CopyObject copies objects up to 5 GiB; larger ones stream through the node.
pub const MAX_SERVER_COPY: u64 = 5 << 30;

/// The S3 bucket and endpoint a change store lives in.
#[derive(Debug)]
pub struct S3Home {
    bucket: String,
    endpoint: Option<Endpoint>,
    /// Set once the server refused a copy (the change store's credentials may not read
    /// the table's files): from then on copies stream.
    refused: AtomicBool,
}

/// An endpoint URL reduced to what names a server: scheme, host, port.
#[derive(Debug, PartialEq, Eq)]
struct Endpoint(String, String, Option<u16>);

impl Endpoint {
    fn parse(url: &str) -> Option<Self> {
        let url = Url::parse(url).ok()?;
        Some(Self(
            url.scheme().to_string(),
            url.host_str()?.to_ascii_lowercase(),
            url.port_or_known_default(),
        ))
    }
}

impl S3Home {
    /// The home of a change store at `url` opened with `options`, if it is on S3.
    pub fn of(url: &Url, options: &BTreeMap<String, String>) -> Option<Self> {
        if !matches!(url.scheme(), "s3" | "s3a") {
            return None;
        }
        let builder =
            options
                .iter()
                .fold(AmazonS3Builder::new(), |builder, (key, value)| {
                    match key.to_ascii_lowercase().parse() {
                        Ok(key) => builder.with_config(key, value),
                        Err(_) => builder,
                    }
                });
        let endpoint = match builder.get_config_value(&AmazonS3ConfigKey::Endpoint) {
            Some(endpoint) => Some(Endpoint::parse(&endpoint)?),
            None => None,
        };
        Some(Self {
            bucket: url.host_str()?.to_string(),
            endpoint,
            refused: AtomicBool::new(false),
        })
    }

    /// The key of `source` in this bucket, if the server can copy it from there: it is
    /// an `s3://` or `s3a://` location in the same bucket, read through the same endpoint
    /// (`props` are the table's FileIO properties; both without one means AWS, whose
    /// bucket names are global) and small enough for one CopyObject.
    pub fn source_key(
        &self,
        source: &str,
        size: u64,
        props: &HashMap<String, String>,
    ) -> Option<Path> {
        if size > MAX_SERVER_COPY || self.refused.load(Ordering::Relaxed) {
            return None;
        }
        let rest = source
            .strip_prefix("s3://")
            .or_else(|| source.strip_prefix("s3a://"))?;
        let (bucket, key) = rest.split_once('/')?;
        let endpoint = match props.get("s3.endpoint") {
            Some(endpoint) => Some(Endpoint::parse(endpoint)?),
            None => None,
        };
        if bucket != self.bucket || endpoint != self.endpoint {
            return None;
        }
        // A key object_store would spell differently is not copied: it would name
        // another object.
        let path = Path::parse(key).ok()?;
        (path.as_ref() == key).then_some(path)
    }

    /// The server refused a copy: copies stream from now on.
    pub fn refuse(&self) {
        self.refused.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home(location: &str, endpoint: Option<&str>) -> Option<S3Home> {
        let options = endpoint
            .map(|e| BTreeMap::from([("aws_endpoint".to_string(), e.to_string())]))
            .unwrap_or_default();
        S3Home::of(&Url::parse(location).unwrap(), &options)
    }

    fn props(endpoint: Option<&str>) -> HashMap<String, String> {
        endpoint
            .map(|e| HashMap::from([("s3.endpoint".to_string(), e.to_string())]))
            .unwrap_or_default()
    }

    const FILE: &str = "s3://lake/db/t/data/part=2/00000-0.parquet";

    #[test]
    fn only_files_of_the_same_bucket_at_the_same_endpoint_are_copied_by_the_server() {
        let local = home("s3://lake/changes", Some("http://127.0.0.1:8333/")).unwrap();
        let at = |endpoint| local.source_key(FILE, 1 << 20, &props(endpoint));
        assert_eq!(
            at(Some("http://127.0.0.1:8333")).unwrap().as_ref(),
            "db/t/data/part=2/00000-0.parquet"
        );
        assert!(at(Some("HTTP://127.0.0.1:8333/ignored")).is_some());
        assert!(at(Some("http://127.0.0.1:9000")).is_none());
        assert!(at(Some("http://localhost:8333")).is_none());
        assert!(at(None).is_none());
        let s3a = "s3a://lake/db/t/data/f.parquet";
        assert!(
            local
                .source_key(s3a, 1, &props(Some("http://127.0.0.1:8333")))
                .is_some()
        );

        let other_bucket = home("s3://changes/icefeed", Some("http://127.0.0.1:8333")).unwrap();
        assert!(
            other_bucket
                .source_key(FILE, 1, &props(Some("http://127.0.0.1:8333")))
                .is_none()
        );

        let aws = home("s3://lake/changes", None).unwrap();
        assert!(aws.source_key(FILE, 1, &props(None)).is_some());
        assert!(
            aws.source_key(FILE, MAX_SERVER_COPY + 1, &props(None))
                .is_none()
        );
        assert!(
            aws.source_key("gs://lake/f.parquet", 1, &props(None))
                .is_none()
        );
        assert!(aws.source_key("s3://lake/a//b", 1, &props(None)).is_none());
        aws.refuse();
        assert!(aws.source_key(FILE, 1, &props(None)).is_none());
    }

    #[test]
    fn stores_off_s3_have_no_home() {
        assert!(home("gs://lake/changes", None).is_none());
        assert!(home("memory://", None).is_none());
        assert!(home("s3://lake/changes", Some("not a url")).is_none());
    }
}
