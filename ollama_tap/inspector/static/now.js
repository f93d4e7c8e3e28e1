// ollama-tap inspector, the Now view: every exchange in flight, live, from
// /_tap/api/inflight?watch=1 (server-sent events, at most 4 a second).
//
// Values become text nodes only (textContent), never HTML, as in the other views.

import { registerView } from "./views.js";

const WATCH = new URL("api/inflight?watch=1", document.baseURI);

let source = null;

function cell(text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

function elapsed(s) {
  return s < 60 ? `${s.toFixed(1)} s` : `${Math.floor(s / 60)} min ${(s % 60).toFixed(0)} s`;
}

function row(x) {
  const tr = document.createElement("tr");
  tr.dataset.id = x.id;
  tr.className = x.phase;
  tr.append(
    cell(x.client || "–"),
    cell(x.box ? `${x.model || "–"}→${x.box}` : x.model || "–"),
    cell(x.endpoint),
    cell(x.phase, `phase ${x.phase}`),
    cell(x.position === null ? "" : String(x.position), "num"),
    cell(elapsed(x.elapsed), "num"),
    cell(String(x.outputs), "num"),
    cell(x.rate === null ? "–" : `${x.rate.toFixed(1)}/s`, "num"),
  );
  return tr;
}

function render(snapshot) {
  const waiting = Object.entries(snapshot.waiting)
    .map(([model, n]) => `${n} waiting for ${model || "(no model)"}`)
    .join(", ");
  document.querySelector("#now-summary").textContent =
    `${snapshot.in_flight} in flight${waiting ? `; ${waiting}` : ""}`;
  document.querySelector("#now-table tbody").replaceChildren(...snapshot.exchanges.map(row));
  document.querySelector("#now-empty").hidden = snapshot.in_flight > 0;
}

function start() {
  source = new EventSource(WATCH);
  source.onmessage = (event) => render(JSON.parse(event.data));
  // EventSource reconnects by itself; the line says so meanwhile.
  source.onerror = () => {
    document.querySelector("#now-summary").textContent = "reconnecting…";
  };
}

function stop() {
  source?.close();
  source = null;
}

registerView({
  name: "now",
  element: "#now-view",
  match: (path) => (path === "/now" ? {} : null),
  show() {
    document.title = "now · ollama-tap inspector";
    if (source === null) start();
  },
  hide: stop,
});
