//! Real `icefeed serve` processes sharing one database: each snapshot is published once,
//! SIGTERM stops a node cleanly, and secrets stay out of the logs.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use sqlx::Connection;

use crate::fixtures::{orders, orders_schema};
use crate::support::{Warehouse, fresh_database, head, id64, wait_until};

pub(crate) struct Process {
    child: Child,
    pub(crate) base: String,
    /// Its node id.
    name: String,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn spawn_node(db: &str, store: &std::path::Path, name: &str) -> Process {
    spawn_node_with(db, store, name, &[])
}

/// Starts `icefeed serve` on the change store `store` (a directory or a URL) with extra
/// environment variables (settings).
pub(crate) fn spawn_node_with(
    db: &str,
    store: impl AsRef<std::ffi::OsStr>,
    name: &str,
    env: &[(&str, &str)],
) -> Process {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_icefeed"))
        .arg("serve")
        .env("ICEFEED_DATABASE_URL", db)
        .env("ICEFEED_LISTEN", format!("127.0.0.1:{port}"))
        .env("ICEFEED_CHANGE_STORE", store)
        .env("ICEFEED_CATALOG__LOCAL_PATHS", std::env::temp_dir())
        .env(
            "ICEFEED_NETWORK__ALLOWED_HOSTS",
            crate::support::LOOPBACK.join(","),
        )
        .env("ICEFEED_NODE_ID", name)
        .env("ICEFEED_SCHEDULER__TICK", "50ms")
        .env("ICEFEED_SCHEDULER__LEASE_TTL", "3s")
        // Every rewrite goes through the shuffle's tasks, as on `test_settings` nodes.
        .env("ICEFEED_SCHEDULER__SHUFFLE_FROM_BYTES", "0")
        .env("RUST_LOG", "info")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start icefeed");
    Process {
        child,
        base: format!("http://127.0.0.1:{port}"),
        name: name.to_string(),
    }
}

/// A test that fails leaves no node behind, holding database connections the tests
/// after it need.
impl Drop for Process {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Process {
    /// The process id.
    pub(crate) fn child_id(&self) -> u32 {
        self.child.id()
    }
}

pub(crate) async fn wait_ready(http: &reqwest::Client, p: &Process) {
    wait_until(Duration::from_secs(30), || async {
        let r = http.get(format!("{}/readyz", p.base)).send().await.ok()?;
        r.status().is_success().then_some(())
    })
    .await;
}

/// Sends SIGTERM and returns the exit status and everything the process logged.
pub(crate) fn terminate(mut p: Process) -> (std::process::ExitStatus, String) {
    let pid = p.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let start = Instant::now();
    let status = loop {
        if let Some(status) = p.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "node did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut log = String::new();
    p.child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    p.child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    (status, log)
}

#[tokio::test]
async fn two_processes_publish_each_snapshot_exactly_once() {
    let wh = Warehouse::new().await;
    let mut t = wh.create("shop.orders", orders_schema(), None).await;
    let db = fresh_database().await;
    let store = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let a = spawn_node(&db, store.path(), "node-a");
    let b = spawn_node(&db, store.path(), "node-b");
    wait_ready(&http, &a).await;
    wait_ready(&http, &b).await;

    let mut body = wh.registration(
        "shop.orders",
        json!({"poll_interval_ms": 100, "start": "earliest"}),
    );
    body["catalog"]["properties"] = json!({"token": "LOG-SECRET-7"});
    let r = http
        .post(format!("{}/v1/tables", a.base))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let id = r.json::<serde_json::Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();

    // Commits keep landing while both nodes compete for the table's lease.
    let mut rows = 0;
    for i in 0..12 {
        t = wh.append(&t, &[orders(i * 10..i * 10 + 5)]).await;
        rows += 5;
        tokio::time::sleep(Duration::from_millis(70)).await;
    }
    let last = head(&t);
    wait_until(Duration::from_secs(60), || async {
        let t: serde_json::Value = http
            .get(format!("{}/v1/tables/{id}", b.base))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        assert_ne!(t["state"], "error", "{t}");
        (id64(&t["checkpoint"]["snapshot_id"]) == Some(last)).then_some(())
    })
    .await;

    let mut conn = sqlx::PgConnection::connect(&db).await.unwrap();
    let (sets, snapshots, events): (i64, i64, i64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT snapshot_id), coalesce(sum(event_count), 0)::bigint FROM change_sets",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(
        (sets, snapshots, events),
        (12, 12, rows),
        "one change set per snapshot, every row once"
    );
    let ordinals: Vec<i64> = sqlx::query_scalar("SELECT ordinal FROM change_sets ORDER BY ordinal")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        ordinals,
        (1..=12).collect::<Vec<_>>(),
        "ordinals are gap-free"
    );

    // Both nodes serve the same feed.
    for node in [&a, &b] {
        let page: serde_json::Value = http
            .get(format!("{}/v1/tables/{id}/changes?limit=1000", node.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(page["events"].as_array().unwrap().len() as i64, rows);
    }

    for node in [a, b] {
        let (status, log) = terminate(node);
        assert!(
            status.success(),
            "a node exits 0 on SIGTERM: {status}\n{log}"
        );
        assert!(log.contains("icefeed stopped"), "{log}");
        assert!(
            !log.contains("LOG-SECRET-7"),
            "a secret reached the log:\n{log}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_killed_mid_shuffle_loses_and_duplicates_nothing() {
    let store = tempfile::tempdir().unwrap();
    kill_mid_shuffle(
        &Warehouse::new().await,
        store.path().as_os_str(),
        &[],
        1..=8,
    )
    .await;
}

/// The same with the tables' files and the change store on S3 (the SeaweedFS server).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_killed_mid_shuffle_on_s3_loses_and_duplicates_nothing() {
    let store = format!(
        "s3://{}/{}",
        crate::s3::BUCKET,
        crate::s3::unique("changes")
    );
    let options: Vec<(String, String)> = crate::s3::change_store_options()
        .into_iter()
        .map(|(k, v)| {
            (
                format!("ICEFEED_CHANGE_STORE_OPTIONS__{}", k.to_uppercase()),
                v,
            )
        })
        .collect();
    let env: Vec<(&str, &str)> = options
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    kill_mid_shuffle(&Warehouse::on_s3().await, store.as_ref(), &env, 1..=4).await;
}

/// Three `icefeed serve` processes on `store` follow the random histories of `seeds`;
/// the one running a shuffle task is SIGKILLed; every change set must still equal the
/// oracle's.
async fn kill_mid_shuffle(
    wh: &Warehouse,
    store: &std::ffi::OsStr,
    env: &[(&str, &str)],
    seeds: std::ops::RangeInclusive<u64>,
) {
    use crate::oracle::{compare, oracle, random_history, register};
    use crate::support::Node;

    let mut histories = Vec::new();
    for seed in seeds {
        let model = random_history(wh, seed).await;
        let expected = oracle(&model).await;
        histories.push((model, expected));
    }
    let db = fresh_database().await;
    let mut nodes = three_nodes(&db, store, env).await;
    let client = Node::remote(nodes[1].base.clone());
    let mut ids = Vec::new();
    for (model, _) in &histories {
        ids.push(register(&client, wh, model).await);
    }
    kill_a_task_runner(&db, &mut nodes).await;
    let survivor = Node::remote(nodes[0].base.clone());
    for ((model, expected), id) in histories.iter().zip(&ids) {
        compare(&survivor, id, model, expected).await;
    }
    stop_survivors(&db, nodes).await;
}

const NAMES: [&str; 3] = ["node-a", "node-b", "node-c"];

/// Three `icefeed serve` processes on one database and change store, ready.
pub(crate) async fn three_nodes(
    db: &str,
    store: &std::ffi::OsStr,
    env: &[(&str, &str)],
) -> Vec<Process> {
    let http = reqwest::Client::new();
    let nodes: Vec<Process> = NAMES
        .iter()
        .map(|name| spawn_node_with(db, store, name, env))
        .collect();
    for node in &nodes {
        wait_ready(&http, node).await;
    }
    nodes
}

/// SIGKILLs whichever node holds a running shuffle task (waiting for one).
pub(crate) async fn kill_a_task_runner(db: &str, nodes: &mut Vec<Process>) {
    let pool = sqlx::PgPool::connect(db).await.unwrap();
    let victim: String = wait_until(Duration::from_secs(60), || async {
        sqlx::query_scalar("SELECT owner FROM tasks WHERE state = 'running' LIMIT 1")
            .fetch_optional(&pool)
            .await
            .unwrap()
    })
    .await;
    let index = nodes
        .iter()
        .position(|n| n.name == victim)
        .expect("the task owner is one of the nodes");
    let mut killed = nodes.remove(index);
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();
}

/// Checks that every table's ordinals are gap-free and stops the remaining nodes.
pub(crate) async fn stop_survivors(db: &str, nodes: Vec<Process>) {
    let pool = sqlx::PgPool::connect(db).await.unwrap();
    let gaps: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT table_id, max(ordinal) - count(*) AS gap FROM change_sets \
         GROUP BY table_id) g WHERE gap <> 0",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(gaps, 0, "ordinals are gap-free in every table");
    for node in nodes {
        let (status, log) = terminate(node);
        assert!(status.success(), "{log}");
    }
}
