// ollama-tap inspector, the Loads view (#/loads): the recent model loads from /_tap/api/loads,
// a timeline per model with causes colour-coded, and a table; each load links to the record
// of the request that triggered it; under them, the context advice (advice.js). As in the
// other views, recorded text only ever becomes a text node, and colours are SVG presentation
// attributes (the CSP allows no inline style).

import { adviceSection } from "./advice.js";
import { h, svg } from "./dom.js";
import { registerView } from "./views.js";

// ollama_tap/loads/events.py Cause, in its order.
export const CAUSE_COLOURS = {
  first_load: "#4c78a8",
  expired: "#72b7b2",
  options_changed: "#e45756",
  evicted: "#f58518",
  unloaded: "#54a24b",
  oom_flush: "#b279a2",
  runner_died: "#9d755d",
  restart: "#bab0ac",
  unknown: "#888888",
};
const WIDTH = 900;
const ROW = 28;
const LEFT = 170;

function recordLink(id, text) {
  return id ? h("a", { href: `#/records/${encodeURIComponent(id)}` }, text ?? id) : "–";
}

function when(unixSeconds) {
  return new Date(unixSeconds * 1000).toLocaleString();
}

function legend() {
  return h(
    "p",
    { class: "legend", id: "loads-legend" },
    ...Object.entries(CAUSE_COLOURS).map(([cause, colour]) =>
      h(
        "span",
        { "data-cause": cause },
        svg("svg", { width: 12, height: 12 }, svg("rect", { width: 12, height: 12, fill: colour })),
        ` ${cause} `,
      ),
    ),
  );
}

// The model, and its box when the proxy fronts several.
const where = (e) => (e.box ? `${e.model}→${e.box}` : e.model);

// One row per model (per box); each load is a mark at its time, a link to its triggering record.
function timeline(events) {
  const models = [...new Set(events.map(where))].sort();
  const times = events.map((e) => e.at);
  const first = Math.min(...times);
  const span = Math.max(...times) - first || 1;
  const x = (at) => LEFT + ((at - first) / span) * (WIDTH - LEFT - 20);
  const height = models.length * ROW + 10;
  const chart = svg("svg", {
    class: "loads-timeline", width: WIDTH, height, viewBox: `0 0 ${WIDTH} ${height}`,
    role: "img", "aria-label": "model loads over time",
  });
  models.forEach((model, i) => {
    const y = i * ROW + ROW / 2 + 5;
    chart.append(
      svg("text", { x: 4, y: y + 4, class: "model-name" }, model),
      svg("line", { x1: LEFT, x2: WIDTH - 10, y1: y, y2: y, stroke: "#ccc" }),
    );
    for (const e of events.filter((ev) => where(ev) === model)) {
      const mark = svg(
        "circle",
        { cx: x(e.at), cy: y, r: 7, fill: CAUSE_COLOURS[e.cause] ?? CAUSE_COLOURS.unknown,
          class: `load-mark cause-${e.cause}`, "data-id": e.id },
        svg("title", {}, `${e.cause}${e.detail ? ": " + e.detail : ""} (${when(e.at)})`),
      );
      chart.append(e.request ? svg("a", { href: `#/records/${encodeURIComponent(e.request)}` }, mark) : mark);
    }
  });
  return chart;
}

function table(events) {
  const head = ["time", "model", "cause", "detail", "client", "request", "load", "waited"];
  return h(
    "table",
    { class: "records", id: "loads-table" },
    h("thead", {}, h("tr", {}, ...head.map((c) => h("th", {}, c)))),
    h(
      "tbody",
      {},
      ...events.map((e) =>
        h(
          "tr",
          { "data-id": e.id, "data-cause": e.cause },
          h("td", {}, when(e.at)),
          h("td", {}, where(e)),
          h("td", {}, h("span", { class: "cause" }, e.cause)),
          h("td", {}, e.detail || ""),
          h("td", {}, e.client ?? "–"),
          h("td", {}, recordLink(e.request)),
          h("td", { class: "num" }, e.load_duration == null ? "–" : `${e.load_duration.toFixed(2)} s`),
          h("td", { class: "num" }, String(e.waited.length)),
        ),
      ),
    ),
  );
}

async function render(view) {
  view.replaceChildren(h("h2", {}, "Loads"), h("p", { class: "note" }, "loading…"));
  const resp = await fetch(new URL("api/loads?limit=500", document.baseURI), {
    credentials: "same-origin",
    headers: { Accept: "application/json" },
  });
  const body = await resp.json().catch(() => null);
  if (!resp.ok) {
    view.replaceChildren(h("h2", {}, "Loads"), h("p", { class: "problem" }, body?.error ?? `${resp.status}`));
    return;
  }
  const events = body.loads;
  const parts = events.length
    ? [legend(), timeline(events), table(events)]
    : [h("p", { class: "note", id: "loads-empty" }, "No model loads seen since the proxy started.")];
  view.replaceChildren(h("h2", {}, "Loads"), ...parts, await adviceSection());
  view.dataset.loaded = String(events.length);
}

document.querySelector("main").append(h("section", { id: "loads-view", class: "view", hidden: "" }));
registerView({
  name: "loads",
  element: "#loads-view",
  match: (path) => (path === "/loads" ? {} : null),
  show(_params, section) {
    document.title = "Loads · ollama-tap inspector";
    delete section.dataset.loaded;
    render(section);
  },
});
