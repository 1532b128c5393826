// Nodes: health, slots used and free, drain and restore.
import { command, get } from "./api.js";
import { badge, clear, h } from "./dom.js";

export function renderNodes(root) {
  const body = h("tbody");
  root.append(h("div", { class: "page-head" }, h("h1", {}, "Nodes")),
    h("div", { class: "card flush" }, h("table", { class: "grid nodes" },
      h("thead", {}, h("tr", {}, ["Node", "Health", "Slots used", "Free", "GPUs used", ""].map(
        (c) => h("th", { scope: "col", class: c === "Free" ? "num" : null }, c)))), body)));
  let timer = null;
  let stopped = false;
  async function load() {
    try {
      const nodes = await get("/api/v1/nodes");
      if (!stopped) draw(body, nodes, load);
    } catch (err) {
      if (!stopped) clear(body).append(h("tr", {}, h("td", { colspan: 6 }, err.message)));
    }
    if (!stopped) timer = setTimeout(load, 2000);
  }
  load();
  return { stop() { stopped = true; clearTimeout(timer); } };
}

function draw(body, nodes, reload) {
  const act = (n, what, verb) => h("button", { type: "button", class: "btn",
    onclick: async () => {
      if (await command(`/api/v1/nodes/${encodeURIComponent(n.name)}/${what}`,
        `${verb} ${n.name}`)) setTimeout(reload, 300);
    } }, verb);
  clear(body).append(...nodes.map((n) => {
    const fill = h("span", { class: "slots-fill" });
    fill.style.width = `${n.slots ? Math.min(1, n.used / n.slots) * 100 : 0}%`;
    return h("tr", { "data-node": n.name },
      h("td", { class: "strong" }, n.name),
      h("td", {}, badge(n.state, "node"),
        n.reason ? h("div", { class: "muted small node-reason" }, n.reason) : null),
      h("td", {}, h("span", { class: "slots" }, h("span", { class: "slots-track" }, fill),
        h("span", { class: "gp-num" }, `${n.used} / ${n.slots}`))),
      h("td", { class: "num" }, n.free),
      h("td", { class: "gpus" }, n.gpus ? `${n.gpus_used} / ${n.gpus}` : "–"),
      h("td", { class: "actions" }, n.state === "READY" ? act(n, "drain", "Drain")
        : act(n, "restore", "Restore")));
  }));
}
