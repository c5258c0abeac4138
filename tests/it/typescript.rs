//! A TypeScript client generated from the committed OpenAPI document
//! (openapi-typescript, openapi-fetch), compiled with `tsc --strict` and run from Node
//! against a live node: subscribe, pull, acknowledge, read a typed problem.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::fixtures::{orders, orders_schema};
use crate::support::{Node, Warehouse, head, id_json};

fn run(command: &mut Command) -> String {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{command:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn a_generated_typescript_client_subscribes_pulls_acks_and_reads_problems() {
    let modules = std::env::var("ICEFEED_TEST_NODE_MODULES")
        .expect("ICEFEED_TEST_NODE_MODULES is set by scripts/test.sh");
    let bin = Path::new(&modules).join(".bin");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));

    // The project: the generated types, the client, strict settings, the packages.
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(&modules, dir.path().join("node_modules")).unwrap();
    std::fs::write(dir.path().join("package.json"), r#"{"type": "module"}"#).unwrap();
    std::fs::copy(
        root.join("tests/node/client.ts"),
        dir.path().join("client.ts"),
    )
    .unwrap();
    let tsconfig = json!({"compilerOptions": {
        "strict": true, "target": "es2022", "module": "nodenext",
        "moduleResolution": "nodenext", "outDir": "out", "skipLibCheck": true,
        "noUncheckedIndexedAccess": true,
    }, "files": ["client.ts"]});
    std::fs::write(dir.path().join("tsconfig.json"), tsconfig.to_string()).unwrap();
    run(Command::new(bin.join("openapi-typescript"))
        .arg(root.join("openapi/icefeed.json"))
        .args(["--output", "icefeed.ts"])
        .current_dir(dir.path()));
    run(Command::new(bin.join("tsc")).current_dir(dir.path()));

    let wh = Warehouse::new().await;
    let created = wh.create("shop.orders", orders_schema(), None).await;
    let t = wh.append(&created, &[orders(1..=3)]).await;
    let (node, _store) = Node::start_fresh().await;
    let id = node
        .register(&wh.registration("shop.orders", json!({})))
        .await;
    node.wait_for_checkpoint(&id, head(&t)).await;

    // Awaited, not blocked on: the node serves from this test's runtime.
    let out = tokio::process::Command::new("node")
        .arg("out/client.js")
        .args([&node.base, &id])
        .current_dir(dir.path())
        .output()
        .await
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_str(printed.trim()).unwrap();
    assert_eq!(seen["ids"], json!([1, 2, 3]), "{seen}");
    assert_eq!(
        seen["snapshots"],
        Value::Array(vec![id_json(head(&t)); 3]),
        "{seen}"
    );
    assert_eq!(seen["left"], 0, "acknowledged: {seen}");
    assert_eq!(seen["lag"], 0, "{seen}");
    assert_eq!(seen["problem"]["status"], 404, "{seen}");
    assert_eq!(seen["problem"]["code"], "table_not_found", "{seen}");
    node.shutdown().await;
}
