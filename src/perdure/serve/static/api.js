// Talking to /api/v1: the session cookie rides along; every POST carries the header the
// server requires of cookie-authenticated state changes.
import { toast } from "./dom.js";

export class Unauthorized extends Error {}

function setConn(ok) {
  const el = document.getElementById("conn");
  if (!el) return;
  el.className = ok ? "conn ok" : "conn bad";
  el.textContent = ok ? "live" : "offline";
}

async function call(method, path, body) {
  const headers = { "Accept": "application/json" };
  if (method !== "GET") headers["X-Perdure-CSRF"] = "1";
  let resp;
  try {
    resp = await fetch(path, { method, headers, body, credentials: "same-origin" });
  } catch (err) {
    setConn(false);
    throw err;
  }
  setConn(true);
  if (resp.status === 401) {
    window.location.assign("/login");
    throw new Unauthorized("log in again");
  }
  const data = await resp.json().catch(() => ({}));
  if (!resp.ok) {
    const detail = typeof data.detail === "string" ? data.detail : JSON.stringify(data.detail);
    throw new Error(`${resp.status}: ${detail}`);
  }
  return data;
}

export const get = (path) => call("GET", path);
export const post = (path) => call("POST", path);

export async function command(path, what) {
  try {
    await post(path);
    toast(`${what}: sent`);
    return true;
  } catch (err) {
    if (!(err instanceof Unauthorized)) toast(`${what} failed: ${err.message}`, true);
    return false;
  }
}

export function stream(path, handlers) {
  const es = new EventSource(path, { withCredentials: true });
  for (const [name, fn] of Object.entries(handlers)) {
    es.addEventListener(name, (ev) => fn(JSON.parse(ev.data), ev));
  }
  es.addEventListener("end", () => es.close());
  // CONNECTING after an error: the connection dropped and the browser retries. CLOSED: the
  // server refused the stream (a 404), which says nothing about the connection.
  es.onerror = () => { if (es.readyState === EventSource.CONNECTING) setConn(false); };
  es.onopen = () => setConn(true);
  return es;
}

export function jobPath(id) { return `/api/v1/jobs/${encodeURIComponent(id)}`; }
