// The record list: filters and sorting kept in the URL, a summary strip, live refresh.
//
// Each row carries the marks of `ollama-tap records list` — truncated, cold, slow, error — as
// chips, and a slow or cold row is tinted so it stands out of a screenful. Slow is the
// DecodeSlowdown alert's test applied to the rows on screen: a decode rate under SLOW_SHARE
// of its model's median over the loaded rows, once that model has MIN_RATED rated rows.
//
// The state is the hash's query (`#/?model=llama3.2&outcome=ok&sort=-ttft&live=1`): a
// reload, a bookmark or the back link from a record brings the same list back. Every named
// field of the #filters form is a filter sent to the API as it is, so a new filter is
// one more field in index.html.

import { api, clearProblem, setStatus, showProblem } from "./api.js";
import { $, h } from "./dom.js";
import {
  OUTCOMES, count, decodeRate, isCold, localTime, quantile, rate, seconds, shortTime,
} from "./format.js";
import { summaryStrip } from "./summary.js";
import { replaceQuery } from "./views.js";

const PAGE_SIZE = 50;
const MAX_LIMIT = 1000; // ollama_tap/recorder/api.py MAX_LIMIT
const LIVE_MS = 5000;
const SLOW_SHARE = 0.7; // deploy/prometheus/rules/ollama-tap.rules.yml, DecodeSlowdown
const MIN_RATED = 5;

// What each sortable column (th[data-sort] in index.html) sorts by.
const SORT_KEYS = {
  started: (r) => r.started,
  client: (r) => clientOf(r),
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

// The name the app gave (header or rule), else its address.
function clientOf(r) {
  return r.client_name ?? r.client ?? "";
}

// Per model, the median decode rate of the loaded rows, where MIN_RATED rows have one.
function medianRates(records) {
  const rates = new Map();
  for (const r of records) {
    const value = decodeRate(r);
    if (value !== null) rates.set(r.model, [...(rates.get(r.model) ?? []), value]);
  }
  const medians = new Map();
  for (const [model, values] of rates) {
    if (values.length >= MIN_RATED) medians.set(model, quantile(values, 0.5));
  }
  return medians;
}

function isSlow(r, medians) {
  const value = decodeRate(r);
  const median = medians.get(r.model);
  return value !== null && median !== undefined && value < SLOW_SHARE * median;
}

// The marks, each with the reason as its tooltip.
function marks(r, medians) {
  const found = [];
  if (r.truncation) found.push(["truncated", `${r.truncation.kind} (${r.truncation.rule})`]);
  if (isCold(r)) found.push(["cold", `the model was loaded first: ${seconds(r.load)}`]);
  if (isSlow(r, medians)) {
    const median = rate(medians.get(r.model));
    found.push(["slow", `decode ${rate(decodeRate(r))}, under 70% of ${r.model}'s median ${median}`]);
  }
  if (r.outcome !== "ok") found.push(["error", r.error_message ?? r.outcome]);
  return found;
}

function recordRow(r, medians) {
  const href = `#/records/${encodeURIComponent(r.id)}`;
  const cell = (value, cls, title) => h("td", { class: cls, title }, ...[value].flat());
  const found = marks(r, medians);
  const names = found.map(([name]) => name);
  const tint = r.outcome !== "ok" ? "failed" : names.includes("slow") || names.includes("cold") ? "stands-out" : null;
  const client = clientOf(r);
  const row = h(
    "tr",
    { "data-id": r.id, "data-marks": names.join(" ") || null, class: tint },
    cell(h("a", { href, title: localTime(r.started) }, shortTime(r.started))),
    cell(client || "–", "client", client),
    cell(r.model ?? "–", "model", r.model),
    cell(r.endpoint, "opt-endpoint endpoint", r.endpoint),
    cell(count(r.status), "num opt-status"),
    cell(outcomeBadge(r.outcome)),
    cell(found.map(([name, why]) => h("span", { class: `mark-chip ${name}`, title: why }, name)), "marks"),
    cell(seconds(r.ttft), "num"),
    cell(seconds(r.duration), "num"),
    cell(r.load === null || r.load === undefined ? "–" : seconds(r.load), "num"),
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
  const medians = medianRates(list.records);
  $("#records tbody").replaceChildren(...sorted(list.records).map((r) => recordRow(r, medians)));
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
