// Drives icefeed's dashboard in headless Chromium for tests/it/dashboard.rs.
//
//   node dashboard.mjs <base url> <admin token> <screenshot dir>
//   env ICEFEED_TEST_CHROMIUM (the browser), ICEFEED_TEST_NODE_MODULES (with playwright-core)
//
// The node has auth on, a followed table `shop.orders` and a table in error
// `shop.returns`. The script checks the page asks for a token, lists both tables with
// their states and the error message, shows the change sets of `shop.orders` and opens a
// live tail of it, prints
// `TAILING` and waits for a line on stdin (the test appends rows meanwhile), then
// expects the new rows as insert events and an update shown before/after. It prints
// `OK` at the end; any failure exits with status 1 and says why.
import { createRequire } from "node:module";
import path from "node:path";
import readline from "node:readline";

const [base, token, shots] = process.argv.slice(2);
const require = createRequire(path.join(process.env.ICEFEED_TEST_NODE_MODULES, "noop.js"));
const { chromium } = require("playwright-core");

const input = readline.createInterface({ input: process.stdin });
const nextLine = () => new Promise((resolve) => input.once("line", resolve));

function check(condition, message) {
  if (!condition) throw new Error(message);
}

const browser = await chromium.launch({
  executablePath: process.env.ICEFEED_TEST_CHROMIUM,
  args: [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
});
let page;
try {
  page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const problems = [];
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => m.type() === "error" && !/401|Unauthorized/.test(m.text()) && problems.push(`console: ${m.text()}`));

  // `/` leads to the dashboard, which asks for a token: auth is on.
  await page.goto(`${base}/`);
  check(page.url().endsWith("/ui"), `/ redirects to /ui, not ${page.url()}`);
  await page.waitForSelector("#load-error");
  const asked = await page.textContent("#load-error");
  check(asked.includes("requires an API token"), `without a token: ${asked}`);

  await page.fill("#token", token);
  await page.click("#token-form button");
  const orders = 'tr[data-table="shop.orders"]';
  const returns = 'tr[data-table="shop.returns"]';
  await page.waitForSelector(orders);
  await page.waitForSelector(`${returns} [data-state="error"]`);
  check(await page.isVisible(`${orders} [data-state="active"]`), "shop.orders is active");
  const error = await page.textContent(`${returns} .error-text`);
  check(error.includes("catalog_type_not_allowed"), `shop.returns shows its error: ${error}`);
  await page.screenshot({ path: path.join(shots, "tables.png"), fullPage: true });

  // The table's page, and a live tail of new events.
  await page.click(`${orders} a`);
  await page.waitForSelector("#tail-start");
  const exported = await page.textContent('#change-sets tr[data-ordinal="1"]');
  check(exported.includes("export"), `the first change set is the export: ${exported}`);
  await page.click("#tail-start");
  await page.waitForFunction(() => document.querySelector("#tail-status")?.textContent === "live");
  console.log("TAILING");
  await nextLine();

  await page.waitForFunction(() => document.querySelectorAll('.event[data-op="insert"]').length >= 2,
    null, { timeout: 30000 });
  await page.waitForFunction(() => document.querySelectorAll('.event[data-op="update"]').length >= 1,
    null, { timeout: 30000 });
  const inserted = await page.$$eval('.event[data-op="insert"] .event-head code', (els) => els.map((e) => e.textContent));
  check(inserted.includes('{"id":3}') && inserted.includes('{"id":4}'), `insert keys: ${inserted}`);
  const changed = await page.$$eval('.event[data-op="update"] .changed', (els) => els.map((e) => e.textContent));
  check(changed.length === 2, `an update marks the changed field on both sides: ${changed}`);
  await page.screenshot({ path: path.join(shots, "tail.png"), fullPage: true });

  check(problems.length === 0, problems.join("\n"));
  console.log("OK");
} catch (e) {
  if (page) await page.screenshot({ path: path.join(shots, "failure.png"), fullPage: true }).catch(() => {});
  console.log(`FAILED: ${e.message}`);
  process.exitCode = 1;
} finally {
  await browser.close();
  input.close();
}
