// Turning the API's JSON (proto3 JSON: int64 as strings, defaults omitted) into readable text.
import { h } from "./dom.js";

export function epochMs(timestamp) {
  return timestamp && timestamp.epochMs ? Number(timestamp.epochMs) : 0;
}

// "JOB_STATE_WORKER_FAILED" -> "worker_failed"
export function stateName(state) {
  return String(state || "").replace(/^(JOB|TASK|WORKER)_STATE_/, "").toLowerCase() || "unknown";
}

export function stateBadge(state) {
  const name = stateName(state);
  return h("span", { class: `badge state-${name}` }, name.replace("_", " "));
}

export function duration(ms) {
  if (!(ms >= 0)) return "";
  const seconds = Math.round(ms / 1000);
  if (seconds < 60) return `${seconds}s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes}m ${seconds % 60}s`;
  const hours = Math.floor(minutes / 60);
  if (hours < 48) return `${hours}h ${minutes % 60}m`;
  return `${Math.floor(hours / 24)}d ${hours % 24}h`;
}

export function ago(timestamp) {
  const at = epochMs(timestamp);
  return at ? `${duration(Date.now() - at)} ago` : "";
}

export function clock(ms) {
  return ms ? new Date(ms).toLocaleString() : "";
}

// A time cell: relative, with the exact time on hover.
export function when(timestamp) {
  const at = epochMs(timestamp);
  return at ? h("span", { title: clock(at) }, ago(timestamp)) : "";
}

export function runtime(item) {
  const started = epochMs(item.startedAt);
  if (!started) return "";
  const finished = epochMs(item.finishedAt) || Date.now();
  return duration(finished - started);
}

export function bytes(value) {
  let n = Number(value || 0);
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let unit = 0;
  while (n >= 1024 && unit < units.length - 1) {
    n /= 1024;
    unit += 1;
  }
  return `${n >= 10 || unit === 0 ? Math.round(n) : n.toFixed(1)} ${units[unit]}`;
}

export function cpus(millicores) {
  const n = Number(millicores || 0) / 1000;
  return `${Number.isInteger(n) ? n : n.toFixed(2)} CPU`;
}

export function device(config) {
  if (!config) return "";
  const kind = config.tpu ? "tpu" : config.gpu ? "gpu" : "";
  if (!kind) return "";
  const d = config[kind];
  return `${kind.toUpperCase()} ${d.variant || ""}${d.count ? ` x${d.count}` : ""}`.trim();
}

export function attributeValue(value) {
  if (!value) return "";
  if ("stringValue" in value) return value.stringValue;
  if ("intValue" in value) return String(value.intValue);
  if ("floatValue" in value) return String(value.floatValue);
  return "";
}

export function jobLink(jobId, text) {
  return h("a", { href: `#/job/${encodeURIComponent(jobId)}` }, text ?? jobId);
}

export function taskLink(taskId, text) {
  return h("a", { href: `#/task/${encodeURIComponent(taskId)}` }, text ?? taskId);
}

// "3 running, 1 pending" from {"running": 3, "pending": 1}
export function taskCounts(counts) {
  return Object.entries(counts || {})
    .sort((a, b) => b[1] - a[1])
    .map(([state, n]) => `${n} ${state.replace("_", " ")}`)
    .join(", ");
}

// A transition story as a list: time, from -> to, reason.
export function story(history) {
  if (!history || history.length === 0) return h("p", { class: "muted" }, "No transitions recorded.");
  return h(
    "ol",
    { class: "story" },
    history.map((t) =>
      h(
        "li",
        {},
        h("span", { class: "muted", title: clock(epochMs(t.at)) }, new Date(epochMs(t.at)).toLocaleTimeString()),
        " ",
        stateBadge(t.fromState),
        " \u2192 ",
        stateBadge(t.toState),
        " ",
        t.reason || "",
      ),
    ),
  );
}
