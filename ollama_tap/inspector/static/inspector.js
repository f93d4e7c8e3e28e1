// ollama-tap inspector: the recorded exchanges from /_tap/api, listed and drawn one by one.
//
// The modules, by concern: dom.js (elements from data, never from HTML), format.js
// (numbers and derived figures), api.js (the JSON API and failures), views.js (the
// registry and the router), list.js and summary.js (the record list), detail.js,
// headline.js and charts.js (one record). A new view is a module that calls
// registerView, imported below, and a link in index.html's nav.

import { showRecord } from "./detail.js";
import "./loads.js";
import "./now.js";
import { hideList, initList, showList } from "./list.js";
import { registerView, startRouter } from "./views.js";

registerView({
  name: "record",
  element: "#record-view",
  match: (path) => {
    const found = /^\/records\/(.+)$/.exec(path);
    return found ? { id: decodeURIComponent(found[1]) } : null;
  },
  show: showRecord,
});
registerView({ name: "records", element: "#list-view", show: showList, hide: hideList });

initList();
startRouter();
