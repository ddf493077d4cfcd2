// Workers: health, last heartbeat, running tasks, attributes, and resources committed to tasks
// against what the worker offers.
import { rpc } from "../api.js";
import { h, replace } from "../dom.js";
import { attributeValue, bytes, device, stateBadge, taskLink, when } from "../format.js";
import { poll } from "../live.js";

function usageBar(label, used, offered, format) {
  const share = offered > 0 ? Math.min(1, used / offered) : 0;
  return h(
    "div",
    { class: "usage", title: `${label}: ${format(used)} of ${format(offered)} committed to tasks` },
    h("div", { class: "bar" }, h("div", { class: "fill", style: `width:${(share * 100).toFixed(1)}%` })),
    h("span", {}, `${label} ${format(used)} / ${format(offered)}`),
  );
}

function workerRow(worker) {
  const meta = worker.metadata || {};
  const used = worker.committed || {};
  const attributes = Object.entries(meta.attributes || {}).sort(([a], [b]) => a.localeCompare(b));
  const running = worker.runningTaskIds || [];
  return h(
    "tr",
    { dataset: { worker: worker.workerId } },
    h("td", {}, h("strong", {}, worker.workerId), h("div", { class: "muted" }, worker.address || ""), h("div", { class: "muted" }, `${meta.hostname || ""} \u00b7 ${meta.runtime || ""}`)),
    h("td", {}, stateBadge(worker.state), worker.error ? h("div", { class: "why" }, worker.error) : null),
    h("td", {}, when(worker.lastHeartbeat)),
    h(
      "td",
      {},
      usageBar("CPU", Number(used.cpuMillicores || 0), Number(meta.cpuMillicores || 0), (m) => String(Number((m / 1000).toFixed(2)))),
      usageBar("Memory", Number(used.memoryBytes || 0), Number(meta.memoryBytes || 0), bytes),
      device(meta.device) ? h("div", {}, device(meta.device)) : null,
    ),
    h("td", {}, running.length ? h("ul", { class: "plain" }, running.map((id) => h("li", {}, taskLink(id)))) : h("span", { class: "muted" }, "idle")),
    h("td", {}, attributes.map(([key, value]) => h("span", { class: "chip" }, `${key}=${attributeValue(value)}`))),
  );
}

export function mount(root) {
  const summary = h("p", { class: "muted" });
  const body = h("tbody");
  replace(
    root,
    h("h1", {}, "Workers"),
    summary,
    h(
      "table",
      { class: "grid workers" },
      h("thead", {}, h("tr", {}, ["Worker", "Health", "Last heartbeat", "Committed / offered", "Running tasks", "Attributes"].map((c) => h("th", {}, c)))),
      body,
    ),
  );
  return poll(async () => {
    const workers = (await rpc("ListWorkers", {})).workers || [];
    const healthy = workers.filter((w) => w.state === "WORKER_STATE_HEALTHY").length;
    summary.textContent = `${workers.length} worker(s), ${healthy} healthy`;
    replace(body, workers.length ? workers.map(workerRow) : h("tr", {}, h("td", { colspan: 6, class: "muted" }, "No worker has registered.")));
  });
}
