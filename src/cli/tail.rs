//! `icefeed tail`: follows a table's or a subscription's events, like `kubectl get -w`,
//! with long polls (each waits until events are published), printing each event as it
//! comes. A subscription is read ahead of its committed position and never acknowledged.
//! Must not reach: the rest of the crate (it sees a node only through its HTTP API).

use serde_json::Value;

use super::client::{CliError, Client};
use super::output::print;
use super::{Output, Remote, TailArgs, path_segment};

/// How long each long poll waits for new events.
const WAIT_SECONDS: u32 = 20;
const PAGE: u32 = 1000;

/// Where the events come from.
enum Feed {
    Table(String),
    Subscription(String),
}

impl Feed {
    /// A table id, or else a subscription's id or name.
    async fn find(client: &Client, target: &str) -> Result<Self, CliError> {
        let segment = path_segment(target);
        match client.get(&format!("/v1/tables/{segment}")).await {
            Ok(table) => return Ok(Feed::Table(str_field(&table, "id"))),
            Err(CliError::Problem {
                status: 400 | 404, ..
            }) => {}
            Err(other) => return Err(other),
        }
        match client.get(&format!("/v1/subscriptions/{segment}")).await {
            Ok(subscription) => Ok(Feed::Subscription(str_field(&subscription, "id"))),
            Err(CliError::Problem { status: 404, .. }) => Err(CliError::Usage(format!(
                "{target} is neither a table id nor a subscription's id or name \
                 (`icefeed tables list`, `icefeed subscriptions list`)"
            ))),
            Err(other) => Err(other),
        }
    }
}

fn str_field(v: &Value, name: &str) -> String {
    v[name].as_str().unwrap_or_default().to_string()
}

pub async fn tail(remote: &Remote, args: TailArgs) -> Result<(), CliError> {
    let client = Client::new(&remote.url, remote.token.clone())?;
    let feed = Feed::find(&client, &args.target).await?;
    let (base, mut after, filters) = match &feed {
        Feed::Table(id) => {
            let after = match args.from.as_deref() {
                None | Some("now") => Some("now".to_string()),
                Some("earliest") => None,
                Some(cursor) => Some(cursor.to_string()),
            };
            let mut filters = String::new();
            for (name, value) in [("ops", &args.ops), ("columns", &args.columns)] {
                if let Some(value) = value {
                    filters.push_str(&format!("&{name}={}", path_segment(value)));
                }
            }
            (format!("/v1/tables/{id}/changes"), after, filters)
        }
        Feed::Subscription(id) => {
            if args.ops.is_some() || args.columns.is_some() {
                return Err(CliError::Usage(
                    "--ops and --columns filter a table's feed; a subscription delivers \
                     what its own settings select"
                        .into(),
                ));
            }
            let after = match args.from.as_deref() {
                None => None,
                Some("now" | "earliest") => {
                    return Err(CliError::Usage(
                        "a subscription's tail starts at its committed position, or after a \
                         cursor of it given with --from"
                            .into(),
                    ));
                }
                Some(cursor) => Some(cursor.to_string()),
            };
            (
                format!("/v1/subscriptions/{id}/events"),
                after,
                String::new(),
            )
        }
    };
    let wait = if args.no_follow { 0 } else { WAIT_SECONDS };
    loop {
        let mut path = format!("{base}?limit={PAGE}&wait={wait}{filters}");
        if let Some(after) = &after {
            path.push_str(&format!("&after={}", path_segment(after)));
        }
        let page = client.get(&path).await?;
        let events = page["events"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        let mut text = String::new();
        for event in events {
            text.push_str(&line(remote.output, event));
        }
        print(&text);
        after = page["next"].as_str().map(str::to_string).or(after);
        if args.no_follow && page["more"] != Value::Bool(true) {
            return Ok(());
        }
    }
}

/// One event: the canonical JSON on one line, or a line for people.
fn line(output: Output, event: &Value) -> String {
    if output == Output::Json {
        return format!("{event}\n");
    }
    let op = event["op"].as_str().unwrap_or_default();
    let image = match op {
        "delete" => &event["before"],
        _ => &event["after"],
    };
    let key = match &event["key"] {
        Value::Null => "-".to_string(),
        key => key.to_string(),
    };
    let mut text = format!(
        "{:<6}  {key}  snapshot {}  {}  {image}",
        op,
        event["snapshot_id"].as_str().unwrap_or_default(),
        event["committed_at"].as_str().unwrap_or_default(),
    );
    if op == "update" {
        text.push_str(&format!("  (before {})", event["before"]));
    }
    text + "\n"
}
