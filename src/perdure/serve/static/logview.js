// A replica's log: the tail, then lines as they are written (server-sent events), older
// pages on demand. The DOM keeps at most MAX_CHARS: a 10 MB log never lands in the page.
import { get, jobPath, stream } from "./api.js";
import { h } from "./dom.js";

const MAX_CHARS = 1_000_000;
const PAGE = 65536;

export function logPanel(jobId) {
  const replica = h("select", { "aria-label": "replica" });
  const attempt = h("select", { "aria-label": "attempt" });
  const which = h("select", { "aria-label": "stream" },
    h("option", { value: "all" }, "stdout + stderr"), h("option", { value: "stdout" }, "stdout"),
    h("option", { value: "stderr" }, "stderr"));
  const earlier = h("button", { type: "button", class: "btn small", hidden: true }, "Load earlier");
  const status = h("span", { class: "muted small" });
  const pre = h("pre", { class: "log", tabindex: "0" });
  const el = h("div", {}, h("div", { class: "log-bar" },
    h("label", {}, "Replica ", replica), h("label", {}, "Attempt ", attempt),
    h("label", {}, "Stream ", which), status), earlier, pre);
  let es = null;
  let start = 0; // byte offset of the first text shown
  let end = 0;
  let chars = 0;
  let key = "";

  function show(size) {
    status.textContent = end ? `bytes ${start.toLocaleString()}–${end.toLocaleString()} of ` +
      `${size.toLocaleString()}` : "no output yet";
    earlier.hidden = start <= 0;
  }
  function add(text, offset, atTop) {
    const node = document.createTextNode(text);
    node.offset = offset;
    if (atTop) pre.prepend(node); else pre.append(node);
    chars += text.length;
    while (chars > MAX_CHARS && pre.firstChild && pre.firstChild !== pre.lastChild) {
      chars -= pre.firstChild.length;
      pre.firstChild.remove();
      start = pre.firstChild.offset;
    }
  }
  function connect() {
    if (es) es.close();
    pre.replaceChildren();
    start = end = chars = 0;
    const qs = new URLSearchParams({ replica: replica.value, attempt: attempt.value,
      stream: which.value });
    es = stream(`${jobPath(jobId)}/logs?${qs}`, { log: (c) => {
      const follow = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 24;
      if (!end && !pre.firstChild) start = c.offset;
      if (c.text) add(c.text, c.offset, false);
      end = c.next_offset;
      show(c.size);
      if (follow) pre.scrollTop = pre.scrollHeight;
    } });
  }
  earlier.addEventListener("click", async () => {
    const from = Math.max(0, start - PAGE);
    const qs = new URLSearchParams({ replica: replica.value, attempt: attempt.value,
      stream: which.value, offset: from, limit: start - from });
    const c = await get(`${jobPath(jobId)}/logs?${qs}`);
    add(c.text, c.offset, true);
    start = c.offset;
    show(c.size);
  });
  for (const sel of [replica, attempt, which]) sel.addEventListener("change", connect);

  return {
    el,
    update(job) {
      const names = job.replicas.map((r) => r.name);
      const attempts = Array.from({ length: Math.max(1, job.attempt) }, (_, i) => String(i + 1));
      const k = names.join(",") + "|" + attempts.join(",");
      if (k === key) return;
      const follow = !attempt.value || attempt.value === attempt.lastElementChild?.value;
      const keepReplica = replica.value;
      const keepAttempt = attempt.value;
      replica.replaceChildren(...names.map((n) => h("option", { value: n }, n)));
      attempt.replaceChildren(...attempts.map((n) => h("option", { value: n }, n)));
      replica.value = names.includes(keepReplica) ? keepReplica : names[0];
      attempt.value = follow ? attempts[attempts.length - 1] : keepAttempt;
      key = k;
      if (follow || !es) connect();
    },
    stop() { if (es) es.close(); },
  };
}
