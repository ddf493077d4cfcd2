// Builds DOM nodes. Text always goes in through text nodes, never through HTML parsing, so job
// names, log lines and any other data from the cluster cannot become markup.

const SVG_NS = "http://www.w3.org/2000/svg";

function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function setAttributes(node, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) {
      node.addEventListener(key.slice(2), value);
    } else if (key === "dataset") {
      Object.assign(node.dataset, value);
    } else {
      node.setAttribute(key, value === true ? "" : String(value));
    }
  }
}

// h("a", {href: "#/jobs", class: "x"}, "text", otherNode, [more, nodes])
export function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  setAttributes(node, attrs);
  return append(node, children);
}

export function s(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  setAttributes(node, attrs);
  return append(node, children);
}

export function replace(node, ...children) {
  node.replaceChildren();
  return append(node, children);
}
