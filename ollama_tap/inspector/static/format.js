// Numbers as people read them, and the figures derived from a record.

// ollama_tap/exchange.py Outcome, in its order (tests/inspector keeps the two in step).
export const OUTCOMES = [
  "ok", "upstream_error", "stream_error", "incomplete", "client_disconnected",
  "upstream_unreachable", "proxy_error", "shutdown",
];
// ollama_tap/exchange.py OutputKind.
export const KINDS = ["content", "thinking", "tool_call"];
export const KIND_LABELS = { content: "content", thinking: "thinking", tool_call: "tool call" };
// ollama_tap/measures.py COLD_START_NS: a load above a second is a cold start.
export const COLD_START_S = 1;

const known = (value) => value !== null && value !== undefined;

export function seconds(value) {
  if (!known(value)) return "–";
  const abs = Math.abs(value);
  if (abs === 0) return "0";
  if (abs < 1e-3) return `${(value * 1e6).toFixed(0)} µs`;
  if (abs < 1) return `${(value * 1e3).toFixed(abs < 0.01 ? 2 : 1)} ms`;
  if (abs < 60) return `${value.toFixed(2)} s`;
  return `${Math.floor(value / 60)} min ${(value % 60).toFixed(0)} s`;
}

export function count(value) {
  return known(value) ? String(value) : "–";
}

export function rate(value, unit = "tok/s") {
  return known(value) ? `${value.toFixed(value < 10 ? 2 : 1)} ${unit}` : "–";
}

export function bytes(value) {
  if (!known(value)) return "–";
  if (value < 1024) return `${value} B`;
  if (value < 1024 * 1024) return `${(value / 1024).toFixed(1)} KiB`;
  return `${(value / 1024 / 1024).toFixed(1)} MiB`;
}

export function localTime(unixSeconds) {
  const d = new Date(unixSeconds * 1000);
  const two = (n) => String(n).padStart(2, "0");
  return (
    `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ` +
    `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`
  );
}

// In the list: the time of day for today's records, else the date and minute; the title
// of the cell carries localTime in full.
export function shortTime(unixSeconds, now = Date.now() / 1000) {
  const full = localTime(unixSeconds);
  const sameDay = full.slice(0, 10) === localTime(now).slice(0, 10);
  return sameDay ? full.slice(11) : full.slice(5, 16);
}

export function share(part, whole) {
  return whole ? `${Math.round((100 * part) / whole)}%` : "–";
}

// The README's guards (Measurements): decode rate only with eval_count >= 2 and
// eval_duration >= 1 ms; prefill rate only when Ollama reported the cached count.
export function decodeRate(r) {
  return r.eval_tokens >= 2 && r.decode >= 1e-3 ? r.eval_tokens / r.decode : null;
}

export function prefillRate(r) {
  const fresh = (r.prompt_tokens ?? 0) - (r.cached_tokens ?? 0);
  return known(r.cached_tokens) && fresh > 0 && r.prefill > 0 ? fresh / r.prefill : null;
}

export function outputRate(timeline) {
  const n = timeline?.offsets.length ?? 0;
  const span = n ? timeline.offsets[n - 1] - timeline.offsets[0] : 0;
  return n >= 2 && span > 0 ? (n - 1) / span : null;
}

export function isCold(r) {
  return known(r.load) && r.load > COLD_START_S;
}

// The nearest-rank quantile of the known values; null when there are none.
export function quantile(values, q) {
  const sorted = values.filter(known).sort((a, b) => a - b);
  if (!sorted.length) return null;
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)];
}

// What a route can never report, said once instead of rows of "–" (ollama_tap/cli/showing.py
// says the same on the command line).
const EMBEDDINGS = ["/api/embed", "/api/embeddings", "/v1/embeddings"];

export function routeLacks(r) {
  if (EMBEDDINGS.includes(r.endpoint)) {
    return "Embeddings have no stream: no TTFT, output tokens, decode phase or token timeline.";
  }
  if ((r.endpoint ?? "").startsWith("/v1/")) {
    return (
      "OpenAI-style routes carry no phase timings: Ollama reports load, queue wait, " +
      "prefill and decode on its native /api routes only."
    );
  }
  return null;
}
