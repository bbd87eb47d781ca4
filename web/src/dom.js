// A small element builder: h('td', {class: 'x', dataset: {value: 1}}, 'text', child, ...).
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') el.className = value;
    else if (key === 'dataset') {
      for (const [k, v] of Object.entries(value)) if (v !== undefined) el.dataset[k] = String(v);
    } else if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? '' : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function $(id) {
  const el = document.getElementById(id);
  if (!el) throw new Error(`page: missing element #${id}`);
  return el;
}

// A value from the report, shown formatted; data-value keeps the JSON value, data-path where it is.
export function val(value, text, path) {
  return h('span', { class: 'v', dataset: { value: value === null ? 'null' : value, path } }, text);
}

export function setVal(el, value, text) {
  el.textContent = text;
  el.dataset.value = value === null || value === undefined ? 'null' : String(value);
}

// "Not measured on this machine" with the step's reason.
export function notMeasured(reason) {
  return h('div', { class: 'not-measured' }, h('b', {}, 'Not measured on this machine'),
    reason ? `: ${reason}` : '.');
}

export function table(headers, rows, attrs = {}) {
  return h('table', attrs, h('thead', {}, h('tr', {}, headers.map((x) => h('th', { scope: 'col' }, x)))),
    h('tbody', {}, rows));
}
