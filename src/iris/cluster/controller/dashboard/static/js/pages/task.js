// One task: its attempts, its transition story, its CPU and memory over time, and its logs,
// which keep arriving while "Follow" is on.
import { rpc } from "../api.js";
import { h, replace } from "../dom.js";
import { bytes, clock, jobLink, runtime, stateBadge, story, when } from "../format.js";
import { poll } from "../live.js";
import { lineChart } from "../plot.js";

// The browser keeps at most this many lines; older ones scroll away.
const MAX_LINES = 20000;
const LOG_BATCH = 1000;

function attemptRow(attempt) {
  return h(
    "tr",
    {},
    h("td", {}, String(attempt.attemptId || 0)),
    h("td", {}, attempt.workerId || ""),
    h("td", {}, stateBadge(attempt.state)),
    h("td", {}, attempt.exitCode ? String(attempt.exitCode) : ""),
    h("td", {}, when(attempt.startedAt)),
    h("td", {}, runtime(attempt)),
    h("td", { class: "why" }, attempt.error || ""),
  );
}

export function mount(root, [taskId]) {
  const header = h("div");
  const attempts = h("tbody");
  const history = h("div");
  const charts = h("div", { class: "charts two" });
  const follow = h("input", { type: "checkbox", checked: true, id: "follow" });
  const logState = h("span", { class: "muted" });
  const logs = h("div", { class: "logs", role: "log", "aria-label": "Task logs" });
  let cursor = 0;
  let logsFinished = false;

  replace(
    root,
    header,
    h("h2", {}, "Attempts"),
    h(
      "table",
      { class: "grid attempts" },
      h("thead", {}, h("tr", {}, ["Attempt", "Worker", "State", "Exit", "Started", "Runtime", "Error"].map((c) => h("th", {}, c)))),
      attempts,
    ),
    h("h2", {}, "Resource use"),
    charts,
    h("h2", {}, "Story"),
    history,
    h("h2", {}, "Logs ", h("label", { class: "follow" }, follow, " Follow"), " ", logState),
    logs,
  );

  async function loadStatus() {
    const { task } = await rpc("GetTaskStatus", { taskId });
    replace(
      header,
      h("p", { class: "crumbs" }, h("a", { href: "#/jobs" }, "Jobs"), " / ", jobLink(task.jobId)),
      h("h1", {}, `Task ${task.taskIndex || 0} of `, task.jobId, " ", stateBadge(task.state)),
      task.error ? h("p", { class: "error-text" }, task.error) : null,
      task.pendingReason ? h("p", { class: "pending-text" }, "Pending: ", task.pendingReason) : null,
      h(
        "dl",
        { class: "facts" },
        h("dt", {}, "Worker"),
        h("dd", {}, task.workerId ? `${task.workerId} (${task.workerAddress || "no address"})` : "none yet"),
        h("dt", {}, "Started"),
        h("dd", {}, when(task.startedAt) || "not yet"),
        h("dt", {}, "Runtime"),
        h("dd", {}, runtime(task)),
        h("dt", {}, "Failures / preemptions"),
        h("dd", {}, `${task.failureCount || 0} / ${task.preemptionCount || 0}`),
      ),
    );
    replace(attempts, (task.attempts || []).map(attemptRow));
    replace(history, story(task.history));
  }

  async function loadUsage() {
    const series = await rpc("GetTimeSeries", { taskId });
    const samples = series.taskUsage || [];
    const points = (key) => samples.map((x) => [Number(x.atMs), Number(x[key] || 0)]);
    replace(
      charts,
      lineChart({ title: "CPU (% of one core)", series: [{ name: "cpu", points: points("cpuPercent") }], format: (v) => `${Math.round(v)}%`, empty: "No samples: the task has not reported while running." }),
      lineChart({ title: "Memory", series: [{ name: "memory", points: points("memoryBytes") }], format: bytes, empty: "No samples: the task has not reported while running." }),
    );
  }

  async function loadLogs() {
    while (!logsFinished) {
      const response = await rpc("GetTaskLogs", { id: taskId, cursor: String(cursor), maxLines: LOG_BATCH });
      const lines = response.lines || [];
      logs.append(
        ...lines.map((l) => {
          const line = l.line || {};
          return h(
            "div",
            { class: `line ${line.source || "stdout"}` },
            h("span", { class: "ts", title: clock(Number(line.timestampMs || 0)) }, new Date(Number(line.timestampMs || 0)).toLocaleTimeString()),
            h("span", { class: "attempt" }, `#${l.attemptId || 0}`),
            h("span", { class: "data" }, line.data || ""),
          );
        }),
      );
      while (logs.childElementCount > MAX_LINES) logs.firstElementChild.remove();
      cursor = Number(response.nextCursor || cursor);
      logsFinished = Boolean(response.finished);
      if (lines.length && follow.checked) logs.scrollTop = logs.scrollHeight;
      if (lines.length < LOG_BATCH) break;
    }
    logState.textContent = logsFinished ? "(complete)" : follow.checked ? "(following)" : "";
    if (logs.childElementCount === 0) logs.dataset.empty = logsFinished ? "This task printed nothing." : "No output yet.";
    else delete logs.dataset.empty;
  }

  return poll(() => Promise.all([loadStatus(), loadUsage(), loadLogs()]));
}
