//! What the benchmark binaries share besides data: logging on request, and reading the
//! headers of a page answer.

/// Logs as `icefeed serve` does when `RUST_LOG` is set; benchmarks are quiet otherwise.
pub fn init_logging() {
    if std::env::var_os("RUST_LOG").is_some() {
        icefeed::telemetry::init_logging(false);
    }
}

/// Header `name` of a page answer, as text; `what` names the page in the error.
pub fn page_header(response: &reqwest::Response, name: &str, what: &str) -> anyhow::Result<String> {
    use anyhow::Context;
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .with_context(|| format!("{what} page without {name}"))
}

/// `50000` → `50K`, `1000000` → `1M`.
pub fn short(n: u64) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{}K", n / 1_000),
        n => n.to_string(),
    }
}
