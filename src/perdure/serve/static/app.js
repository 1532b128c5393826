// The dashboard: a hash router over three views. No framework, no build step.
import { renderJobs } from "./jobs.js";
import { renderJob } from "./job.js";
import { renderNodes } from "./nodes.js";
import { h } from "./dom.js";

let current = null; // the view on screen: { stop() } to end its timers and streams

function route() {
  if (current) current.stop();
  const view = document.getElementById("view");
  view.replaceChildren();
  const hash = decodeURIComponent(window.location.hash.replace(/^#/, "")) || "/jobs";
  const [, section, id] = hash.split("/");
  for (const a of document.querySelectorAll("[data-nav]")) {
    a.classList.toggle("active", a.dataset.nav === (section === "nodes" ? "nodes" : "jobs"));
  }
  if (section === "jobs" && id) current = renderJob(view, id);
  else if (section === "nodes") current = renderNodes(view);
  else current = renderJobs(view, new URLSearchParams(hash.split("?")[1] || ""));
}

async function logout() {
  await fetch("/logout", { method: "POST", headers: { "X-Perdure-CSRF": "1" },
                           credentials: "same-origin" });
  window.location.assign("/login");
}

window.addEventListener("hashchange", route);
document.getElementById("logout").addEventListener("click", logout);
if (!document.getElementById("view")) document.body.append(h("main", { id: "view" }));
route();
