// DOM helpers. Children are nodes or strings, and strings become text nodes: recorded text
// is never parsed as HTML. Nothing runs inline (the CSP is default-src 'self'), so styles
// are classes and geometry is SVG attributes.

const SVG_NS = "http://www.w3.org/2000/svg";

function build(el, attrs, children) {
  for (const [name, value] of Object.entries(attrs ?? {})) {
    if (value !== null && value !== undefined && value !== false) el.setAttribute(name, value);
  }
  el.append(...children.filter((c) => c !== null && c !== undefined));
  return el;
}

export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

export function svg(tag, attrs, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

export const $ = (selector) => document.querySelector(selector);

export function note(text) {
  return h("p", { class: "note" }, text);
}
