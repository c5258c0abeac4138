// A TypeScript client of icefeed, typed by openapi-typescript from the committed
// OpenAPI document and calling through openapi-fetch; compiled with `tsc --strict` and
// run by tests/it/typescript.rs against a live node:
//
//   node client.js <base url> <table id>
//
// It subscribes to the table, pulls a page, acknowledges it and reads a typed problem
// document, then prints what it saw as one JSON line. The types are part of the test:
// a document that makes ids numbers, or drops a field used here, fails the compile.
import createClient from "openapi-fetch";
import type { components, paths } from "./icefeed.js";

type ChangeEvent = components["schemas"]["ChangeEvent"];
type Problem = components["schemas"]["Problem"];

function fail(message: string): never {
  console.error(message);
  process.exit(1);
}

const [baseUrl, tableId] = process.argv.slice(2);
if (!baseUrl || !tableId) fail("usage: node client.js <base url> <table id>");
// JSON answers and problem documents; the NDJSON and Arrow forms of a page are for
// clients that ask for them.
const client = createClient<paths, "application/json" | "application/problem+json">({ baseUrl });

const created = await client.POST("/v1/subscriptions", {
  body: { name: "typescript-client", tables: [tableId] },
});
if (!created.data) fail(`creating the subscription: ${JSON.stringify(created.error)}`);

const page = await client.GET("/v1/subscriptions/{id}/events", {
  params: { path: { id: "typescript-client" }, query: { limit: 100 } },
});
if (!page.data) fail(`pulling: ${JSON.stringify(page.error)}`);
const events: ChangeEvent[] = page.data.events;
const ids = events.map((e) => (e.after as Record<string, unknown> | null | undefined)?.["id"]);
// 64-bit ids are strings: precise in JavaScript.
const snapshots: string[] = events.map((e) => e.snapshot_id);

const acked = await client.POST("/v1/subscriptions/{id}/ack", {
  params: { path: { id: "typescript-client" } },
  body: { position: page.data.next },
});
if (!acked.data) fail(`acknowledging: ${JSON.stringify(acked.error)}`);
const after = await client.GET("/v1/subscriptions/{id}/events", {
  params: { path: { id: "typescript-client" } },
});
if (!after.data) fail(`pulling after the ack: ${JSON.stringify(after.error)}`);

const missing = await client.GET("/v1/tables/{id}", {
  params: { path: { id: "01a23e66-216d-77a1-bb51-75e89b2ee9c4" } },
});
const problem: Problem | undefined = missing.error;
if (!problem) fail("a missing table answered without a problem document");

console.log(
  JSON.stringify({
    ids,
    snapshots,
    left: after.data.events.length,
    lag: acked.data.lag.events,
    problem: { status: missing.response.status, code: problem.code, detail: problem.detail },
  }),
);
