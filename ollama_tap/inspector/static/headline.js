// The first line of a record: outcome, client TTFT, decode rate, and what stands out.
//
// What stands out is a list of checks, each `(record) => text | null`; another module adds
// one with `registerStandout(check)` (truncation, say) and it shows as one more chip.

import { h } from "./dom.js";
import { decodeRate, isCold, rate, seconds, share } from "./format.js";

const standouts = [];

export function registerStandout(check) {
  standouts.push(check);
}

// A phase "stands out" at a second or more and 30% or more of Ollama's own time.
function longPhase(r, key, name) {
  const value = r[key];
  if (!value || !r.total || value < 1 || value / r.total < 0.3) return null;
  return `long ${name} ${seconds(value)} (${share(value, r.total)} of the server time)`;
}

registerStandout((r) => (isCold(r) ? `cold start: load ${seconds(r.load)}` : null));
registerStandout((r) => longPhase(r, "queue_wait", "queue"));
registerStandout((r) => longPhase(r, "prefill", "prefill"));
registerStandout((r) => {
  const guard = r.reload_guard; // the one change the proxy made to the body (--reload-guard)
  if (!guard) return null;
  return `reload guard sent ${guard.changes.map((c) => `${c.field} ${c.to}, not ${c.from}`).join("; ")}`;
});
registerStandout((r) => {
  const said = r.error_message;
  return said ? `Ollama said: ${said.length > 120 ? `${said.slice(0, 119)}…` : said}` : null;
});

export function headline(r) {
  const good = r.outcome === "ok";
  const facts = [
    h("span", { class: `outcome ${good ? "good" : "bad"}` }, r.outcome),
    r.ttft === null ? null : h("span", { class: "fact" }, "TTFT ", h("span", { class: "v" }, seconds(r.ttft))),
    decodeRate(r) === null
      ? null
      : h("span", { class: "fact" }, "decode ", h("span", { class: "v" }, rate(decodeRate(r)))),
    r.duration === null ? null : h("span", { class: "fact" }, "total ", h("span", { class: "v" }, seconds(r.duration))),
  ];
  const chips = standouts.map((check) => check(r)).filter(Boolean);
  return h(
    "div",
    { class: "headline" },
    ...facts,
    ...chips.map((text) => h("span", { class: "standout" }, text)),
  );
}
