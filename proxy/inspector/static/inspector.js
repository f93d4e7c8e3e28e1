// ollama-tap inspector: the recorded exchanges from /_tap/api, listed and drawn one by one.
//
// Same-origin fetches carry the HttpOnly cookie that /_tap/?token=… set. Every element is
// built with DOM calls and recorded text only ever becomes a text node (textContent,
// append of a string): it is never parsed as HTML. Nothing runs inline (the CSP is
// default-src 'self'), so styles are classes and geometry is SVG attributes.

const API = new URL("api/", document.baseURI);
const PAGE_SIZE = 50;
// proxy/exchange.py Outcome, in its order (tests/inspector keeps the two in step).
const OUTCOMES = [
  "ok", "upstream_error", "stream_error", "incomplete", "client_disconnected",
  "upstream_unreachable", "proxy_error", "shutdown",
];
// proxy/exchange.py OutputKind.
const KINDS = ["content", "thinking", "tool_call"];
const KIND_LABELS = { content: "content", thinking: "thinking", tool_call: "tool call" };
const SVG_NS = "http://www.w3.org/2000/svg";
const PIECE_TEXT_LIMIT = 5000;
// ---------------------------------------------------------------------------------------
// DOM helpers: children are nodes or strings (strings become text nodes).

function build(el, attrs, children) {
  for (const [name, value] of Object.entries(attrs ?? {})) {
    if (value !== null && value !== undefined && value !== false) el.setAttribute(name, value);
  }
  el.append(...children.filter((c) => c !== null && c !== undefined));
  return el;
}

function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

function svg(tag, attrs, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

const $ = (selector) => document.querySelector(selector);

// ---------------------------------------------------------------------------------------
// Numbers as people read them.

function seconds(value) {
  if (value === null || value === undefined) return "–";
  const abs = Math.abs(value);
  if (abs === 0) return "0";
  if (abs < 1e-3) return `${(value * 1e6).toFixed(0)} µs`;
  if (abs < 1) return `${(value * 1e3).toFixed(abs < 0.01 ? 2 : 1)} ms`;
  if (abs < 60) return `${value.toFixed(2)} s`;
  return `${Math.floor(value / 60)} min ${(value % 60).toFixed(0)} s`;
}

function count(value) {
  return value === null || value === undefined ? "–" : String(value);
}

function rate(value, unit = "tok/s") {
  return value === null ? "–" : `${value.toFixed(value < 10 ? 2 : 1)} ${unit}`;
}

function bytes(value) {
  if (value === null || value === undefined) return "–";
  if (value < 1024) return `${value} B`;
  if (value < 1024 * 1024) return `${(value / 1024).toFixed(1)} KiB`;
  return `${(value / 1024 / 1024).toFixed(1)} MiB`;
}

function localTime(unixSeconds) {
  const d = new Date(unixSeconds * 1000);
  const two = (n) => String(n).padStart(2, "0");
  return (
    `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ` +
    `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`
  );
}

// The README's guards (Measurements): decode rate only with eval_count >= 2 and eval_duration >= 1 ms; prefill
// rate only when Ollama reported the cached count.
function decodeRate(r) {
  return r.eval_tokens >= 2 && r.decode >= 1e-3 ? r.eval_tokens / r.decode : null;
}

function prefillRate(r) {
  const fresh = (r.prompt_tokens ?? 0) - (r.cached_tokens ?? 0);
  return r.cached_tokens !== null && r.cached_tokens !== undefined && fresh > 0 && r.prefill > 0
    ? fresh / r.prefill
    : null;
}

function outputRate(timeline) {
  const n = timeline?.offsets.length ?? 0;
  const span = n ? timeline.offsets[n - 1] - timeline.offsets[0] : 0;
  return n >= 2 && span > 0 ? (n - 1) / span : null;
}

// ---------------------------------------------------------------------------------------
// The API.

class Unauthorized extends Error {}

async function api(path, params = {}) {
  const url = new URL(path, API);
  for (const [name, value] of Object.entries(params)) {
    if (value) url.searchParams.set(name, value);
  }
  const resp = await fetch(url, {
    credentials: "same-origin",
    headers: { Accept: "application/json" },
  });
  if (resp.status === 401) throw new Unauthorized();
  const body = await resp.json().catch(() => null);
  if (!resp.ok) throw new Error(body?.error ?? `${resp.status} ${resp.statusText}`);
  return body;
}

// Shown on a 401: the cookie is missing or stale (a new token, another browser profile).
function notSignedIn() {
  return [
    h("strong", {}, "Not signed in. "),
    "This page needs the admin token. Open the inspector URL that ",
    h("code", {}, "ollama-tap serve"),
    " printed (it ends in /_tap/?token=…) once in this browser; the token is also kept " +
      "in the file admin-token beside the recordings database.",
  ];
}

function showProblem(error) {
  const box = $("#problem");
  const auth = error instanceof Unauthorized;
  box.replaceChildren(...(auth ? notSignedIn() : [`Could not load: ${error.message}`]));
  box.classList.toggle("auth", auth);
  box.hidden = false;
}

function clearProblem() {
  $("#problem").hidden = true;
}

function setStatus(text) {
  $("#status").textContent = text;
}

// ---------------------------------------------------------------------------------------
// The list.

const list = {
  cursor: null,
  shown: 0,
  loaded: false,
  generation: 0, // a newer load (filters changed) makes an older reply stale
  models: new Set(),
  endpoints: new Set(),
  instances: new Set(),
};

function filterValues() {
  const form = new FormData($("#filters"));
  return {
    model: String(form.get("model") ?? "").trim(),
    endpoint: String(form.get("endpoint") ?? "").trim(),
    outcome: String(form.get("outcome") ?? ""),
    instance: String(form.get("instance") ?? "").trim(),
  };
}

function outcomeBadge(outcome) {
  return h("span", { class: `outcome ${outcome === "ok" ? "good" : "bad"}` }, outcome);
}

function recordRow(r) {
  const href = `#/records/${encodeURIComponent(r.id)}`;
  const cell = (value, cls) => h("td", { class: cls }, value);
  const row = h(
    "tr",
    { "data-id": r.id },
    cell(h("a", { href }, localTime(r.started))),
    cell(r.model ?? "–"),
    cell(r.endpoint),
    cell(count(r.status), "num"),
    cell(outcomeBadge(r.outcome)),
    cell(seconds(r.ttft), "num"),
    cell(seconds(r.duration), "num"),
    cell(`${count(r.prompt_tokens)} / ${count(r.eval_tokens)}`, "num"),
    cell(rate(decodeRate(r)), "num"),
  );
  row.addEventListener("click", (event) => {
    if (!(event.target instanceof HTMLAnchorElement)) location.hash = href;
  });
  return row;
}

function remember(set, datalist, value) {
  if (!value || set.has(value)) return;
  set.add(value);
  $(datalist).append(h("option", { value }));
}

async function loadList(reset) {
  const tbody = $("#records tbody");
  if (reset) {
    list.cursor = null;
    list.shown = 0;
  }
  const generation = ++list.generation;
  setStatus("loading…");
  try {
    const page = await api("records", {
      ...filterValues(),
      limit: String(PAGE_SIZE),
      cursor: list.cursor,
    });
    if (generation !== list.generation) return;
    clearProblem();
    if (reset) tbody.replaceChildren();
    for (const r of page.records) {
      tbody.append(recordRow(r));
      remember(list.models, "#models", r.model);
      remember(list.endpoints, "#endpoints", r.endpoint);
      remember(list.instances, "#instances", r.instance);
    }
    list.cursor = page.next_cursor;
    list.shown += page.records.length;
    list.loaded = true;
    $("#more").hidden = !list.cursor;
    $("#empty").hidden = list.shown > 0;
    setStatus(`${list.shown} record${list.shown === 1 ? "" : "s"}${list.cursor ? " (more)" : ""}`);
  } catch (error) {
    if (generation !== list.generation) return;
    if (reset) tbody.replaceChildren();
    $("#more").hidden = true;
    setStatus("");
    showProblem(error);
  }
}

// ---------------------------------------------------------------------------------------
// SVG drawing: one linear scale, axis ticks on 1-2-5 steps.

function ticks(max, wanted = 8) {
  const raw = max / wanted;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) ?? 10 * power;
  const out = [];
  for (let t = 0; t <= max * (1 + 1e-9); t += step) out.push(t);
  return out;
}

function axis(x, max, y, height) {
  const g = svg("g", { class: "axis" });
  for (const t of ticks(max)) {
    g.append(
      svg("line", { x1: x(t), x2: x(t), y1: 0, y2: height, class: "grid" }),
      svg("text", { x: x(t), y, "text-anchor": "middle" }, seconds(t)),
    );
  }
  return g;
}

function scale(max, left, right) {
  const span = max > 0 ? max : 1e-3;
  return (t) => left + ((right - left) * t) / span;
}

function chart(cls, width, height, label) {
  return svg("svg", {
    class: cls,
    viewBox: `0 0 ${width} ${height}`,
    width: "100%",
    role: "img",
    "aria-label": label,
  });
}

// The server phases (Ollama's clock, from when it received the request) and the client's
// view (the proxy's clock, from the request head), both starting at 0: the distance
// between the two TTFT marks is then the client overhead.
function waterfall(r) {
  const W = 960;
  const left = 150;
  const right = W - 110;
  const rowH = 24;
  const phases = [];
  let at = 0;
  if (r.total !== null && r.total !== undefined) {
    for (const [name, value] of [
      ["load", r.load],
      ["queue wait", r.queue_wait],
      ["prefill", r.prefill],
      ["decode", r.decode],
    ]) {
      phases.push({ name, start: at, length: value ?? 0, cls: name.replace(" ", "-") });
      at += value ?? 0;
    }
    phases.push({ name: "server total", start: 0, length: r.total, cls: "total" });
  }
  const client = r.duration ?? 0;
  phases.push({ name: "client (proxy)", start: 0, length: client, cls: "client" });
  const max = Math.max(at, r.total ?? 0, client, r.ttft ?? 0, r.server_ttft ?? 0);
  const x = scale(max, left, right);
  const height = phases.length * rowH + 56;
  const plotBottom = phases.length * rowH + 8;
  const root = chart("waterfall", W, height, "server phases and client times");
  root.append(axis(x, max, height - 6, plotBottom));
  phases.forEach((p, i) => {
    const y = 8 + i * rowH;
    const barWidth = Math.max(x(p.start + p.length) - x(p.start), p.length > 0 ? 1 : 0);
    root.append(
      svg("text", { x: left - 8, y: y + 15, "text-anchor": "end", class: "label" }, p.name),
      svg(
        "rect",
        { x: x(p.start), y: y + 3, width: barWidth, height: rowH - 8, class: `phase ${p.cls}` },
        svg("title", {}, `${p.name}: ${seconds(p.length)}`),
      ),
      svg("text", { x: x(p.start + p.length) + 6, y: y + 15, class: "value" }, seconds(p.length)),
    );
  });
  const marks = [
    ["server TTFT", r.server_ttft, "server-ttft"],
    ["client TTFT", r.ttft, "client-ttft"],
  ];
  for (const [name, value, cls] of marks) {
    if (value === null || value === undefined) continue;
    root.append(
      svg(
        "line",
        { x1: x(value), x2: x(value), y1: 2, y2: plotBottom, class: `marker ${cls}` },
        svg("title", {}, `${name}: ${seconds(value)}`),
      ),
    );
  }
  if (r.server_ttft !== null && r.ttft !== null && r.client_overhead !== null) {
    const y = plotBottom + 14;
    const a = x(Math.min(r.server_ttft, r.ttft));
    const b = x(Math.max(r.server_ttft, r.ttft));
    root.append(
      svg("line", { x1: a, x2: b, y1: y, y2: y, class: "overhead" }),
      svg(
        "text",
        { x: b + 6, y: y + 4, class: "value" },
        `client overhead ${seconds(r.client_overhead)}`,
      ),
    );
  }
  return root;
}

function markerLegend(r) {
  return h(
    "p",
    { class: "legend" },
    r.server_ttft === null ? null : h("span", { class: "swatch server-key" }, `server TTFT ${seconds(r.server_ttft)}`),
    r.ttft === null ? null : h("span", { class: "swatch marker-key" }, `client TTFT ${seconds(r.ttft)}`),
  );
}

function kindClass(kind) {
  return KINDS.includes(kind) ? `kind-${kind}` : "kind-other";
}

function pieceTitle(tl, i) {
  const gap = i ? tl.offsets[i] - tl.offsets[i - 1] : null;
  const head =
    `#${i + 1} ${KIND_LABELS[tl.kinds[i]] ?? tl.kinds[i]} at ${seconds(tl.offsets[i])}` +
    (gap === null ? "" : ` (+${seconds(gap)})`) +
    `, ${tl.bytes[i]} B on the wire`;
  return tl.texts ? `${head}: ${JSON.stringify(tl.texts[i])}` : head;
}

// One mark per output piece at its offset, coloured by kind; below, each piece's gap to the
// one before it, so stalls stand out.
function tokenTimeline(r) {
  const tl = r.timeline;
  const n = tl.offsets.length;
  const W = 960;
  const left = 60;
  const right = W - 16;
  const max = Math.max(r.duration ?? 0, tl.offsets[n - 1] ?? 0);
  const x = scale(max, left, right);
  const gaps = tl.offsets.map((t, i) => (i ? t - tl.offsets[i - 1] : 0));
  const maxGap = Math.max(...gaps, 0);
  const strip = { top: 8, height: 34 };
  const plot = { top: 58, height: 90 };
  const bottom = plot.top + plot.height;
  const root = chart("timeline", W, bottom + 24, `${n} output pieces over time`);
  root.append(
    axis(x, max, bottom + 18, bottom),
    svg("text", { x: left - 8, y: strip.top + 22, "text-anchor": "end", class: "label" }, "pieces"),
    svg("text", { x: left - 8, y: plot.top + 10, "text-anchor": "end", class: "label" }, "gap"),
    svg("text", { x: left - 8, y: plot.top + 24, "text-anchor": "end", class: "value" }, seconds(maxGap)),
    svg("line", { x1: left, x2: right, y1: bottom, y2: bottom, class: "baseline" }),
  );
  if (r.ttft !== null && r.ttft !== undefined) {
    root.append(
      svg(
        "line",
        { x1: x(r.ttft), x2: x(r.ttft), y1: 0, y2: bottom, class: "marker client-ttft" },
        svg("title", {}, `client TTFT: ${seconds(r.ttft)}`),
      ),
    );
  }
  const marks = svg("g", { class: "marks" });
  const gapBars = svg("g", { class: "gaps" });
  for (let i = 0; i < n; i++) {
    const cx = x(tl.offsets[i]);
    const cls = kindClass(tl.kinds[i]);
    marks.append(
      svg(
        "rect",
        { x: cx - 1, y: strip.top, width: 2, height: strip.height, class: `mark ${cls}` },
        svg("title", {}, pieceTitle(tl, i)),
      ),
    );
    if (i && maxGap > 0) {
      const gh = Math.max((plot.height * gaps[i]) / maxGap, 0.5);
      gapBars.append(
        svg("rect", { x: cx - 1, y: bottom - gh, width: 2, height: gh, class: `gap ${cls}` }),
      );
    }
  }
  root.append(gapBars, marks);
  return root;
}

function legend() {
  return h(
    "p",
    { class: "legend" },
    ...KINDS.map((k) => h("span", { class: `swatch ${kindClass(k)}` }, KIND_LABELS[k])),
    h("span", { class: "swatch marker-key" }, "client TTFT"),
  );
}

function gapSummary(tl) {
  const gaps = tl.offsets.slice(1).map((t, i) => t - tl.offsets[i]);
  if (!gaps.length) return "one piece: no inter-token gaps";
  const sorted = [...gaps].sort((a, b) => a - b);
  const median = sorted[Math.floor(sorted.length / 2)];
  const p95 = sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.95))];
  return (
    `${tl.offsets.length} pieces · gaps: median ${seconds(median)}, p95 ${seconds(p95)}, ` +
    `max ${seconds(sorted[sorted.length - 1])}`
  );
}

// ---------------------------------------------------------------------------------------
// One record.

function section(title, id, ...children) {
  return h("section", { class: "part", id }, h("h3", {}, title), ...children);
}

function textBlock(field, text) {
  return h("pre", { class: "text", "data-field": field }, text);
}

function note(text) {
  return h("p", { class: "note" }, text);
}

function facts(rows) {
  const dl = h("dl", { class: "facts" });
  for (const [name, value] of rows) {
    if (value === null || value === undefined || value === "") continue;
    dl.append(h("dt", {}, name), h("dd", {}, value));
  }
  return dl;
}

function timingsTable(r) {
  const rows = [
    ["client TTFT", seconds(r.ttft), "first output chunk written to the client"],
    ["time to first content", seconds(r.ttfc), "the same, thinking not counted"],
    ["server TTFT", seconds(r.server_ttft), "Ollama's clock: first chunk − request start"],
    ["client overhead", seconds(r.client_overhead), "client TTFT − server TTFT"],
    ["load", seconds(r.load), "body read, scheduler wait and model load"],
    ["queue wait", seconds(r.queue_wait), "total − load − prefill − decode"],
    ["prefill", seconds(r.prefill), "prompt_eval_duration (includes the first token)"],
    ["decode", seconds(r.decode), "eval_duration"],
    ["server total", seconds(r.total), "total_duration"],
    ["duration", seconds(r.duration), "until the last byte was written"],
    ["prompt tokens", count(r.prompt_tokens), "prompt_eval_count"],
    ["cached prompt tokens", count(r.cached_tokens), "prompt_eval_cached_count"],
    ["output tokens", count(r.eval_tokens), "eval_count"],
    ["context size", count(r.context_len), "ids in the reply's context"],
    ["decode rate", rate(decodeRate(r)), "eval_count / eval_duration"],
    ["prefill rate", rate(prefillRate(r)), "uncached prompt tokens / prefill"],
    [
      "observed output rate",
      rate(outputRate(r.timeline), "pieces/s"),
      "(pieces − 1) / their time span",
    ],
  ];
  return h(
    "table",
    { class: "timings" },
    h(
      "tbody",
      {},
      ...rows.map(([name, value, how]) =>
        h("tr", {}, h("th", {}, name), h("td", { class: "num" }, value), h("td", { class: "how" }, how)),
      ),
    ),
  );
}

function bodyBlock(field, body) {
  if (!body) return note("none recorded");
  const meta = `${bytes(body.size)}${body.sha256 ? ` · sha256 ${body.sha256}` : ""}`;
  const text = "json" in body ? JSON.stringify(body.json, null, 2) : (body.text ?? "");
  return h(
    "div",
    {},
    note(body.truncated ? `${meta} · truncated to the first 1 MiB` : meta),
    textBlock(field, text),
  );
}

const NOT_KEPT =
  "Recorded in metadata mode: the request body, output, thinking, tool calls, the text of " +
  "the pieces, the context ids, headers, query string and client address were not kept. " +
  "Timings, token counts, sizes, outcome and the chunk offsets, kinds and sizes were.";

function metadataOnly(r) {
  return r.mode !== "full";
}

function outputParts(r) {
  if (metadataOnly(r)) {
    return [section("Output", "output", note("not kept (metadata mode)"))];
  }
  const parts = [
    section(
      "Output",
      "output",
      r.output ? textBlock("output", r.output) : note("no content output"),
    ),
  ];
  if (r.thinking) parts.push(section("Thinking", "thinking", textBlock("thinking", r.thinking)));
  if (r.tool_calls?.length) {
    parts.push(
      section("Tool calls", "tool-calls", textBlock("tool_calls", JSON.stringify(r.tool_calls, null, 2))),
    );
  }
  return parts;
}

function piecesText(tl) {
  const n = Math.min(tl.texts.length, PIECE_TEXT_LIMIT);
  const spans = [];
  for (let i = 0; i < n; i++) {
    spans.push(
      h("span", { class: `piece ${kindClass(tl.kinds[i])}`, title: pieceTitle(tl, i) }, tl.texts[i]),
    );
  }
  return h(
    "details",
    {},
    h("summary", {}, "the pieces as they arrived"),
    h("p", { class: "pieces" }, ...spans),
    n < tl.texts.length ? note(`first ${n} of ${tl.texts.length} pieces shown`) : null,
  );
}

function timelinePart(r) {
  const tl = r.timeline;
  if (!tl || !tl.offsets.length) {
    return section(
      "Token timeline",
      "token-timeline",
      note("no chunk timeline: it is kept only for streamed inference replies with output"),
    );
  }
  return section(
    "Token timeline",
    "token-timeline",
    legend(),
    tokenTimeline(r),
    note(gapSummary(tl)),
    tl.text_truncated
      ? note("piece text stopped being kept after 1 MiB; later pieces have offsets and sizes only")
      : null,
    tl.texts ? piecesText(tl) : note("piece text not kept (metadata mode)"),
  );
}

function contextPart(r) {
  const dc = r.decoded_context ?? r.context;
  const about = note(
    "Only non-raw /api/generate replies carry a context (a field Ollama has deprecated); " +
      "it is decoded with the vocabulary of the model digest the record was made with.",
  );
  if (!dc || Array.isArray(dc)) return null;
  if (dc.unavailable || dc.reason) {
    return section(
      "Decoded context",
      "context",
      h("p", { class: "unavailable" }, `unavailable: ${dc.unavailable ?? dc.reason}`),
      about,
    );
  }
  return section(
    "Decoded context",
    "context",
    note(`${count(dc.ids_count)} ids · vocabulary from ${dc.vocabulary ?? "–"}`),
    textBlock("context", dc.text ?? ""),
    about,
  );
}

function headersPart(r) {
  const req = r.request?.headers;
  const resp = r.response?.headers;
  if (!req && !resp) return null;
  const table = (headers) =>
    facts(Object.entries(headers ?? {}).map(([name, value]) => [name, String(value)]));
  return h(
    "details",
    { class: "part" },
    h("summary", {}, "headers (allow-listed; credentials are never stored)"),
    h("h4", {}, "request"),
    table(req),
    h("h4", {}, "response"),
    table(resp),
  );
}

function renderRecord(r) {
  const full = !metadataOnly(r);
  const parts = [
    h(
      "h2",
      {},
      h("span", { class: "model" }, r.model ?? "(no model)"),
      " ",
      h("span", { class: "endpoint" }, `${r.method} ${r.path}`),
      " ",
      outcomeBadge(r.outcome),
    ),
    full ? null : h("p", { class: "metadata-mode" }, NOT_KEPT),
    facts([
      ["id", r.id],
      ["started", localTime(r.started)],
      ["endpoint", r.endpoint],
      ["status", count(r.status)],
      ["streamed", r.streamed ? "yes" : "no"],
      ["privacy mode", r.mode],
      ["done reason", r.done_reason],
      ["model digest", r.model_digest],
      ["client", r.client],
      ["instance", r.instance],
      ["upstream", r.upstream],
      ["request / reply bytes", `${bytes(r.request_bytes)} / ${bytes(r.response_bytes)}`],
      ["output chunks", count(r.chunks)],
      ["Ollama's error", r.error_message],
      ["sent again", r.retried],
    ]),
    section("Timings", "timings", timingsTable(r)),
    section("Waterfall", "waterfall", markerLegend(r), waterfall(r), note(
      "Server phases on Ollama's clock from when it received the request; client times on " +
        "the proxy's clock from the request head. Both start at 0, so the gap between the " +
        "server and client TTFT marks is the client overhead (network, HTTP, proxy).",
    )),
    timelinePart(r),
    section(
      "Request body",
      "request-body",
      full ? bodyBlock("request", r.request?.body) : note("not kept (metadata mode)"),
    ),
    ...outputParts(r),
    contextPart(r),
    full && r.response?.body
      ? h("details", { class: "part" }, h("summary", {}, "final reply object"),
          bodyBlock("reply", r.response.body))
      : null,
    headersPart(r),
  ];
  $("#record").replaceChildren(...parts.filter((part) => part !== null));
}

async function loadRecord(id) {
  $("#record").replaceChildren(note("loading…"));
  try {
    const r = await api(`records/${encodeURIComponent(id)}`);
    clearProblem();
    renderRecord(r);
    document.title = `${r.model ?? r.endpoint} · ollama-tap inspector`;
  } catch (error) {
    $("#record").replaceChildren();
    showProblem(error);
  }
}

// ---------------------------------------------------------------------------------------
// Routing: #/records/<id> shows one record, anything else the list (kept as it was).

function route() {
  const match = /^#\/records\/(.+)$/.exec(location.hash);
  $("#record-view").hidden = !match;
  $("#list-view").hidden = Boolean(match);
  if (match) {
    loadRecord(decodeURIComponent(match[1]));
    window.scrollTo(0, 0);
  } else {
    document.title = "ollama-tap inspector";
    if (!list.loaded) loadList(true);
  }
}

function init() {
  const outcome = $("#filters select[name=outcome]");
  outcome.append(...OUTCOMES.map((o) => h("option", { value: o }, o)));
  $("#filters").addEventListener("submit", (event) => {
    event.preventDefault();
    loadList(true);
  });
  outcome.addEventListener("change", () => loadList(true));
  $("#refresh").addEventListener("click", () => loadList(true));
  $("#more").addEventListener("click", () => loadList(false));
  window.addEventListener("hashchange", route);
  route();
}

init();
