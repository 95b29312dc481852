// The one way chatroom's pages build DOM: elements from a tag, attributes
// and children, where every string becomes text, never markup. Agent text
// that should look like Markdown goes through markdown.js instead.
//
// An ES module served at /assets/dom.js; the board app has it inlined.

/** The element with this id. */
export const $ = (id) => document.getElementById(id);

/**
 * An element `tag` with `attrs` and `children`. Attributes: `class`,
 * `text` (its text), `data` (an object of data-* values), `on` (an object
 * of event listeners) or `onclick`-style keys holding a function; any other
 * key is set as an attribute (`true` as an empty one). `null`, `undefined`
 * and `false` are skipped, as attributes and as children; children nest in
 * arrays, and strings and numbers become text nodes.
 */
export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') node.className = v;
    else if (k === 'text') node.textContent = v;
    else if (k === 'data') for (const [dk, dv] of Object.entries(v)) node.dataset[dk] = dv;
    else if (k === 'on') for (const [ev, fn] of Object.entries(v)) node.addEventListener(ev, fn);
    else if (k.startsWith('on')) {
      // Only a function: an `on…` attribute would be inline script.
      if (typeof v === 'function') node.addEventListener(k.slice(2), v);
    } else node.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

/** Empties `node`. */
export function clear(node) {
  node.replaceChildren();
}
