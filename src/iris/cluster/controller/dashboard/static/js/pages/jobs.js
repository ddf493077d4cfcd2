// Jobs: filter by state and name, sort, page through any number of jobs; child jobs unfold
// under their parent. A plot of jobs per state over time heads the page.
import { rpc } from "../api.js";
import { h, replace } from "../dom.js";
import { jobLink, runtime, stateBadge, taskCounts, when } from "../format.js";
import { poll } from "../live.js";
import { lineChart } from "../plot.js";

const PAGE_SIZE = 50;
const STATES = ["PENDING", "BUILDING", "RUNNING", "SUCCEEDED", "FAILED", "KILLED", "WORKER_FAILED", "UNSCHEDULABLE"];
const ORDERS = [
  ["JOB_ORDER_NEWEST", "Newest first"],
  ["JOB_ORDER_OLDEST", "Oldest first"],
  ["JOB_ORDER_NAME", "Name A-Z"],
  ["JOB_ORDER_NAME_DESC", "Name Z-A"],
  ["JOB_ORDER_STATE", "State"],
];
// Each state keeps its colour (the badges' hues) whichever states have jobs.
const PLOTTED_STATES = {
  pending: "#d97706",
  building: "#ca8a04",
  running: "#2563eb",
  succeeded: "#16a34a",
  failed: "#dc2626",
  worker_failed: "#9f1239",
  killed: "#6b7280",
  unschedulable: "#7c3aed",
};

// Kept across visits, so coming back from a job shows the same page of the same selection.
const view = { name: "", state: "", order: "JOB_ORDER_NEWEST", page: 0, expanded: new Set() };

// Resolves once the frame holding the latest DOM changes has been painted.
function afterPaint() {
  return new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));
}

function filtered() {
  return Boolean(view.name || view.state);
}

function listRequest() {
  return {
    states: view.state ? [`JOB_STATE_${view.state}`] : [],
    nameContains: view.name,
    // Without a filter the table is a tree: roots, with children under their parent.
    rootsOnly: !filtered(),
    order: view.order,
    pageSize: PAGE_SIZE,
    pageToken: view.page ? String(view.page * PAGE_SIZE) : "",
  };
}

async function loadChildren(jobId) {
  const response = await rpc("ListJobs", { parentJobId: jobId, pageSize: 1000, order: "JOB_ORDER_OLDEST" });
  return response.jobs || [];
}

export function mount(root) {
  let sequence = 0;
  const table = h("tbody");
  const pager = h("div", { class: "pager" });
  const chart = h("div", { class: "charts" });
  const nameInput = h("input", { type: "search", placeholder: "Filter by name", value: view.name, "aria-label": "Filter by name" });
  const stateSelect = h(
    "select",
    { "aria-label": "State" },
    h("option", { value: "" }, "All states"),
    STATES.map((st) => h("option", { value: st, selected: view.state === st }, st.toLowerCase().replace("_", " "))),
  );
  const orderSelect = h(
    "select",
    { "aria-label": "Sort" },
    ORDERS.map(([value, label]) => h("option", { value, selected: view.order === value }, label)),
  );
  let typing = null;
  nameInput.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => {
      view.name = nameInput.value.trim();
      view.page = 0;
      load();
    }, 200);
  });
  stateSelect.addEventListener("change", () => {
    view.state = stateSelect.value;
    view.page = 0;
    load();
  });
  orderSelect.addEventListener("change", () => {
    view.order = orderSelect.value;
    view.page = 0;
    load();
  });

  replace(
    root,
    h("h1", {}, "Jobs"),
    chart,
    h("div", { class: "controls" }, nameInput, stateSelect, orderSelect),
    h(
      "table",
      { class: "grid jobs" },
      h("thead", {}, h("tr", {}, ["Name", "State", "Tasks", "Submitted", "Runtime", "Why"].map((c) => h("th", {}, c)))),
      table,
    ),
    pager,
  );

  function row(job, depth) {
    const expanded = view.expanded.has(job.jobId);
    const children = job.numChildren || 0;
    const toggle = children
      ? h(
          "button",
          {
            class: "toggle",
            "aria-label": `${expanded ? "Fold" : "Unfold"} ${children} child job(s)`,
            onclick: () => {
              if (expanded) view.expanded.delete(job.jobId);
              else view.expanded.add(job.jobId);
              load();
            },
          },
          expanded ? "\u25be" : "\u25b8",
        )
      : h("span", { class: "toggle" });
    return h(
      "tr",
      { dataset: { job: job.jobId } },
      h(
        "td",
        { class: "name", style: `padding-left:${0.5 + depth * 1.5}rem` },
        toggle,
        jobLink(job.jobId, job.name || job.jobId),
        children ? h("span", { class: "muted" }, ` (${children} child${children === 1 ? "" : "ren"})`) : null,
      ),
      h("td", {}, stateBadge(job.state)),
      h("td", {}, `${job.numTasks || 0}: ${taskCounts(job.taskStateCounts)}`),
      h("td", {}, when(job.submittedAt)),
      h("td", {}, runtime(job)),
      h("td", { class: "why" }, job.error || job.pendingReason || ""),
    );
  }

  async function rowsWithChildren(jobs, depth) {
    const rows = [];
    for (const job of jobs) {
      rows.push(row(job, depth));
      if (!filtered() && view.expanded.has(job.jobId) && job.numChildren) {
        rows.push(...(await rowsWithChildren(await loadChildren(job.jobId), depth + 1)));
      }
    }
    return rows;
  }

  async function load() {
    const mine = ++sequence;
    const started = performance.now();
    const response = await rpc("ListJobs", listRequest());
    const jobs = response.jobs || [];
    const rows = await rowsWithChildren(jobs, 0);
    if (mine !== sequence) return;
    const total = response.totalCount || 0;
    const pages = Math.max(1, Math.ceil(total / PAGE_SIZE));
    replace(
      table,
      rows.length ? rows : h("tr", {}, h("td", { colspan: 6, class: "muted" }, filtered() ? "No job matches." : "No jobs yet.")),
    );
    const go = (page) => () => {
      view.page = page;
      load();
    };
    replace(
      pager,
      h("button", { disabled: view.page === 0, onclick: go(0) }, "\u00ab First"),
      h("button", { disabled: view.page === 0, onclick: go(view.page - 1) }, "\u2190 Previous"),
      h("span", { class: "page-info" }, `Page ${(view.page + 1).toLocaleString()} of ${pages.toLocaleString()} \u00b7 ${total.toLocaleString()} ${filtered() ? "matching" : "top-level"} jobs`),
      h("button", { disabled: !response.nextPageToken, onclick: go(view.page + 1) }, "Next \u2192"),
      h("button", { disabled: !response.nextPageToken, onclick: go(pages - 1) }, "Last \u00bb"),
    );
    // Read by the browser tests and the benchmark, once the frame with the new rows is painted:
    // when rows first showed, and how long each page took from the request to the screen.
    await afterPaint();
    performance.mark("iris:jobs-rendered");
    performance.measure("iris:jobs-page", { start: started, end: performance.now() });
  }

  async function loadChart() {
    const series = await rpc("GetTimeSeries", {});
    const samples = series.jobStates || [];
    const lines = Object.entries(PLOTTED_STATES)
      .map(([state, color]) => ({
        name: state.replace("_", " "),
        color,
        points: samples.map((sample) => [Number(sample.atMs), (sample.counts || {})[state] || 0]),
      }))
      .filter((line) => line.points.some((p) => p[1] > 0));
    replace(chart, lineChart({ title: "Jobs by state over time", series: lines, format: (v) => Math.round(v).toLocaleString(), integer: true }));
  }

  return poll(() => Promise.all([load(), loadChart()]));
}
