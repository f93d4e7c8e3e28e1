// The strip above the list: what the loaded records of the filtered range add up to.
//
// Computed here, from the records the list has loaded (the first page and every "Load
// more"), so it always describes exactly the rows on screen.

import { h } from "./dom.js";
import { decodeRate, quantile, rate, seconds, share } from "./format.js";

function byModel(records) {
  const rates = new Map();
  for (const r of records) {
    const value = decodeRate(r);
    if (value === null) continue;
    const key = r.model ?? "(no model)";
    rates.set(key, [...(rates.get(key) ?? []), value]);
  }
  return [...rates.entries()]
    .map(([model, values]) => [model, quantile(values, 0.5), values.length])
    .sort((a, b) => b[2] - a[2]);
}

function stat(label, value, cls) {
  return h("span", { class: `stat ${cls ?? ""}` }, h("span", { class: "label" }, label), " ", h("span", { class: "v" }, value));
}

export function summaryStrip(records) {
  if (!records.length) return [];
  const errors = records.filter((r) => r.outcome !== "ok").length;
  const ttfts = records.map((r) => r.ttft);
  const models = byModel(records);
  return [
    stat("requests", String(records.length)),
    stat("errors", `${errors} (${share(errors, records.length)})`, errors ? "bad" : ""),
    stat("TTFT p50", seconds(quantile(ttfts, 0.5))),
    stat("p95", seconds(quantile(ttfts, 0.95))),
    models.length
      ? h(
          "span",
          { class: "stat rates" },
          h("span", { class: "label" }, "decode (median)"),
          ...models.map(([model, value]) => h("span", { class: "rate" }, `${model} `, h("span", { class: "v" }, rate(value)))),
        )
      : null,
  ];
}
