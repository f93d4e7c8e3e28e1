// The recorder's JSON API (/_tap/api/), and the one place a failure is shown.
//
// Same-origin fetches carry the HttpOnly cookie that /_tap/?token=… set.

import { $, h } from "./dom.js";

const API = new URL("api/", document.baseURI);

export class Unauthorized extends Error {}

export async function api(path, params = {}) {
  const url = new URL(path, API);
  for (const [name, value] of Object.entries(params)) {
    if (value) url.searchParams.set(name, value);
  }
  const resp = await fetch(url, {
    credentials: "same-origin",
    headers: { Accept: "application/json" },
  });
  if (resp.status === 401) throw new Unauthorized();
  const body = await resp.json().catch(() => null);
  if (!resp.ok) throw new Error(body?.error ?? `${resp.status} ${resp.statusText}`);
  return body;
}

// Shown on a 401: the cookie is missing or stale (a new token, another browser profile).
function notSignedIn() {
  return [
    h("strong", {}, "Not signed in. "),
    "This page needs the admin token. Open the inspector URL that ",
    h("code", {}, "ollama-tap serve"),
    " printed (it ends in /_tap/?token=…) once in this browser; the token is also kept " +
      "in the file admin-token beside the recordings database.",
  ];
}

export function showProblem(error) {
  const box = $("#problem");
  const auth = error instanceof Unauthorized;
  box.replaceChildren(...(auth ? notSignedIn() : [`Could not load: ${error.message}`]));
  box.classList.toggle("auth", auth);
  box.hidden = false;
}

export function clearProblem() {
  $("#problem").hidden = true;
}

export function setStatus(text) {
  $("#status").textContent = text;
}
