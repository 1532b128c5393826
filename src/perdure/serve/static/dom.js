// DOM helpers. Every string from the server becomes a text node: nothing is parsed as HTML.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const SVG = "http://www.w3.org/2000/svg";
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined) el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function clear(el) { el.replaceChildren(); return el; }

export function badge(state, kind = "state") {
  return h("span", { class: `badge ${kind}-${String(state).toLowerCase()}` }, state);
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) return "–";
  const x = Math.max(0, seconds);
  if (x < 1) return `${(x * 1000).toFixed(0)} ms`;
  if (x < 60) return `${x.toFixed(x < 10 ? 1 : 0)} s`;
  if (x < 3600) return `${Math.floor(x / 60)} m ${Math.floor(x % 60)} s`;
  if (x < 86400) return `${Math.floor(x / 3600)} h ${Math.floor((x % 3600) / 60)} m`;
  return `${Math.floor(x / 86400)} d ${Math.floor((x % 86400) / 3600)} h`;
}

export function clock(t) {
  const d = new Date(t * 1000);
  return d.toLocaleTimeString([], { hour12: false }) + "." +
    String(d.getMilliseconds()).padStart(3, "0");
}

export function percent(x) {
  return x === null || x === undefined ? "–" : `${(x * 100).toFixed(1)}%`;
}

export function goodputBar(x) {
  if (x === null || x === undefined) return h("span", { class: "muted" }, "–");
  const bar = h("span", { class: "gp-fill" });
  bar.style.width = `${Math.max(0, Math.min(1, x)) * 100}%`;
  return h("span", { class: "gp" }, h("span", { class: "gp-track" }, bar),
    h("span", { class: "gp-num" }, percent(x)));
}

let toastTimer = null;
export function toast(message, bad = false) {
  const el = document.getElementById("toast");
  el.textContent = message;
  el.className = bad ? "toast bad" : "toast";
  el.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { el.hidden = true; }, 4000);
}


// "160 / 6000" when the script reported its total steps, "160" when not.
export function stepText(step, total) {
  if (step === null || step === undefined) return "–";
  return total === null || total === undefined ? String(step) : `${step} / ${total}`;
}
