// SVG drawn from the API's numbers: the attempts timeline and the goodput breakdown.
// Text goes in as text nodes (s() never parses markup); colours come from style.css classes.
import { clock, duration, h, percent, s } from "./dom.js";

const MARK_ORDER = ["launch", "exit", "restart", "retry", "failure", "suspend", "move",
  "elastic", "hot-swap", "checkpoint", "restore"];
const MARK_LABEL = { "launch": "launches", "exit": "exits", "restart": "restarts",
  "retry": "job retries", "failure": "failures", "suspend": "suspensions", "move": "moves",
  "elastic": "elastic", "hot-swap": "hot-swaps", "checkpoint": "checkpoints",
  "restore": "restores" };

function ticks(t0, t1, n) {
  const span = t1 - t0;
  const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400];
  const step = steps.find((x) => span / x <= n) || span / n;
  const out = [];
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) out.push(t);
  return out;
}

export function drawTimeline(container, tl) {
  if (!tl.states.length) {
    container.replaceChildren(h("p", { class: "muted" },
      "Nothing yet: no controller has picked this job up."));
    return;
  }
  const width = Math.max(520, Math.floor(container.clientWidth || 900));
  const gutter = 104;
  const right = 12;
  const kinds = MARK_ORDER.filter((k) => tl.marks.some((m) => m.kind === k));
  const laneH = 20;
  const top = 6;
  const bandY = top;
  const attemptY = bandY + 26;
  const lanesY = attemptY + 24;
  const axisY = lanesY + kinds.length * laneH + 6;
  const height = axisY + 22;
  const t0 = tl.start;
  const t1 = Math.max(tl.end, t0 + 1);
  const x = (t) => gutter + ((Math.min(Math.max(t, t0), t1) - t0) / (t1 - t0)) *
    (width - gutter - right);
  const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, width, height,
    class: "timeline", role: "img", "aria-label": "attempts timeline" });

  svg.append(s("text", { x: gutter - 8, y: bandY + 15, class: "lane-label" }, "state"));
  tl.states.forEach((st, i) => {
    const a = st.time;
    const b = i + 1 < tl.states.length ? tl.states[i + 1].time : t1;
    const w = Math.max(1.5, x(b) - x(a));
    const g = s("g", {}, s("rect", { x: x(a), y: bandY, width: w, height: 20, rx: 3,
      class: `seg state-${st.state.toLowerCase()}` }),
    s("title", {}, `${st.state}  ${clock(a)} – ${clock(b)} (${duration(b - a)})`));
    if (w > 64) g.append(s("text", { x: x(a) + 6, y: bandY + 14, class: "seg-label" },
      st.state));
    svg.append(g);
  });

  svg.append(s("text", { x: gutter - 8, y: attemptY + 13, class: "lane-label" }, "attempts"));
  for (const at of tl.attempts) {
    const end = at.end ?? t1;
    const w = Math.max(1.5, x(end) - x(at.start));
    svg.append(s("g", {}, s("rect", { x: x(at.start), y: attemptY, width: w, height: 16,
      rx: 3, class: `attempt attempt-${at.attempt % 2}` }),
    s("title", {}, `attempt ${at.attempt}: ${clock(at.start)} – ` +
      `${at.end ? clock(at.end) : "now"} (${duration(end - at.start)})`),
    w > 56 ? s("text", { x: x(at.start) + 5, y: attemptY + 12, class: "attempt-label" },
      `attempt ${at.attempt}`) : null));
  }

  kinds.forEach((kind, i) => {
    const y = lanesY + i * laneH + laneH / 2;
    svg.append(s("text", { x: gutter - 8, y: y + 4, class: "lane-label" }, MARK_LABEL[kind]),
      s("line", { x1: gutter, x2: width - right, y1: y, y2: y, class: "lane-line" }));
    for (const m of tl.marks.filter((mk) => mk.kind === kind)) {
      const shape = kind === "checkpoint" || kind === "restore"
        ? s("rect", { x: x(m.time) - 1.5, y: y - 7, width: 3, height: 14, class: `mk mk-${kind}` })
        : s("circle", { cx: x(m.time), cy: y, r: 5, class: `mk mk-${kind}` });
      svg.append(s("g", { class: "mark" }, shape, s("title", {}, `${clock(m.time)}  ${m.label}`)));
    }
  });

  svg.append(s("line", { x1: gutter, x2: width - right, y1: axisY, y2: axisY, class: "axis" }));
  for (const t of ticks(t0, t1, Math.max(2, Math.floor((width - gutter) / 110)))) {
    svg.append(s("line", { x1: x(t), x2: x(t), y1: axisY, y2: axisY + 4, class: "axis" }),
      s("text", { x: x(t), y: axisY + 16, class: "tick" }, clock(t).slice(0, 8)));
  }
  const note = tl.marks_left_out ? h("p", { class: "muted small" },
    `${tl.marks_left_out} older marks not drawn`) : null;
  container.replaceChildren(svg, ...(note ? [note] : []));
}

const BADPUT = ["startup", "checkpoint_save", "checkpoint_restore", "data_loading",
  "wasted_progress", "elastic", "recovery"];

export function drawGoodput(container, g) {
  const running = Math.max(0, g.wall_seconds - g.queued_seconds - g.suspended_seconds);
  const parts = [["productive", g.productive_seconds],
    ...BADPUT.map((k) => [k, (g.badput_seconds || {})[k] || 0])];
  const width = Math.max(300, Math.floor(container.clientWidth || 400));
  const svg = s("svg", { viewBox: `0 0 ${width} 28`, width, height: 28, class: "gp-chart",
    role: "img", "aria-label": "goodput breakdown" });
  let at = 0;
  for (const [name, secs] of parts) {
    if (running <= 0 || secs <= 0) continue;
    const w = (secs / running) * width;
    svg.append(s("g", {}, s("rect", { x: at, y: 0, width: Math.max(1, w), height: 28,
      class: `gpk gpk-${name}` }), s("title", {}, `${name.replace("_", " ")}: ` +
      `${duration(secs)} (${percent(secs / running)})`)));
    at += w;
  }
  if (running <= 0) svg.append(s("rect", { x: 0, y: 0, width, height: 28, class: "gpk-none" }));
  const legend = h("ul", { class: "legend" }, parts.filter(([, v]) => v > 0).map(([name, v]) =>
    h("li", {}, h("span", { class: `swatch gpk-${name}` }), h("span", {}, name.replace("_", " ")),
      h("span", { class: "num" }, `${duration(v)} · ${percent(running ? v / running : null)}`))));
  const head = h("div", { class: "gp-head" },
    h("span", { class: "gp-big" }, g.goodput === null && g.status ? g.status : percent(g.goodput)),
    h("span", { class: "muted" }, `productive of ${duration(running)} running` +
      (g.last_step !== null && g.last_step !== undefined ? ` · step ${g.last_step}` : "") +
      (g.total_steps !== null && g.total_steps !== undefined ? ` / ${g.total_steps}` : "")));
  const aside = h("p", { class: "muted small" }, `queued ${duration(g.queued_seconds)}, ` +
    `suspended ${duration(g.suspended_seconds)} (not counted)`);
  container.replaceChildren(head, svg, legend, aside);
}
