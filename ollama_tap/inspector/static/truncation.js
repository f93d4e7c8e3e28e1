// The truncation badge of one record (docs/diagnoses.md, "Truncation"): the verdict's kind
// and rule, and its one-line explanation, as text nodes only; its kind is also a headline chip.

import { registerStandout } from "./headline.js";

const TITLES = {
  prompt_truncated: "prompt truncated",
  refused: "overflow refused",
  context_shift: "context shifted",
  output_cut: "output cut by the context",
  embed_truncated: "embedding input truncated",
  history_dropped: "old messages dropped",
};

// The badge for record `r`, or null when it has no verdict.
export function truncationBadge(r) {
  const verdict = r.truncation;
  if (!verdict) return null;
  const badge = document.createElement("p");
  badge.className = "truncation";
  badge.dataset.kind = verdict.kind;
  const title = document.createElement("strong");
  title.textContent = `${TITLES[verdict.kind] ?? verdict.kind} (${verdict.rule})`;
  badge.append(title, ": ", verdict.explanation ?? "");
  return badge;
}

registerStandout((r) => (r.truncation ? TITLES[r.truncation.kind] ?? r.truncation.kind : null));
