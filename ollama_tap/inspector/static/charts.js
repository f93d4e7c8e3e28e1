// The charts of one record, in SVG: the waterfall (server phases and the client's view) and
// the token timeline (one mark per output piece, and the gaps between them).

import { h, svg } from "./dom.js";
import { KIND_LABELS, KINDS, seconds } from "./format.js";

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
export function waterfall(r) {
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
  const span = thinkingSpan(r.timeline);
  if (span) {
    const y = 8 + (phases.length - 1) * rowH;
    root.append(
      svg(
        "rect",
        {
          x: x(span[0]), y: y + 3, width: Math.max(x(span[1]) - x(span[0]), 2), height: rowH - 8,
          class: "thinking-span",
        },
        svg("title", {}, `thinking: ${seconds(span[0])} to ${seconds(span[1])}`),
      ),
    );
  }
  const marks = [
    ["server TTFT", r.server_ttft, "server-ttft"],
    ["client TTFT", r.ttft, "client-ttft"],
    ["time to first content", r.ttfc === r.ttft ? null : r.ttfc, "ttfc"],
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

// From the first thinking piece to the last, on the client's clock; null without thinking.
export function thinkingSpan(tl) {
  const at = (tl?.offsets ?? []).filter((_, i) => tl.kinds[i] === "thinking");
  return at.length ? [at[0], at[at.length - 1]] : null;
}

export function markerLegend(r) {
  const key = (cls, text) => h("span", { class: `swatch ${cls}` }, text);
  const span = thinkingSpan(r.timeline);
  return h(
    "p",
    { class: "legend" },
    r.server_ttft === null ? null : key("server-key", `server TTFT ${seconds(r.server_ttft)}`),
    r.ttft === null ? null : key("marker-key", `client TTFT ${seconds(r.ttft)}`),
    r.ttfc === null || r.ttfc === r.ttft ? null : key("ttfc-key", `first content ${seconds(r.ttfc)}`),
    span ? key("kind-thinking", `thinking ${seconds(span[1] - span[0])}`) : null,
  );
}

export function kindClass(kind) {
  return KINDS.includes(kind) ? `kind-${kind}` : "kind-other";
}

export function pieceTitle(tl, i) {
  const gap = i ? tl.offsets[i] - tl.offsets[i - 1] : null;
  const head =
    `#${i + 1} ${KIND_LABELS[tl.kinds[i]] ?? tl.kinds[i]} at ${seconds(tl.offsets[i])}` +
    (gap === null ? "" : ` (+${seconds(gap)})`) +
    `, ${tl.bytes[i]} B on the wire`;
  return tl.texts ? `${head}: ${JSON.stringify(tl.texts[i])}` : head;
}

// One mark per output piece at its offset, coloured by kind; below, each piece's gap to the
// one before it, so stalls stand out.
export function tokenTimeline(r) {
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

export function legend() {
  return h(
    "p",
    { class: "legend" },
    ...KINDS.map((k) => h("span", { class: `swatch ${kindClass(k)}` }, KIND_LABELS[k])),
    h("span", { class: "swatch marker-key" }, "client TTFT"),
  );
}

export function gapSummary(tl) {
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
