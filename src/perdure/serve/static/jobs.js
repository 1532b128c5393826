// The jobs list: counts per state as filters, a page of jobs, refreshed every 2 s.
import { get } from "./api.js";
import { badge, clear, duration, goodputBar, h, stepText } from "./dom.js";

const STATES = ["RUNNING", "PENDING", "QUEUED", "SUSPENDING", "SUSPENDED", "CANCELLING",
  "SUCCEEDED", "FAILED", "CANCELLED"];
const PAGE = 50;
const REFRESH_MS = 2000;
const NUMERIC = ["Priority", "Replicas", "Attempt", "Step", "Age"];

export function renderJobs(root, params) {
  const state = params.get("state") || "";
  const q = params.get("q") || "";
  const offset = Math.max(0, parseInt(params.get("offset") || "0", 10) || 0);
  const filters = h("div", { class: "chips", role: "toolbar", "aria-label": "filter by state" });
  const search = h("input", { type: "search", placeholder: "Filter by name or id",
    value: q, "aria-label": "filter by name or id", class: "search" });
  const body = h("tbody");
  const pager = h("div", { class: "pager" });
  const table = h("table", { class: "grid jobs" },
    h("thead", {}, h("tr", {}, ["Job", "State", "Queue", "Priority", "Replicas", "Attempt",
      "Step", "Goodput", "Age"].map((c) => h("th", { scope: "col",
      class: NUMERIC.includes(c) ? "num" : null }, c)))), body);
  const topPager = h("div", { class: "pager" });
  root.append(h("div", { class: "page-head" }, h("h1", {}, "Jobs"), search),
    h("div", { class: "toolbar" }, filters, topPager),
    h("div", { class: "card flush" }, table), pager);

  const go = (next) => {
    const p = new URLSearchParams({ ...Object.fromEntries(params), ...next });
    for (const [k, v] of [...p]) if (!v || v === "0") p.delete(k);
    window.location.hash = `#/jobs${p.toString() ? "?" + p : ""}`;
  };
  let debounce = null;
  search.addEventListener("input", () => {
    clearTimeout(debounce);
    debounce = setTimeout(() => go({ q: search.value.trim(), offset: "" }), 300);
  });

  let timer = null;
  let stopped = false;
  async function load() {
    const qs = new URLSearchParams({ limit: PAGE, offset });
    if (state) qs.append("state", state);
    if (q) qs.set("q", q);
    try {
      const page = await get(`/api/v1/jobs?${qs}`);
      if (stopped) return;
      drawFilters(filters, page.counts, state, go);
      drawRows(body, page.jobs);
      drawPager(pager, page, go);
      drawPager(topPager, page, go);
    } catch (err) {
      if (stopped) return;
      clear(body).append(h("tr", {}, h("td", { colspan: 9, class: "muted" },
        `Could not load jobs: ${err.message}`)));
    }
    if (!stopped) timer = setTimeout(load, document.hidden ? REFRESH_MS * 5 : REFRESH_MS);
  }
  load();
  return { stop() { stopped = true; clearTimeout(timer); clearTimeout(debounce); } };
}

function drawFilters(el, counts, active, go) {
  const total = Object.values(counts).reduce((a, b) => a + b, 0);
  const chip = (label, value, n) => h("button", {
    type: "button", class: `chip ${value ? "state-" + value.toLowerCase() : ""}` +
      (active === value ? " on" : ""), "aria-pressed": active === value ? "true" : "false",
    onclick: () => go({ state: value, offset: "" }) }, label, h("span", { class: "n" }, n));
  clear(el).append(chip("All", "", total),
    ...STATES.filter((s) => counts[s] || s === active).map((s) => chip(s, s, counts[s] || 0)));
}

function drawRows(body, jobs) {
  const now = Date.now() / 1000;
  if (!jobs.length) {
    clear(body).append(h("tr", {}, h("td", { colspan: 9, class: "empty" },
      "No jobs here. Submit one with `perdure submit job.yaml` or POST /api/v1/jobs.")));
    return;
  }
  clear(body).append(...jobs.map((j) => h("tr", { "data-job": j.id },
    h("td", {}, h("a", { href: `#/jobs/${encodeURIComponent(j.id)}`, class: "job-link" },
      h("span", { class: "job-name" }, j.name), h("span", { class: "job-id" }, j.id)),
      j.error ? h("div", { class: "row-error", title: j.error.message },
        `${j.error.code}: ${j.error.message}`) : null,
      j.last_failure ? h("div", { class: "row-error recovered", title: j.last_failure.message },
        `last failure (recovered): ${j.last_failure.code}: ${j.last_failure.message}`) : null),
    h("td", {}, badge(j.state)),
    h("td", {}, j.queue),
    h("td", { class: "num" }, j.priority),
    h("td", { class: "num" }, `${j.replicas_running}/${j.replicas}`),
    h("td", { class: "num" }, j.attempt),
    h("td", { class: "num" }, stepText(j.step, j.total_steps)),
    h("td", {}, j.goodput === null && j.goodput_status !== "not started"
      ? h("span", { class: "muted" }, j.goodput_status) : goodputBar(j.goodput)),
    h("td", { class: "num", title: new Date(j.created * 1000).toLocaleString() },
      duration(now - j.created)))));
}

function drawPager(el, page, go) {
  const first = page.total ? page.offset + 1 : 0;
  const last = Math.min(page.total, page.offset + page.jobs.length);
  clear(el).append(
    h("span", { class: "muted" }, `${first}–${last} of ${page.total.toLocaleString()}`),
    h("button", { type: "button", class: "btn", disabled: page.offset <= 0,
      onclick: () => go({ offset: String(Math.max(0, page.offset - page.limit)) }) }, "‹ Newer"),
    h("button", { type: "button", class: "btn", disabled: last >= page.total,
      onclick: () => go({ offset: String(page.offset + page.limit) }) }, "Older ›"));
}
