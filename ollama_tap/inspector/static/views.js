// The views and the router: the hash names a view and its state, `#/<path>?<query>`.
//
// A view registers itself with one call:
//   registerView({ name: "loads", match: (path) => path === "/loads", show(params, el) {} })
// and gets a nav link in index.html (`<a href="#/loads">loads</a>`). `show` runs on every
// visit with what `match` returned and the view's own element: the one named by `element`
// (a selector), else a `<section id="view-<name>">` made for it. A view without `match`
// is the one shown when no other matches (the record list). `hide`, if given, runs when
// another view is shown (to stop a timer).

import { $, h } from "./dom.js";

const views = [];
let current = null;

export function registerView(view) {
  views.push(view);
}

// The hash as a path and its query: "#/records/x" -> { path: "/records/x", query }.
export function hashState() {
  const raw = location.hash.replace(/^#/, "");
  const at = raw.indexOf("?");
  const path = (at < 0 ? raw : raw.slice(0, at)) || "/";
  return { path, query: new URLSearchParams(at < 0 ? "" : raw.slice(at + 1)) };
}

// Rewrites the query of the current hash without a new history entry or a hashchange.
export function replaceQuery(query) {
  const text = query.toString();
  const target = `#${hashState().path}${text ? `?${text}` : ""}`;
  // The bare page stays bare: "#/" is what no hash already means.
  if (target !== (location.hash || "#/")) history.replaceState(null, "", target);
}

function elementOf(view) {
  if (view.element) return $(view.element);
  let el = document.getElementById(`view-${view.name}`);
  if (!el) {
    el = h("section", { id: `view-${view.name}`, class: "view", hidden: "" });
    $("main").append(el);
  }
  return el;
}

export function route() {
  const { path, query } = hashState();
  let view = null;
  let params = null;
  for (const v of views) {
    params = v.match ? v.match(path, query) : null;
    if (params) {
      view = v;
      break;
    }
  }
  view ??= views.find((v) => !v.match);
  params ??= { path, query };
  if (current && current !== view) current.hide?.();
  current = view;
  for (const v of views) elementOf(v).hidden = v !== view;
  for (const link of document.querySelectorAll("#nav a")) {
    const target = new URL(link.href).hash.replace(/^#/, "").split("?")[0] || "/";
    if (target === (view.match ? path : "/")) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  view.show(params, elementOf(view));
}

export function startRouter() {
  window.addEventListener("hashchange", route);
  route();
}
