// ollama-tap inspector, the context advice under the Loads view: per model and client over
// the last day, the share of prompts cut and the num_ctx that would have held them, with its
// KV cache (/_tap/api/context; docs/diagnoses.md, "Advice"). Text only ever becomes text nodes.

import { h } from "./dom.js";

export const WINDOW = "1d";

// Decimal units, as the server's advice sentence and `ollama ps` say sizes.
function size(value) {
  if (value == null) return "–";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let v = Math.abs(value);
  let i = 0;
  while (v >= 1000 && i < units.length - 1) {
    v /= 1000;
    i += 1;
  }
  return `${value < 0 ? "-" : ""}${i === 0 ? v.toFixed(0) : v.toFixed(1)} ${units[i]}`;
}

function needs(a) {
  if (a.num_ctx == null) return "–";
  return `${a.needed_exact ? "" : "≥"}${a.num_ctx.toLocaleString("en")}`;
}

function kv(a) {
  if (a.kv_bytes == null) return "–";
  const more = a.kv_bytes_now == null ? "" : ` (${a.kv_bytes >= a.kv_bytes_now ? "+" : ""}${size(a.kv_bytes - a.kv_bytes_now)})`;
  return `${a.kv_upper_bound ? "≤" : ""}${size(a.kv_bytes)}${more}`;
}

function cut(a) {
  return a.cut ? `${a.cut} (${Math.round(100 * a.cut_share)}%)` : "0";
}

function table(advice) {
  const head = ["model", "client", "requests", "cut", "shifted", "num_ctx", "needs", "KV cache (f16)", "advice"];
  return h(
    "table",
    { class: "records", id: "advice-table" },
    h("thead", {}, h("tr", {}, ...head.map((c) => h("th", {}, c)))),
    h(
      "tbody",
      {},
      ...advice.map((a) =>
        h(
          "tr",
          { "data-model": a.model, class: a.cut || a.overflowed ? "stands-out" : "" },
          h("td", {}, a.model),
          h("td", {}, a.client ?? "–"),
          h("td", { class: "num" }, String(a.requests)),
          h("td", { class: "num" }, cut(a)),
          h("td", { class: "num" }, String(a.overflowed)),
          h("td", { class: "num" }, a.context == null ? "–" : a.context.toLocaleString("en")),
          h("td", { class: "num" }, needs(a)),
          h("td", { class: "num" }, kv(a)),
          h("td", {}, a.advice),
        ),
      ),
    ),
  );
}

// The section, or a note saying why there is none; never throws (the loads stand alone).
export async function adviceSection() {
  const title = h("h3", {}, "Context: what would have held the prompts (last day)");
  let body = null;
  try {
    const resp = await fetch(new URL(`api/context?since=${WINDOW}`, document.baseURI), {
      credentials: "same-origin",
      headers: { Accept: "application/json" },
    });
    body = await resp.json().catch(() => null);
    if (!resp.ok) return h("section", { id: "advice" }, title, h("p", { class: "problem" }, body?.error ?? `${resp.status}`));
  } catch (error) {
    return h("section", { id: "advice" }, title, h("p", { class: "problem" }, String(error)));
  }
  const parts = body.advice.length
    ? [table(body.advice)]
    : [h("p", { class: "note", id: "advice-empty" }, "No generation or embedding request recorded in the last day.")];
  const legend = h(
    "p",
    { class: "note" },
    "needs: the largest prompt + output seen, rounded up to a multiple of 256 (llama.cpp pads every slot so); ≥ where a cut prompt's length is unknown. " +
      "KV cache: f16 keys and values of one slot at that context (× OLLAMA_NUM_PARALLEL), and in brackets what it adds to the context the model has now.",
  );
  const problem = body.problem ? [h("p", { class: "note", id: "advice-problem" }, body.problem)] : [];
  const section = h("section", { id: "advice" }, title, ...parts, legend, ...problem);
  section.dataset.rows = String(body.advice.length);
  return section;
}
