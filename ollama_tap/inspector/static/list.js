// The record list: filters and sorting kept in the URL, a summary strip, live refresh.
//
// The state is the hash's query (`#/?model=llama3.2&outcome=ok&sort=-ttft&live=1`): a
// reload, a bookmark or the back link from a record brings the same list back. Every named
// field of the #filters form is a filter sent to the API as it is, so a new filter is
// one more field in index.html.

import { api, clearProblem, setStatus, showProblem } from "./api.js";
import { $, h } from "./dom.js";
import {
  OUTCOMES, count, decodeRate, isCold, localTime, rate, seconds, shortTime,
} from "./format.js";
import { summaryStrip } from "./summary.js";
import { replaceQuery } from "./views.js";

const PAGE_SIZE = 50;
const MAX_LIMIT = 1000; // ollama_tap/recorder/api.py MAX_LIMIT
const LIVE_MS = 5000;

// What each sortable column (th[data-sort] in index.html) sorts by.
const SORT_KEYS = {
  started: (r) => r.started,
  model: (r) => r.model ?? "",
  endpoint: (r) => r.endpoint ?? "",
  status: (r) => r.status ?? -1,
  outcome: (r) => r.outcome,
  ttft: (r) => r.ttft ?? -1,
  duration: (r) => r.duration ?? -1,
  load: (r) => r.load ?? -1,
  tokens: (r) => r.eval_tokens ?? -1,
  decode: (r) => decodeRate(r) ?? -1,
};

const list = {
  cursor: null,
  records: [],
  loadedWith: null, // the filters the rows were loaded with, as a query string
  generation: 0, // a newer load (filters changed) makes an older reply stale
  sort: "",
  timer: null,
  models: new Set(),
  instances: new Set(),
  endpoints: new Set(),
};

function filterFields() {
  return [...$("#filters").elements].filter((el) => el.name);
}

function filterValues() {
  return Object.fromEntries(filterFields().map((el) => [el.name, el.value.trim()]));
}

function filterQuery() {
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(filterValues())) if (value) query.set(name, value);
  return query;
}

function stateQuery() {
  const query = filterQuery();
  if (list.sort) query.set("sort", list.sort);
  if ($("#live").checked) query.set("live", "1");
  return query;
}

function applyQuery(query) {
  for (const el of filterFields()) el.value = query.get(el.name) ?? "";
  const sort = query.get("sort") ?? "";
  list.sort = SORT_KEYS[sort.replace(/^-/, "")] ? sort : "";
  $("#live").checked = query.get("live") === "1";
}

function saveState() {
  replaceQuery(stateQuery());
  $(".back").setAttribute("href", location.hash || "#");
}

function outcomeBadge(outcome) {
  return h("span", { class: `outcome ${outcome === "ok" ? "good" : "bad"}` }, outcome);
}

function loadCell(r) {
  if (r.load === null || r.load === undefined) return "–";
  return isCold(r) ? [seconds(r.load), " ", h("span", { class: "cold" }, "cold")] : seconds(r.load);
}

function recordRow(r) {
  const href = `#/records/${encodeURIComponent(r.id)}`;
  const cell = (value, cls) => h("td", { class: cls }, ...[value].flat());
  const row = h(
    "tr",
    { "data-id": r.id, class: r.outcome === "ok" ? null : "failed" },
    cell(h("a", { href, title: localTime(r.started) }, shortTime(r.started))),
    cell(r.model ?? "–", "model"),
    cell(r.endpoint, "opt-endpoint"),
    cell(count(r.status), "num opt-status"),
    cell(outcomeBadge(r.outcome)),
    cell(seconds(r.ttft), "num"),
    cell(seconds(r.duration), "num"),
    cell(loadCell(r), "num"),
    cell(`${count(r.prompt_tokens)} / ${count(r.eval_tokens)}`, "num opt-tokens"),
    cell(rate(decodeRate(r)), "num"),
  );
  row.addEventListener("click", (event) => {
    if (!(event.target instanceof HTMLAnchorElement)) location.hash = href;
  });
  return row;
}

function sorted(records) {
  if (!list.sort) return records;
  const key = SORT_KEYS[list.sort.replace(/^-/, "")];
  const sign = list.sort.startsWith("-") ? -1 : 1;
  return [...records].sort((a, b) => {
    const [x, y] = [key(a), key(b)];
    return sign * (typeof x === "string" ? x.localeCompare(y) : x - y);
  });
}

function render() {
  $("#records tbody").replaceChildren(...sorted(list.records).map(recordRow));
  for (const th of document.querySelectorAll("#records th[data-sort]")) {
    const name = th.dataset.sort;
    const state = list.sort === name ? "ascending" : list.sort === `-${name}` ? "descending" : null;
    if (state) th.setAttribute("aria-sort", state);
    else th.removeAttribute("aria-sort");
  }
  $("#summary").replaceChildren(...summaryStrip(list.records));
  $("#summary").hidden = !list.records.length;
  $("#empty").hidden = list.records.length > 0;
}

function remember(set, datalist, value) {
  if (!value || set.has(value)) return;
  set.add(value);
  $(datalist).append(h("option", { value }));
}

// reset: the first page again (new filters, Refresh, live); else the page after the last.
async function loadList(reset, quiet = false) {
  const generation = ++list.generation;
  const filters = filterQuery().toString();
  if (!quiet) setStatus("loading…");
  // Live refresh reloads as many rows as are shown, so "Load more" is not undone.
  const limit = quiet ? Math.min(MAX_LIMIT, Math.max(PAGE_SIZE, list.records.length)) : PAGE_SIZE;
  try {
    const page = await api("records", {
      ...filterValues(),
      limit: String(limit),
      cursor: reset ? null : list.cursor,
    });
    if (generation !== list.generation) return;
    clearProblem();
    list.records = reset ? page.records : [...list.records, ...page.records];
    for (const r of page.records) {
      remember(list.models, "#models", r.model);
      remember(list.endpoints, "#endpoints", r.endpoint);
      remember(list.instances, "#instances", r.instance);
    }
    list.cursor = page.next_cursor;
    list.loadedWith = filters;
    $("#more").hidden = !list.cursor;
    render();
    const n = list.records.length;
    setStatus(`${n} record${n === 1 ? "" : "s"}${list.cursor ? " (more)" : ""}`);
  } catch (error) {
    if (generation !== list.generation) return;
    if (reset) list.records = [];
    render();
    $("#summary").hidden = true;
    $("#empty").hidden = true;
    $("#more").hidden = true;
    setStatus("");
    showProblem(error);
  }
}

function setLive() {
  clearInterval(list.timer);
  list.timer = $("#live").checked ? setInterval(() => loadList(true, true), LIVE_MS) : null;
}

function changed() {
  saveState();
  loadList(true);
}

function sortBy(name) {
  // Worst first on the first click (the longest TTFT, the newest), then the other way, then
  // the order the records were made in.
  const cycle = [`-${name}`, name, ""];
  list.sort = cycle[(cycle.indexOf(list.sort) + 1) % cycle.length];
  saveState();
  render();
}

export function showList({ query }) {
  document.title = "ollama-tap inspector";
  applyQuery(query);
  saveState();
  if (list.loadedWith !== filterQuery().toString()) loadList(true);
  else render();
  setLive();
}

export function hideList() {
  clearInterval(list.timer);
  list.timer = null;
}

export function initList() {
  const outcome = $("#filters select[name=outcome]");
  outcome.append(...OUTCOMES.map((o) => h("option", { value: o }, o)));
  $("#filters").addEventListener("submit", (event) => {
    event.preventDefault();
    changed();
  });
  outcome.addEventListener("change", changed);
  $("#refresh").addEventListener("click", () => loadList(true));
  $("#more").addEventListener("click", () => loadList(false));
  $("#live").addEventListener("change", () => {
    saveState();
    setLive();
  });
  for (const th of document.querySelectorAll("#records th[data-sort]")) {
    th.tabIndex = 0;
    th.addEventListener("click", () => sortBy(th.dataset.sort));
    th.addEventListener("keydown", (event) => {
      if (event.key !== "Enter" && event.key !== " ") return;
      event.preventDefault();
      sortBy(th.dataset.sort);
    });
  }
}
