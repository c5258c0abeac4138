//! The command line of a running node: tables, subscriptions, tokens and a live tail,
//! all through the HTTP API (`--url`, `--token`), so that it works against any node
//! the user may reach and sees exactly what other clients see.
//! Must not reach: the rest of the crate (it sees a node only through its HTTP API).

mod client;
mod output;
mod tail;

use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Value, json};

pub use client::{CliError, Client};
use output::{print_json, print_rows};

/// Where the node is and how to answer.
#[derive(Args, Debug, Clone)]
pub struct Remote {
    /// The node's base URL.
    #[arg(
        long,
        env = "ICEFEED_URL",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    pub url: String,
    /// A bearer token, for nodes with `auth.admin_token`.
    #[arg(long, env = "ICEFEED_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// `table` for people, `json` for scripts (the API's answer as it is).
    #[arg(long, short, value_enum, default_value_t = Output::Table, global = true)]
    pub output: Output,
}

/// How answers are printed.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Table,
    Json,
}

/// `icefeed tables …`
#[derive(Subcommand, Debug)]
pub enum TablesCommand {
    /// List the registered tables with state, checkpoint and lag.
    List,
    /// Show one table.
    Get { id: String },
    /// Register a table.
    Add {
        /// Catalog settings as JSON, or `@file` to read them from a file, e.g.
        /// '{"type": "rest", "uri": "https://catalog.example/api/catalog"}'.
        #[arg(long)]
        catalog: String,
        /// The table, `namespace.table`.
        #[arg(long)]
        table: String,
        /// `snapshot` (default), `latest` or `earliest`.
        #[arg(long)]
        start: Option<String>,
        /// Columns that identify a row, comma-separated (default: the table's
        /// identifier fields).
        #[arg(long, value_delimiter = ',')]
        identifier_columns: Option<Vec<String>>,
        /// The branch to follow (default `main`).
        #[arg(long)]
        branch: Option<String>,
    },
    /// Stop polling a table.
    Pause { id: String },
    /// Poll a paused table again (also retries a table in error).
    Resume { id: String },
    /// Retry a table in the error state.
    Retry { id: String },
    /// Delete a table's registration and its change sets.
    Rm { id: String },
}

/// `icefeed subscriptions …`
#[derive(Subcommand, Debug)]
pub enum SubscriptionsCommand {
    /// List subscriptions with state and lag.
    List,
    /// Show one subscription (by id or name).
    Get { id: String },
    /// Create a pull subscription of tables.
    Add {
        /// Its name.
        #[arg(long)]
        name: String,
        /// Table ids, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        tables: Vec<String>,
        /// `earliest` (default) or `latest`.
        #[arg(long)]
        start: Option<String>,
    },
    /// Stop delivering (push subscriptions stop pushing).
    Pause { id: String },
    /// Deliver again.
    Resume { id: String },
    /// Delete a subscription.
    Rm { id: String },
}

/// `icefeed tokens …`
#[derive(Subcommand, Debug)]
pub enum TokensCommand {
    /// List API tokens (never their secrets).
    List,
    /// Create a token; its secret is printed once.
    Create {
        /// A name saying who uses it.
        #[arg(long)]
        name: String,
        /// Scopes, comma-separated: `admin`, `read`, `table:<id>`, `subscription:<id or name>`.
        #[arg(long, value_delimiter = ',', required = true)]
        scopes: Vec<String>,
        /// When it stops working (RFC 3339).
        #[arg(long)]
        expires_at: Option<String>,
    },
    /// Revoke a token.
    Revoke { id: String },
}

/// `icefeed tail …`
#[derive(Args, Debug)]
pub struct TailArgs {
    /// A table id, or a subscription's id or name.
    pub target: String,
    /// Where to start: `now`, `earliest` or a cursor. Default: `now` for a table, the
    /// committed position for a subscription (which the tail never acknowledges).
    #[arg(long)]
    pub from: Option<String>,
    /// Only these operations, comma-separated (tables only).
    #[arg(long)]
    pub ops: Option<String>,
    /// Only these columns, comma-separated (tables only).
    #[arg(long)]
    pub columns: Option<String>,
    /// Print what is there and stop instead of following new events.
    #[arg(long)]
    pub no_follow: bool,
}

/// `text` percent-encoded, for a path segment or a query value.
fn path_segment(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

fn catalog_settings(catalog: &str) -> Result<Value, CliError> {
    let text = match catalog.strip_prefix('@') {
        Some(file) => std::fs::read_to_string(file)
            .map_err(|e| CliError::Usage(format!("cannot read --catalog file {file}: {e}")))?,
        None => catalog.to_string(),
    };
    serde_json::from_str(&text)
        .map_err(|e| CliError::Usage(format!("--catalog is not valid JSON: {e}")))
}

fn str_of(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn table_row(t: &Value) -> Vec<String> {
    vec![
        str_of(&t["id"]),
        str_of(&t["table"]),
        str_of(&t["state"]),
        str_of(&t["checkpoint"]["snapshot_id"]),
        format!("{} snapshots", str_of(&t["lag"]["snapshots"])),
        str_of(&t["last_error"]),
    ]
}

const TABLE_HEADER: [&str; 6] = ["ID", "TABLE", "STATE", "CHECKPOINT", "LAG", "LAST ERROR"];

fn subscription_row(s: &Value) -> Vec<String> {
    let state = if s["push"].is_object() {
        &s["push"]["state"]
    } else {
        &s["state"]
    };
    vec![
        str_of(&s["id"]),
        str_of(&s["name"]),
        str_of(&s["kind"]),
        str_of(state),
        format!("{} events", str_of(&s["lag"]["events"])),
        str_of(&s["last_error"]),
    ]
}

const SUBSCRIPTION_HEADER: [&str; 6] = ["ID", "NAME", "KIND", "STATE", "LAG", "LAST ERROR"];

/// Prints one resource or a list of them, as the output format asks.
fn show(
    remote: &Remote,
    answer: &Value,
    list: Option<&str>,
    header: &[&str],
    row: fn(&Value) -> Vec<String>,
) {
    if remote.output == Output::Json {
        return print_json(answer);
    }
    let rows: Vec<Vec<String>> = match list {
        Some(key) => answer[key]
            .as_array()
            .map(|items| items.iter().map(row).collect())
            .unwrap_or_default(),
        None => vec![row(answer)],
    };
    print_rows(header, &rows);
}

pub async fn tables(remote: &Remote, command: TablesCommand) -> Result<(), CliError> {
    let client = Client::new(&remote.url, remote.token.clone())?;
    let one = |answer: Value| show(remote, &answer, None, &TABLE_HEADER, table_row);
    match command {
        TablesCommand::List => {
            let answer = client.get("/v1/tables").await?;
            show(remote, &answer, Some("tables"), &TABLE_HEADER, table_row);
        }
        TablesCommand::Get { id } => one(client
            .get(&format!("/v1/tables/{}", path_segment(&id)))
            .await?),
        TablesCommand::Add {
            catalog,
            table,
            start,
            identifier_columns,
            branch,
        } => {
            let mut body = json!({"catalog": catalog_settings(&catalog)?, "table": table});
            if let Some(start) = start {
                body["start"] = json!(start);
            }
            if let Some(columns) = identifier_columns {
                body["identifier_columns"] = json!(columns);
            }
            if let Some(branch) = branch {
                body["branch"] = json!(branch);
            }
            one(client.post("/v1/tables", &body).await?)
        }
        TablesCommand::Pause { id } => one(set_paused(&client, "tables", &id, true).await?),
        TablesCommand::Resume { id } => one(set_paused(&client, "tables", &id, false).await?),
        TablesCommand::Retry { id } => one(client
            .post(
                &format!("/v1/tables/{}/retry", path_segment(&id)),
                &json!({}),
            )
            .await?),
        TablesCommand::Rm { id } => {
            client
                .delete(&format!("/v1/tables/{}", path_segment(&id)))
                .await?;
            println!("deleted table {id}");
        }
    }
    Ok(())
}

async fn set_paused(
    client: &Client,
    kind: &str,
    id: &str,
    paused: bool,
) -> Result<Value, CliError> {
    client
        .patch(
            &format!("/v1/{kind}/{}", path_segment(id)),
            &json!({"paused": paused}),
        )
        .await
}

pub async fn subscriptions(remote: &Remote, command: SubscriptionsCommand) -> Result<(), CliError> {
    let client = Client::new(&remote.url, remote.token.clone())?;
    let one = |answer: Value| {
        show(
            remote,
            &answer,
            None,
            &SUBSCRIPTION_HEADER,
            subscription_row,
        )
    };
    match command {
        SubscriptionsCommand::List => {
            let answer = client.get("/v1/subscriptions").await?;
            show(
                remote,
                &answer,
                Some("subscriptions"),
                &SUBSCRIPTION_HEADER,
                subscription_row,
            );
        }
        SubscriptionsCommand::Get { id } => one(client
            .get(&format!("/v1/subscriptions/{}", path_segment(&id)))
            .await?),
        SubscriptionsCommand::Add {
            name,
            tables,
            start,
        } => {
            let mut body = json!({"name": name, "tables": tables});
            if let Some(start) = start {
                body["start"] = json!(start);
            }
            one(client.post("/v1/subscriptions", &body).await?)
        }
        SubscriptionsCommand::Pause { id } => {
            one(set_paused(&client, "subscriptions", &id, true).await?)
        }
        SubscriptionsCommand::Resume { id } => {
            one(set_paused(&client, "subscriptions", &id, false).await?)
        }
        SubscriptionsCommand::Rm { id } => {
            client
                .delete(&format!("/v1/subscriptions/{}", path_segment(&id)))
                .await?;
            println!("deleted subscription {id}");
        }
    }
    Ok(())
}

pub async fn tokens(remote: &Remote, command: TokensCommand) -> Result<(), CliError> {
    let client = Client::new(&remote.url, remote.token.clone())?;
    const HEADER: [&str; 5] = ["ID", "NAME", "SCOPES", "EXPIRES", "CREATED"];
    let row = |t: &Value| {
        let scopes: Vec<String> = t["scopes"]
            .as_array()
            .map(|s| s.iter().map(str_of).collect())
            .unwrap_or_default();
        vec![
            str_of(&t["id"]),
            str_of(&t["name"]),
            scopes.join(","),
            str_of(&t["expires_at"]),
            str_of(&t["created_at"]),
        ]
    };
    match command {
        TokensCommand::List => {
            let answer = client.get("/v1/tokens").await?;
            show(remote, &answer, Some("tokens"), &HEADER, row);
        }
        TokensCommand::Create {
            name,
            scopes,
            expires_at,
        } => {
            let mut body = json!({"name": name, "scopes": scopes});
            if let Some(expires_at) = expires_at {
                body["expires_at"] = json!(expires_at);
            }
            let answer = client.post("/v1/tokens", &body).await?;
            if remote.output == Output::Json {
                print_json(&answer);
            } else {
                print_rows(&HEADER, &[row(&answer)]);
                println!("\nsecret (shown only now): {}", str_of(&answer["secret"]));
            }
        }
        TokensCommand::Revoke { id } => {
            client
                .delete(&format!("/v1/tokens/{}", path_segment(&id)))
                .await?;
            println!("revoked token {id}");
        }
    }
    Ok(())
}

pub use tail::tail;
