// One job: header with actions, error, timeline, goodput, replicas, live log, live events.
import { command, get, jobPath, stream } from "./api.js";
import { drawGoodput, drawTimeline } from "./charts.js";
import { badge, clear, clock, duration, h, percent, stepText } from "./dom.js";
import { logPanel } from "./logview.js";

const TERMINAL = ["SUCCEEDED", "FAILED", "CANCELLED"];
const MAX_EVENTS = 500;

export function renderJob(root, id) {
  const title = h("h1", {}, id);
  const stateEl = h("span");
  const actions = h("div", { class: "actions" });
  const errorBox = h("div", { class: "error-box", role: "alert", hidden: true });
  const saveBox = h("div", { class: "error-box save-alert", role: "alert", hidden: true });
  const stats = h("dl", { class: "stats" });
  const timeline = h("div", { class: "timeline-box" }, h("p", { class: "muted" }, "Loading…"));
  const goodput = h("div", { class: "goodput-box" });
  const replicas = h("tbody");
  const elastic = h("div");
  const events = h("ol", { class: "events" });
  const logs = logPanel(id);
  root.append(
    h("p", { class: "crumbs" }, h("a", { href: "#/jobs" }, "Jobs"), " / ", id),
    h("div", { class: "page-head" }, h("div", { class: "title" }, title, stateEl), actions),
    errorBox, saveBox, stats,
    card("Attempts timeline", timeline),
    h("div", { class: "cols" },
      card("Goodput", goodput),
      card("Replicas", h("table", { class: "grid replicas" }, h("thead", {}, h("tr", {},
        ["Replica", "Rank", "Node", "GPUs", "State", "Restarts", "Status"].map((c) =>
          h("th", { scope: "col", class: ["Rank", "Restarts"].includes(c) ? "num"
            : null }, c)))), replicas))),
    elastic,
    card("Log", logs.el),
    card("Events", events));

  let stopped = false;
  let job = null;
  let pending = null;
  let timer = null;
  async function load() {
    pending = null;
    try {
      const [d, tl] = await Promise.all([get(jobPath(id)), get(`${jobPath(id)}/timeline`)]);
      if (stopped) return;
      job = d;
      drawHead(d, title, stateEl, actions, errorBox, stats, refreshSoon);
      drawSaves(saveBox, d.checkpoint);
      drawTimeline(timeline, tl);
      drawGoodput(goodput, d.goodput);
      drawReplicas(replicas, d.replicas);
      drawElastic(elastic, d.elastic);
      logs.update(d);
    } catch (err) {
      if (!stopped) clear(timeline).append(h("p", { class: "error-box" }, err.message));
    }
    clearTimeout(timer);
    if (!stopped && job && !TERMINAL.includes(job.state)) timer = setTimeout(load, 5000);
  }
  function refreshSoon() {
    if (!pending) pending = setTimeout(load, 150);
  }
  const es = stream(`${jobPath(id)}/events`, {
    event: (e) => { addEvent(events, e); refreshSoon(); },
  });
  load();
  return { stop() { stopped = true; es.close(); logs.stop(); clearTimeout(timer);
    clearTimeout(pending); } };
}

function card(title, content) {
  return h("section", { class: "card" }, h("h2", {}, title), content);
}

function drawHead(d, title, stateEl, actions, errorBox, stats, refresh) {
  title.replaceChildren(d.name, h("span", { class: "job-id" }, d.id));
  stateEl.replaceChildren(badge(d.state));
  const act = (label, what, enabled, ask, cls = "") => h("button", { type: "button",
    class: `btn ${cls}`, disabled: !enabled, "data-action": what, onclick: async () => {
      if (ask && !window.confirm(ask)) return;
      if (await command(`${jobPath(d.id)}/${what}`, `${label} ${d.name}`)) refresh();
    } }, label);
  const live = !TERMINAL.includes(d.state);
  actions.replaceChildren(
    act("Preempt", "preempt", ["PENDING", "RUNNING"].includes(d.state),
      `Preempt ${d.id}? It saves, suspends and is requeued.`),
    act("Resume", "resume", d.state === "SUSPENDED", null),
    act("Cancel", "cancel", live && d.state !== "CANCELLING",
      `Cancel ${d.id}? Its replicas are stopped.`, "danger"));
  // The job's own error (failed, cancelled), or the last failure it recovered from (softer).
  const shown = d.error || d.last_failure;
  errorBox.hidden = !shown;
  errorBox.className = d.error ? "error-box" : "error-box recovered";
  if (shown) {
    errorBox.replaceChildren(d.error ? "" : "Last failure (recovered): ",
      h("strong", {}, shown.code), " ", shown.message);
  }
  const retries = Object.values(d.retries || {}).reduce((a, b) => a + b, 0);
  const item = (k, v) => h("div", {}, h("dt", {}, k), h("dd", {}, v));
  stats.replaceChildren(...[
    item("Queue", d.queue), item("Priority", d.priority), item("Attempt", d.attempt),
    item("Step", stepText(d.step, d.total_steps)),
    item("Goodput", d.goodput.goodput === null ? d.goodput.status : percent(d.goodput.goodput)),
    item("Job retries", retries), item("Age", duration(Date.now() / 1000 - d.created)),
  ]);
}

// Checkpoint saves failing in a row (training goes on without new checkpoints): loud once
// the runtime's threshold is reached, a note before that.
function drawSaves(box, ck) {
  const failed = ck ? ck.failed_saves : 0;
  box.hidden = !failed;
  if (!failed) return;
  box.className = ck.alert ? "error-box save-alert" : "error-box recovered save-alert";
  box.replaceChildren(h("strong", {}, ck.alert ? "Checkpoints failing: " : "Checkpoint save failed: "),
    `${failed} save(s) in a row failed; training goes on from the newest complete checkpoint. `,
    ck.last_error || "");
}

function drawReplicas(body, reps) {
  clear(body).append(...reps.map((r) => h("tr", {},
    h("td", { class: "strong" }, r.name), h("td", { class: "num" }, r.rank),
    h("td", {}, r.node ?? "–"),
    h("td", { class: "gpus" }, r.gpus ? `${r.gpus}` + (r.devices && r.devices.length
      ? ` (${r.devices.join(",")})` : "") : "–"),
    h("td", {}, badge(r.state, "replica")),
    h("td", { class: "num", title: "this attempt (all attempts)" }, r.restarts_total !== undefined
      && r.restarts_total !== r.restarts ? `${r.restarts} (${r.restarts_total})` : r.restarts),
    h("td", {}, r.status ?? r.exit_code ?? "–"))));
}

function drawElastic(el, changes) {
  if (!changes.length) { el.replaceChildren(); return; }
  el.replaceChildren(card("Elastic changes", h("ul", { class: "plain" }, changes.map((c) =>
    h("li", {}, h("span", { class: "time" }, clock(c.time)), " ", c.what, " ",
      h("span", { class: "muted" }, c.cost_seconds !== null
        ? `${duration(c.cost_seconds)} ${c.cost}` : c.cost))))));
}

function addEvent(list, e) {
  list.prepend(h("li", { class: `ev ev-${e.kind}` }, h("time", {}, clock(e.time)),
    h("span", { class: `kind kind-${e.kind}` }, e.kind), h("span", { class: "msg" }, e.message)));
  while (list.childElementCount > MAX_EVENTS) list.lastElementChild.remove();
}
