// One job: its state and why, its tasks (state, attempts, worker, pending reason or failure),
// its child jobs and its transition story.
import { rpc } from "../api.js";
import { h, replace } from "../dom.js";
import { attributeValue, bytes, cpus, device, jobLink, runtime, stateBadge, story, taskCounts, taskLink, when } from "../format.js";
import { poll } from "../live.js";

function facts(pairs) {
  return h(
    "dl",
    { class: "facts" },
    pairs.filter(([, value]) => value !== "" && value !== null && value !== undefined).map(([term, value]) => [h("dt", {}, term), h("dd", {}, value)]),
  );
}

function taskRow(task) {
  const attempts = task.attempts || [];
  const why = task.pendingReason || task.error || "";
  return h(
    "tr",
    { dataset: { task: task.taskId } },
    h("td", {}, taskLink(task.taskId, `task ${task.taskIndex || 0}`)),
    h("td", {}, stateBadge(task.state)),
    h("td", {}, String(attempts.length)),
    h("td", {}, task.workerId || ""),
    h("td", {}, when(task.startedAt)),
    h("td", {}, runtime(task)),
    h("td", { class: "why" }, why),
  );
}

function constraintText(c) {
  const op = String(c.op || "").replace("CONSTRAINT_OP_", "").toLowerCase();
  const values = c.values && c.values.length ? c.values : c.value ? [c.value] : [];
  return `${c.key} ${op} ${values.map(attributeValue).join(", ")}`.trim();
}

// What the user submitted: command, environment, placement rules.
function specSection(spec) {
  const entry = spec.entrypoint || {};
  const env = spec.environment || {};
  const command = entry.command ? (entry.command.argv || []).join(" ") : entry.callable ? "a Python callable" : "";
  const envVars = Object.entries(env.envVars || {}).sort(([a], [b]) => a.localeCompare(b));
  return [
    h("h2", {}, "Submitted as"),
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "Command"),
      h("dd", {}, h("code", { class: "command" }, command)),
      h("dt", {}, "Replicas"),
      h("dd", {}, String(spec.replicas || 1)),
      spec.coscheduling && spec.coscheduling.groupBy ? [h("dt", {}, "Coscheduled by"), h("dd", {}, spec.coscheduling.groupBy)] : null,
      (spec.constraints || []).length ? [h("dt", {}, "Constraints"), h("dd", {}, spec.constraints.map((c) => h("span", { class: "chip" }, constraintText(c))))] : null,
      spec.priority ? [h("dt", {}, "Priority"), h("dd", {}, String(spec.priority))] : null,
      (env.pipPackages || []).length ? [h("dt", {}, "pip packages"), h("dd", {}, env.pipPackages.join(" "))] : null,
      (env.setupCommands || []).length ? [h("dt", {}, "Setup commands"), h("dd", {}, env.setupCommands.map((c) => h("div", {}, h("code", {}, c))))] : null,
    ),
    envVars.length
      ? h(
          "table",
          { class: "grid env" },
          h("thead", {}, h("tr", {}, h("th", {}, "Environment variable"), h("th", {}, "Value"))),
          h("tbody", {}, envVars.map(([key, value]) => h("tr", {}, h("td", {}, h("code", {}, key)), h("td", {}, h("code", {}, value))))),
        )
      : null,
  ];
}

export function mount(root, [jobId]) {
  const header = h("div");
  const spec = h("div");
  const tasks = h("tbody");
  const children = h("div");
  const history = h("div");
  replace(
    root,
    header,
    h("h2", {}, "Tasks"),
    h(
      "table",
      { class: "grid tasks" },
      h("thead", {}, h("tr", {}, ["Task", "State", "Attempts", "Worker", "Started", "Runtime", "Pending reason / failure"].map((c) => h("th", {}, c)))),
      tasks,
    ),
    children,
    h("h2", {}, "Story"),
    history,
    spec,
  );
  // The submission does not change: asked for once.
  rpc("GetJobSpec", { jobId }).then(
    (submitted) => replace(spec, specSection(submitted)),
    (error) => replace(spec, h("p", { class: "error-text" }, error.message)),
  );

  async function load() {
    const [{ job }, kids] = await Promise.all([
      rpc("GetJobStatus", { jobId, includeTasks: true }),
      rpc("ListJobs", { parentJobId: jobId, pageSize: 1000, order: "JOB_ORDER_OLDEST" }),
    ]);
    const resources = job.resources || {};
    replace(
      header,
      h("p", { class: "crumbs" }, h("a", { href: "#/jobs" }, "Jobs"), job.parentJobId ? [" / ", jobLink(job.parentJobId)] : null),
      h("h1", {}, job.name || job.jobId, " ", stateBadge(job.state)),
      job.error ? h("p", { class: "error-text" }, job.error) : null,
      job.pendingReason ? h("p", { class: "pending-text" }, "Pending: ", job.pendingReason) : null,
      facts([
        ["Job id", job.jobId],
        ["Tasks", `${job.numTasks || 0}: ${taskCounts(job.taskStateCounts)}`],
        ["Submitted", when(job.submittedAt)],
        ["Runtime", runtime(job)],
        ["Resources per task", [cpus(resources.cpuMillicores), bytes(resources.memoryBytes), device(resources.device)].filter(Boolean).join(", ")],
        ["Failures", job.failureCount ? String(job.failureCount) : ""],
        ["Preemptions", job.preemptionCount ? String(job.preemptionCount) : ""],
        ["Exit code", job.exitCode ? String(job.exitCode) : ""],
      ]),
      h("p", {}, h("a", { href: `#/task/${encodeURIComponent(`${job.jobId}/0`)}` }, "Logs of task 0")),
    );
    replace(tasks, (job.tasks || []).map(taskRow));
    const childJobs = kids.jobs || [];
    replace(
      children,
      childJobs.length
        ? [
            h("h2", {}, `Child jobs (${childJobs.length})`),
            h("ul", { class: "children" }, childJobs.map((c) => h("li", {}, jobLink(c.jobId, c.name || c.jobId), " ", stateBadge(c.state)))),
          ]
        : null,
    );
    replace(history, story(job.history));
  }

  return poll(load);
}
