//! The `icefeed` binary: subcommands only.
//! Must not reach: `workers`, `changelog`, `delivery` (a node's work starts in `app`).

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use icefeed::cli;
use icefeed::config::Settings;

#[derive(Parser)]
#[command(
    name = "icefeed",
    version,
    about = "Change feeds of Apache Iceberg tables over HTTP"
)]
struct Cli {
    /// TOML settings file (values in ICEFEED_* environment variables win).
    #[arg(long, global = true, env = "ICEFEED_CONFIG")]
    config: Option<PathBuf>,
    /// Log JSON lines instead of text.
    #[arg(long, global = true, env = "ICEFEED_LOG_JSON")]
    log_json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a node: the HTTP API and the scheduler.
    #[command(long_about = SERVE_HELP)]
    Serve,
    /// Apply database migrations and exit.
    Migrate,
    /// Print the OpenAPI document.
    Openapi,
    /// A local demo table written with the iceberg crate.
    #[command(subcommand)]
    Demo(DemoCommand),
    /// Registered tables of a running node (over HTTP: --url, --token).
    Tables {
        #[command(flatten)]
        remote: cli::Remote,
        #[command(subcommand)]
        command: cli::TablesCommand,
    },
    /// Subscriptions of a running node.
    Subscriptions {
        #[command(flatten)]
        remote: cli::Remote,
        #[command(subcommand)]
        command: cli::SubscriptionsCommand,
    },
    /// API tokens of a running node (with auth on).
    Tokens {
        #[command(flatten)]
        remote: cli::Remote,
        #[command(subcommand)]
        command: cli::TokensCommand,
    },
    /// Follow a table's or a subscription's events as they are published.
    Tail {
        #[command(flatten)]
        remote: cli::Remote,
        #[command(flatten)]
        args: cli::TailArgs,
    },
}

#[derive(Subcommand)]
enum DemoCommand {
    /// Create the demo table (if missing) and print the body that registers it.
    Init {
        /// Directory holding the demo catalog and warehouse.
        #[arg(long, default_value = ".icefeed/demo")]
        dir: PathBuf,
    },
    /// Append rows to the demo table and print the new snapshot id.
    Append {
        /// Directory holding the demo catalog and warehouse.
        #[arg(long, default_value = ".icefeed/demo")]
        dir: PathBuf,
        /// Rows to append.
        #[arg(long, default_value_t = 10)]
        rows: usize,
    },
}

/// What `icefeed serve --help` says beyond the one line: the settings that matter first.
const SERVE_HELP: &str = "Run a node: the HTTP API, the dashboard at /ui and the scheduler.

Settings come from defaults, then the --config TOML file, then ICEFEED_* environment
variables (nested keys with __). The ones to look at first:

  ICEFEED_DATABASE_URL            PostgreSQL shared by all nodes
                                  (default postgres://icefeed:icefeed@127.0.0.1:5432/icefeed)
  ICEFEED_CHANGE_STORE            where change sets live: a directory, or an s3://, gs:// or
                                  az:// URL (default .icefeed/changes)
  ICEFEED_LISTEN                  address of the API (default 127.0.0.1:8080)
  ICEFEED_AUTH__ADMIN_TOKEN       turns authentication on (at least 32 characters); without
                                  it the node listens on loopback only
  ICEFEED_CATALOG__LOCAL_PATHS    directories local tables may be read from (none)
  ICEFEED_NETWORK__ALLOWED_HOSTS  private hosts catalogs, stores and OpenSearch may be on (none)
  ICEFEED_CATALOG__ALLOWED_TYPES  catalog types tables may use (all)

The README's \"Operating it\" section lists every setting.";

/// Writes `text` to stdout; a reader that stops early (`icefeed openapi | head`) is no error.
fn print_all(text: &str) -> std::io::Result<()> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    icefeed::telemetry::init_logging(cli.log_json);
    match cli.command {
        Command::Openapi => print_all(&icefeed::api::openapi_json())?,
        Command::Migrate => {
            let settings = Settings::load(cli.config.as_deref())?;
            let store =
                icefeed::store::Store::connect_with(&settings.database_url, &settings.database)
                    .await
                    .context("connecting to PostgreSQL")?;
            store.migrate().await?;
            tracing::info!("migrations applied");
        }
        Command::Serve => {
            let settings = Settings::load(cli.config.as_deref())?;
            let stop = CancellationToken::new();
            icefeed::app::stop_on_signals(stop.clone());
            let node = icefeed::app::start(settings, stop).await?;
            node.wait().await?;
        }
        Command::Demo(DemoCommand::Init { dir }) => {
            let demo = icefeed_testkit::demo::init(&dir).await?;
            println!(
                "{}",
                serde_json::to_string_pretty(&demo.registration_json())?
            );
        }
        Command::Demo(DemoCommand::Append { dir, rows }) => {
            let snapshot = icefeed_testkit::demo::append(&dir, rows).await?;
            println!("{snapshot}");
        }
        Command::Tables { remote, command } => exit_on_error(cli::tables(&remote, command).await),
        Command::Subscriptions { remote, command } => {
            exit_on_error(cli::subscriptions(&remote, command).await)
        }
        Command::Tokens { remote, command } => exit_on_error(cli::tokens(&remote, command).await),
        Command::Tail { remote, args } => exit_on_error(cli::tail(&remote, args).await),
    }
    Ok(())
}

/// Ends a command against a running node: its error on stderr and exit status 1 (2 for
/// a wrong command line), without a backtrace.
fn exit_on_error(result: Result<(), cli::CliError>) {
    if let Err(e) = result {
        eprintln!("error: {e}");
        let status = if matches!(e, cli::CliError::Usage(_)) {
            2
        } else {
            1
        };
        std::process::exit(status);
    }
}
