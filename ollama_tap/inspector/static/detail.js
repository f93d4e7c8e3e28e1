// One record: the headline and waterfall first, then the timings, the facts, the token
// timeline, the bodies and the output.

import { api, clearProblem, showProblem } from "./api.js";
import { $, h, note } from "./dom.js";
import { gapSummary, kindClass, legend, markerLegend, pieceTitle, tokenTimeline, waterfall } from "./charts.js";
import {
  bytes, count, decodeRate, localTime, outputRate, prefillRate, rate, routeLacks, seconds,
} from "./format.js";
import { headline } from "./headline.js";
import { truncationBadge } from "./truncation.js";

const PIECE_TEXT_LIMIT = 5000;

function section(title, id, ...children) {
  return h("section", { class: "part", id }, h("h3", {}, title), ...children);
}

function textBlock(field, text) {
  return h("pre", { class: "text", "data-field": field }, text);
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
  // A row without a value is left out; why, is said once (routeLacks, under the headline)
  // or named in one line, never as rows of "–".
  const known = rows.filter(([, value]) => value !== "–");
  const unknown = rows.filter(([, value]) => value === "–").map(([name]) => name);
  const row = ([name, value, how]) =>
    h("tr", {}, h("th", {}, name), h("td", { class: "num" }, value), h("td", { class: "how" }, how));
  return h(
    "div",
    {},
    h("table", { class: "timings" }, h("tbody", {}, ...known.map(row))),
    unknown.length && !routeLacks(r) ? note(`Not reported for this reply: ${unknown.join(", ")}.`) : null,
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
  if ((!tl || !tl.offsets.length) && routeLacks(r)?.startsWith("Embeddings")) return null;
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
  const lacks = routeLacks(r);
  const parts = [
    h(
      "h2",
      {},
      h("span", { class: "model" }, r.model ?? "(no model)"),
      " ",
      h("span", { class: "endpoint" }, `${r.method} ${r.path}`),
      " ",
      h("span", { class: "when" }, localTime(r.started)),
    ),
    headline(r),
    truncationBadge(r),
    lacks ? h("p", { class: "route-note" }, lacks) : null,
    full ? null : h("p", { class: "metadata-mode" }, NOT_KEPT),
    section("Waterfall", "waterfall", markerLegend(r), waterfall(r), note(
      "Server phases on Ollama's clock from when it received the request; client times on " +
        "the proxy's clock from the request head. Both start at 0, so the gap between the " +
        "server and client TTFT marks is the client overhead (network, HTTP, proxy).",
    )),
    h(
      "div",
      { class: "columns" },
      section("Timings", "timings", timingsTable(r)),
      section("Exchange", "facts", facts([
        ["id", r.id],
        ["started", localTime(r.started)],
        ["endpoint", r.endpoint],
        ["status", count(r.status)],
        ["streamed", r.streamed ? "yes" : "no"],
        ["privacy mode", r.mode],
        ["done reason", r.done_reason],
        ["model digest", r.model_digest],
        ["client", r.client_name ? `${r.client_name} (${r.client ?? "address not kept"})` : r.client],
        ["instance", r.instance],
        ["upstream", r.route ? `${r.box} (${r.upstream})` : r.upstream],
        ["route", r.route],
        ["request / reply bytes", `${bytes(r.request_bytes)} / ${bytes(r.response_bytes)}`],
        ["output chunks", count(r.chunks)],
        ["Ollama's error", r.error_message],
        ["sent again", r.retried],
      ])),
    ),
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
  return parts.filter((part) => part !== null);
}

export async function showRecord({ id }, el) {
  const box = $("#record");
  box.replaceChildren(note("loading…"));
  window.scrollTo(0, 0);
  try {
    const r = await api(`records/${encodeURIComponent(id)}`);
    clearProblem();
    box.replaceChildren(...renderRecord(r));
    document.title = `${r.model ?? r.endpoint} · ollama-tap inspector`;
  } catch (error) {
    box.replaceChildren();
    showProblem(error);
  }
}
