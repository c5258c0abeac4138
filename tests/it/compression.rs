//! Compressed answers: pages come gzip- or zstd-compressed when the client asks, and
//! decompress to the very page it would get otherwise; event streams are never
//! compressed, so each event reaches the client when it is written.

use std::io::Read;

use crate::fixtures::registered_orders;

async fn get(url: &str, accept: &str, encoding: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new().get(url).header("accept", accept);
    if let Some(encoding) = encoding {
        request = request.header("accept-encoding", encoding);
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn pages_are_compressed_when_asked_and_streams_never() {
    let orders = registered_orders(1..=500).await;
    let page = orders
        .node
        .url(&format!("/v1/tables/{}/changes?limit=500", orders.id));
    for accept in ["application/json", "application/x-ndjson"] {
        let plain = get(&page, accept, None).await;
        assert_eq!(plain.headers().get("content-encoding"), None);
        let plain = plain.bytes().await.unwrap();

        let gzipped = get(&page, accept, Some("gzip")).await;
        assert_eq!(gzipped.headers()["content-encoding"], "gzip", "{accept}");
        let gzipped = gzipped.bytes().await.unwrap();
        let mut unzipped = Vec::new();
        flate2::read::GzDecoder::new(&gzipped[..])
            .read_to_end(&mut unzipped)
            .unwrap();
        assert_eq!(unzipped, plain, "{accept}: the same page");
        assert!(
            gzipped.len() * 4 < plain.len(),
            "{accept}: {} bytes gzipped, {} plain",
            gzipped.len(),
            plain.len()
        );

        let zstd = get(&page, accept, Some("zstd")).await;
        assert_eq!(zstd.headers()["content-encoding"], "zstd", "{accept}");
    }

    let stream = orders
        .node
        .url(&format!("/v1/tables/{}/changes/stream", orders.id));
    let response = get(&stream, "text/event-stream", Some("gzip")).await;
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    assert_eq!(response.headers().get("content-encoding"), None);
    drop(response);
    orders.node.shutdown().await;
}
