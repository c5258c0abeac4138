//! What the benchmark binaries share besides data: logging on request, and reading the
//! headers of a page answer.

/// The PostgreSQL server benchmarks create their databases on: `ICEFEED_BENCH_DATABASE_URL`,
/// else the one `scripts/postgres.sh` sets up.
pub fn admin_url() -> String {
    std::env::var("ICEFEED_BENCH_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://icefeed:icefeed@127.0.0.1:5432/icefeed".to_string())
}

/// A multi-threaded runtime, as a node has.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}

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

/// A rate with a thousands suffix, e.g. `1.23M/s`.
pub fn per_second(rate: f64) -> String {
    match rate {
        r if r >= 1e6 => format!("{:.2}M/s", r / 1e6),
        r if r >= 1e3 => format!("{:.1}k/s", r / 1e3),
        r => format!("{r:.0}/s"),
    }
}

/// A `kB` field of `/proc/self/status` (`VmRSS:`, `VmHWM:`).
pub fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Resets this process's peak RSS (`VmHWM`) to its current RSS (Linux, on "5"); whether
/// it could.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}
