// icefeed's dashboard: a small single-page app over the public HTTP API, with no build
// step and no dependencies. Every text that comes from the API is set as text, never as
// HTML, so that a table name or an error message cannot inject markup.
"use strict";

const TOKEN_KEY = "icefeed.token";
const MAX_EVENTS = 500;
let refreshTimer = null;
let openStream = null;

// ---- DOM helpers -------------------------------------------------------------------

/** An element with attributes (`on*` as listeners) and children (strings become text). */
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const badge = (state) => h("span", { class: `badge state-${state}`, "data-state": state }, state);
const json = (v) => h("pre", { class: "json" }, JSON.stringify(v, null, 2));
const when = (t) => (t ? new Date(t).toLocaleString() : "—");

function seconds(s) {
  if (!s) return "0 s";
  if (s < 120) return `${s.toFixed(1)} s`;
  if (s < 7200) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

function notice(message) {
  const el = document.getElementById("notice");
  el.textContent = message || "";
  el.hidden = !message;
}

function render(...children) {
  const view = document.getElementById("view");
  view.replaceChildren(...children);
}

// ---- API ---------------------------------------------------------------------------

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

/** Calls the API; a problem answer throws an Error carrying its code and detail. */
async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (token()) headers.Authorization = `Bearer ${token()}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (r.status === 204) return null;
  const text = await r.text();
  const data = text ? JSON.parse(text) : null;
  if (!r.ok) {
    const e = new Error(data && data.detail ? `${data.detail} (${data.code})` : `HTTP ${r.status}`);
    e.status = r.status;
    e.code = data && data.code;
    throw e;
  }
  return data;
}

/** Runs `action`, then re-renders; a failure shows its problem detail. */
async function act(action) {
  try {
    await action();
    notice("");
  } catch (e) {
    notice(e.message);
  }
  route();
}

function explain(e) {
  if (e.status === 401) return "This node requires an API token: enter one above.";
  if (e.status === 403) return `The token may not do this: ${e.message}`;
  return e.message;
}

// ---- Tables ------------------------------------------------------------------------

async function tablesView() {
  const { tables } = await api("GET", "/v1/tables");
  const rows = tables.map((t) =>
    h("tr", { "data-table": t.table, "data-id": t.id },
      h("td", {}, h("a", { href: `#/tables/${t.id}` }, t.table), h("div", { class: "muted" }, t.branch)),
      h("td", {}, badge(t.state)),
      h("td", { class: "num" }, t.checkpoint ? t.checkpoint.snapshot_id : "—",
        h("div", { class: "muted" }, t.checkpoint ? when(t.checkpoint.committed_at) : "")),
      h("td", { class: "num" }, `${t.lag.snapshots} snapshots`, h("div", { class: "muted" }, seconds(t.lag.seconds))),
      h("td", { class: "num" }, t.change_sets),
      h("td", {}, t.last_error ? h("div", { class: "error-text" }, t.last_error) : ""),
      h("td", {}, tableActions(t))));
  render(
    h("h1", {}, "Tables"),
    tables.length === 0
      ? h("p", { class: "muted" }, "No table is registered yet. ", h("a", { href: "#/register" }, "Register one."))
      : h("table", { id: "tables" },
          h("thead", {}, h("tr", {}, ["Table", "State", "Checkpoint", "Lag", "Change sets", "Last error", ""].map((c) => h("th", {}, c)))),
          h("tbody", {}, rows)));
}

function tableActions(t) {
  const path = `/v1/tables/${t.id}`;
  return h("div", { class: "actions" },
    t.state === "paused"
      ? h("button", { onclick: () => act(() => api("PATCH", path, { paused: false })) }, "Resume")
      : h("button", { onclick: () => act(() => api("PATCH", path, { paused: true })) }, "Pause"),
    t.state === "error" && h("button", { onclick: () => act(() => api("POST", `${path}/retry`)) }, "Retry"),
    h("button", {
      class: "danger",
      onclick: () => confirm(`Delete ${t.table} and its change sets?`) &&
        act(async () => { await api("DELETE", path); location.hash = "#/tables"; }),
    }, "Delete"));
}

async function tableView(id) {
  const t = await api("GET", `/v1/tables/${encodeURIComponent(id)}`);
  render(
    h("h1", {}, t.table, " ", badge(t.state)),
    h("div", { class: "card" },
      h("dl", {},
        h("dt", {}, "Id"), h("dd", {}, t.id),
        h("dt", {}, "Branch"), h("dd", {}, t.branch),
        h("dt", {}, "Identifier columns"), h("dd", {}, t.identifier_columns.join(", ") || "— (no keys: no update pairing)"),
        h("dt", {}, "Checkpoint"), h("dd", {}, t.checkpoint ? `${t.checkpoint.snapshot_id} (${when(t.checkpoint.committed_at)})` : "—"),
        h("dt", {}, "Head"), h("dd", {}, t.head_snapshot_id || "—"),
        h("dt", {}, "Lag"), h("dd", {}, `${t.lag.snapshots} snapshots, ${seconds(t.lag.seconds)}`),
        h("dt", {}, "Change sets"), h("dd", {}, t.change_sets),
        h("dt", {}, "Last polled"), h("dd", {}, when(t.last_polled_at)),
        t.last_error && h("dt", {}, "Last error"),
        t.last_error && h("dd", { class: "error-text", id: "last-error" }, t.last_error)),
      h("div", { class: "actions spaced" }, tableActions(t))),
    tail(`/v1/tables/${t.id}/changes/stream`),
    await changeSets(t));
}

/** The newest change sets of a table, each with the cursor that reads from it. */
async function changeSets(t) {
  const { change_sets } = await api("GET", `/v1/tables/${t.id}/change-sets?limit=20`);
  return h("section", {},
    h("h2", {}, "Change sets"),
    change_sets.length === 0 ? h("p", { class: "muted" }, "None published yet.") :
      h("table", { id: "change-sets" },
        h("thead", {}, h("tr", {}, ["#", "Snapshot", "Operation", "Committed", "Events", "Read from here"].map((c) => h("th", {}, c)))),
        h("tbody", {}, change_sets.map((c) => h("tr", { "data-ordinal": c.ordinal },
          h("td", { class: "num" }, c.ordinal),
          h("td", { class: "num" }, c.snapshot_id, h("div", { class: "muted" }, `sequence ${c.sequence_number}`)),
          h("td", {}, changeSetKind(c)),
          h("td", {}, when(c.committed_at)),
          h("td", { class: "num" }, c.event_count),
          h("td", {}, h("code", {}, `?after=${c.position}`)))))));
}

/** What a change set is of, in words. */
function changeSetKind(c) {
  if (c.kind === "export") return "export (state at registration)";
  if (c.kind === "reset") return `reset (rolled back from ${c.reset_from_snapshot_id})`;
  return c.operation;
}

// ---- Live tail ---------------------------------------------------------------------

/** A live tail of an SSE endpoint, with operation and column filters. */
function tail(path) {
  const list = h("div", { class: "events", id: "events" });
  const status = h("span", { class: "muted", id: "tail-status" }, "not connected");
  const ops = ["insert", "update", "delete"].map((op) =>
    h("label", {}, h("input", { type: "checkbox", value: op, checked: true }), ` ${op}`));
  const columns = h("input", { placeholder: "columns, comma-separated (all)", size: 30 });
  const from = h("select", {}, h("option", { value: "now" }, "new events"), h("option", { value: "" }, "from the beginning"));
  const start = async () => {
    stopTail();
    list.replaceChildren();
    const params = new URLSearchParams();
    if (from.value) params.set("after", from.value);
    const chosen = ops.map((l) => l.firstChild).filter((c) => c.checked).map((c) => c.value);
    if (chosen.length < 3) params.set("ops", chosen.join(","));
    if (columns.value.trim()) params.set("columns", columns.value.trim());
    let url = `${path}?${params}`;
    try {
      if (token()) {
        // EventSource cannot send headers: a short-lived token in the URL instead.
        const granted = await api("POST", "/v1/tokens/stream", { path });
        url = `${granted.url}&${params}`;
      }
    } catch (e) {
      status.textContent = explain(e);
      return;
    }
    const source = new EventSource(url);
    openStream = source;
    source.onopen = () => { status.textContent = "live"; };
    source.addEventListener("change", (m) => {
      list.prepend(eventCard(JSON.parse(m.data)));
      while (list.childElementCount > MAX_EVENTS) list.lastChild.remove();
    });
    source.addEventListener("error", (m) => {
      if (m.data) {
        const problem = JSON.parse(m.data);
        status.textContent = `${problem.detail} (${problem.code})`;
        source.close();
      } else {
        status.textContent = "reconnecting…";
      }
    });
  };
  return h("section", {},
    h("h2", {}, "Live tail"),
    h("div", { class: "toolbar" }, ops, columns, from,
      h("button", { onclick: start, id: "tail-start" }, "Start"),
      h("button", { onclick: () => { stopTail(); status.textContent = "stopped"; } }, "Stop"),
      status),
    list);
}

function stopTail() {
  if (openStream) openStream.close();
  openStream = null;
}

/** One change event; an update shows before and after side by side, changes marked. */
function eventCard(e) {
  const image = (label, row, other) => h("div", {},
    h("div", { class: "label" }, label),
    h("pre", {}, row ? Object.entries(row).map(([k, v]) => {
      const changed = other && JSON.stringify(other[k]) !== JSON.stringify(v);
      return h("div", { class: changed ? "changed" : "" }, `${k}: ${JSON.stringify(v)}`);
    }) : "—"));
  return h("div", { class: "event", "data-op": e.op },
    h("div", { class: "event-head" },
      h("span", { class: `badge op-${e.op}` }, e.op),
      e.key && h("code", {}, JSON.stringify(e.key)),
      h("span", {}, e.table),
      h("span", {}, `snapshot ${e.snapshot_id}`),
      h("span", {}, when(e.committed_at))),
    h("div", { class: "images" },
      image("before", e.before, e.op === "update" ? e.after : null),
      image("after", e.after, e.op === "update" ? e.before : null)));
}

// ---- Subscriptions -----------------------------------------------------------------

async function subscriptionsView() {
  const { subscriptions } = await api("GET", "/v1/subscriptions");
  const rows = subscriptions.map((s) =>
    h("tr", { "data-subscription": s.name },
      h("td", {}, h("a", { href: `#/subscriptions/${s.id}` }, s.name), h("div", { class: "muted" }, s.kind)),
      h("td", {}, badge(s.push ? s.push.state : s.state)),
      h("td", {}, s.tables.map((t) => t.table).join(", ")),
      h("td", { class: "num" }, `${s.lag.events} events`, h("div", { class: "muted" }, `${s.lag.snapshots} snapshots, ${seconds(s.lag.seconds)}`)),
      h("td", { class: "num" }, s.push ? [
        `${s.push.documents_indexed} indexed, ${s.push.documents_deleted} deleted, ${s.push.dead_letters} dead letters`,
        h("div", { class: "muted" }, throughput(s)),
      ] : "—"),
      h("td", {}, (s.last_error || (s.push && s.push.last_error)) ? h("div", { class: "error-text" }, s.last_error || s.push.last_error) : ""),
      h("td", {}, subscriptionActions(s))));
  render(
    h("h1", {}, "Subscriptions"),
    subscriptions.length === 0
      ? h("p", { class: "muted" }, "No subscription yet (POST /v1/subscriptions).")
      : h("table", { id: "subscriptions" },
          h("thead", {}, h("tr", {}, ["Subscription", "State", "Tables", "Lag", "Push", "Last error", ""].map((c) => h("th", {}, c)))),
          h("tbody", {}, rows)));
}

/** Documents a push subscription sent per second since the list was last shown. */
const pushed = new Map();
function throughput(s) {
  const total = s.push.documents_indexed + s.push.documents_deleted;
  const now = Date.now();
  const before = pushed.get(s.id);
  pushed.set(s.id, { total, at: now });
  if (!before || now <= before.at) return "";
  const rate = ((total - before.total) * 1000) / (now - before.at);
  return `${rate.toFixed(rate < 10 ? 1 : 0)} documents/s`;
}

function subscriptionActions(s) {
  const path = `/v1/subscriptions/${s.id}`;
  return h("div", { class: "actions" },
    s.state === "paused"
      ? h("button", { onclick: () => act(() => api("PATCH", path, { paused: false })) }, "Resume")
      : h("button", { onclick: () => act(() => api("PATCH", path, { paused: true })) }, "Pause"),
    h("button", {
      class: "danger",
      onclick: () => confirm(`Delete subscription ${s.name}?`) &&
        act(async () => { await api("DELETE", path); location.hash = "#/subscriptions"; }),
    }, "Delete"));
}

async function subscriptionView(id) {
  const s = await api("GET", `/v1/subscriptions/${encodeURIComponent(id)}`);
  const parts = [
    h("h1", {}, s.name, " ", badge(s.push ? s.push.state : s.state)),
    h("div", { class: "card" },
      h("dl", {},
        h("dt", {}, "Id"), h("dd", {}, s.id),
        h("dt", {}, "Kind"), h("dd", {}, s.kind),
        h("dt", {}, "Tables"), h("dd", {}, s.tables.map((t) => `${t.table} (${t.lag.events} events behind)`).join(", ")),
        h("dt", {}, "Committed"), h("dd", {}, h("code", {}, s.committed)),
        h("dt", {}, "Lag"), h("dd", {}, `${s.lag.events} events, ${s.lag.snapshots} snapshots, ${seconds(s.lag.seconds)}`),
        s.push && h("dt", {}, "Pushed"),
        s.push && h("dd", {}, `${s.push.documents_indexed} indexed, ${s.push.documents_deleted} deleted, ${s.push.documents_skipped} skipped, ${s.push.documents_rejected} rejected; last at ${when(s.push.last_pushed_at)}`),
        (s.last_error || (s.push && s.push.last_error)) && h("dt", {}, "Last error"),
        (s.last_error || (s.push && s.push.last_error)) && h("dd", { class: "error-text" }, s.last_error || s.push.last_error)),
      h("div", { class: "actions spaced" }, subscriptionActions(s))),
  ];
  if (s.push) parts.push(await deadLetters(s));
  else parts.push(tail(`/v1/subscriptions/${s.id}/stream`));
  render(...parts);
}

async function deadLetters(s) {
  const path = `/v1/subscriptions/${s.id}/dead-letters`;
  const { dead_letters } = await api("GET", `${path}?limit=100`);
  // The node pushing the subscription sends them; the next refresh shows what became of them.
  const redrive = (body) => act(() => api("POST", `${path}/redrive`, body));
  return h("section", {},
    h("h2", {}, `Dead letters (${s.push.dead_letters})`),
    dead_letters.length === 0 ? h("p", { class: "muted" }, "None.") : [
      h("div", { class: "toolbar" }, h("button", { onclick: () => redrive({ limit: 100 }) }, "Redrive all shown")),
      h("table", {},
        h("thead", {}, h("tr", {}, ["Document", "Error", "Reason", "When", ""].map((c) => h("th", {}, c)))),
        h("tbody", {}, dead_letters.map((d) => h("tr", {},
          h("td", {}, d.document_id || "—", h("div", { class: "muted" }, d.index || "")),
          h("td", {}, d.error_type),
          h("td", { class: "error-text" }, d.reason),
          h("td", {}, when(d.created_at), d.queued_at ? h("div", { class: "muted" }, "redrive queued") : ""),
          h("td", {}, h("button", { onclick: () => redrive({ ids: [d.id] }) }, "Redrive")))))),
    ]);
}

// ---- Registering a table -----------------------------------------------------------

function registerView() {
  const catalog = h("textarea", { name: "catalog", spellcheck: "false" },
    JSON.stringify({ type: "rest", uri: "https://catalog.example/api/catalog", warehouse: "analytics" }, null, 2));
  const table = h("input", { name: "table", placeholder: "namespace.table", required: true });
  const keys = h("input", { name: "identifier_columns", placeholder: "default: the table's identifier fields" });
  const start = h("select", { name: "start" },
    h("option", { value: "snapshot" }, "snapshot: current state as inserts, then every commit"),
    h("option", { value: "latest" }, "latest: only commits after registration"),
    h("option", { value: "earliest" }, "earliest: every retained snapshot"));
  const submit = async (ev) => {
    ev.preventDefault();
    let body;
    try {
      body = { catalog: JSON.parse(catalog.value), table: table.value.trim(), start: start.value };
    } catch (e) {
      notice(`The catalog settings are not valid JSON: ${e.message}`);
      return;
    }
    if (keys.value.trim()) body.identifier_columns = keys.value.split(",").map((c) => c.trim()).filter(Boolean);
    try {
      const t = await api("POST", "/v1/tables", body);
      notice("");
      location.hash = `#/tables/${t.id}`;
    } catch (e) {
      notice(explain(e));
    }
  };
  render(
    h("h1", {}, "Register a table"),
    h("form", { class: "register", onsubmit: submit },
      h("label", {}, "Catalog (JSON)"), catalog,
      h("label", {}, "Table"), table,
      h("label", {}, "Identifier columns"), keys,
      h("label", {}, "Start"), start,
      h("span"), h("div", {}, h("button", { type: "submit" }, "Register"))));
}

// ---- Routing -----------------------------------------------------------------------

async function route() {
  clearTimeout(refreshTimer);
  const [, section, id] = (location.hash || "#/tables").split("/");
  for (const a of document.querySelectorAll("[data-nav]")) a.classList.toggle("active", a.dataset.nav === section);
  // Every render replaces the page, and with it any live tail; only lists refresh by
  // themselves, so a tail runs until the user leaves or acts.
  stopTail();
  try {
    if (section === "register") return registerView();
    if (section === "subscriptions") await (id ? subscriptionView(id) : subscriptionsView());
    else await (id ? tableView(id) : tablesView());
    if (!id) refreshTimer = setTimeout(route, 5000);
  } catch (e) {
    render(h("h1", {}, "icefeed"), h("p", { class: "error-text", id: "load-error" }, explain(e)));
  }
}

document.getElementById("token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const input = document.getElementById("token");
  sessionStorage.setItem(TOKEN_KEY, input.value.trim());
  input.value = "";
  input.placeholder = token() ? "token set (enter another to replace)" : "API token (when auth is on)";
  stopTail();
  route();
});
window.addEventListener("hashchange", route);
route();
