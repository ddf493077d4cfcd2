// Slices and the autoscaler: each scale group with min/max/current, demand and why unmet demand
// is unmet; its capacity against demand over time; its slices with their state story; and the
// recent scaling actions with their reasons.
import { rpc } from "../api.js";
import { h, replace } from "../dom.js";
import { epochMs, story, when } from "../format.js";
import { poll } from "../live.js";
import { lineChart } from "../plot.js";

const READY = new Set(["READY"]);
const BOOTING = new Set(["CREATING", "BOOTSTRAPPING"]);

// Slices whose story is unfolded, kept across refreshes.
const open = new Set();

function sliceRows(slice, refresh) {
  const rows = [
    h(
      "tr",
      { dataset: { slice: slice.sliceId } },
      h(
        "td",
        {},
        h(
          "button",
          {
            class: "toggle",
            "aria-label": `Story of ${slice.sliceId}`,
            onclick: () => {
              if (open.has(slice.sliceId)) open.delete(slice.sliceId);
              else open.add(slice.sliceId);
              refresh();
            },
          },
          open.has(slice.sliceId) ? "\u25be" : "\u25b8",
        ),
        slice.sliceId,
      ),
      h("td", {}, h("span", { class: `badge slice-${(slice.state || "").toLowerCase()}` }, (slice.state || "").toLowerCase())),
      h("td", {}, slice.zone || ""),
      h("td", {}, (slice.workerIds || []).join(", ")),
      h("td", {}, when(slice.createdAt)),
      h("td", {}, slice.idle ? "idle" : ""),
      h("td", { class: "why" }, slice.error || ""),
    ),
  ];
  if (open.has(slice.sliceId)) {
    rows.push(h("tr", { class: "detail" }, h("td", { colspan: 7, "data-story": slice.sliceId }, "loading\u2026")));
  }
  return rows;
}

function groupCard(group, samples, refresh) {
  const slices = group.slices || [];
  const live = slices.filter((s) => s.state !== "DELETED");
  const ready = live.filter((s) => READY.has(s.state)).length;
  const booting = live.filter((s) => BOOTING.has(s.state)).length;
  const points = (key) => samples.map((x) => [Number(x.atMs), Number(x[key] || 0)]);
  return h(
    "section",
    { class: "group", dataset: { group: group.name } },
    h("h2", {}, group.name, " ", h("span", { class: `badge group-${group.state}` }, group.state || "")),
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "Slices (min / current / max)"),
      h("dd", {}, `${group.minSlices || 0} / ${ready} ready${booting ? ` + ${booting} booting` : ""} / ${group.maxSlices || 0}`),
      h("dt", {}, "Demand"),
      h("dd", {}, `${group.demand || 0} pending task(s) or gang(s)`),
      group.unmetReason ? [h("dt", {}, "Why demand is unmet"), h("dd", { class: "why" }, group.unmetReason)] : null,
      (group.blockedZones || []).length ? [h("dt", {}, "Blocked zones"), h("dd", {}, group.blockedZones.join("; "))] : null,
      group.detail ? [h("dt", {}, "Last failure"), h("dd", { class: "why" }, group.detail)] : null,
      epochMs(group.backoffUntil) ? [h("dt", {}, "Backing off until"), h("dd", {}, new Date(epochMs(group.backoffUntil)).toLocaleTimeString())] : null,
    ),
    lineChart({
      title: `${group.name}: capacity vs demand`,
      series: [
        { name: "ready slices", points: points("readySlices") },
        { name: "booting slices", points: points("bootingSlices") },
        { name: "demand", points: points("demand") },
        { name: "max slices", points: points("maxSlices"), color: "#9ca3af" },
      ],
      format: (v) => String(Math.round(v)),
      integer: true,
    }),
    h(
      "table",
      { class: "grid slices" },
      h("thead", {}, h("tr", {}, ["Slice", "State", "Zone", "Workers", "Created", "", "Error"].map((c) => h("th", {}, c)))),
      h("tbody", {}, slices.length ? slices.map((s) => sliceRows(s, refresh)) : h("tr", {}, h("td", { colspan: 7, class: "muted" }, "No slices."))),
    ),
  );
}

export function mount(root) {
  const body = h("div");
  replace(root, h("h1", {}, "Slices and autoscaler"), body);

  async function load() {
    const [status, series] = await Promise.all([rpc("GetAutoscalerStatus", {}), rpc("GetTimeSeries", {})]);
    if (!status.enabled) {
      replace(body, h("p", { class: "muted" }, "This controller has no autoscaler: its cluster config defines no scale groups."));
      return;
    }
    const samples = series.scaleGroups || [];
    const actions = status.recentActions || [];
    replace(
      body,
      (status.unroutable || []).length
        ? h("section", { class: "unroutable" }, h("h2", {}, "Demand no group can serve"), h("ul", {}, status.unroutable.map((u) => h("li", {}, u))))
        : null,
      (status.groups || []).map((g) => groupCard(g, samples.filter((x) => x.scaleGroup === g.name), load)),
      h("h2", {}, "Recent scaling actions"),
      h(
        "table",
        { class: "grid actions" },
        h("thead", {}, h("tr", {}, ["When", "Group", "Action", "Slice", "Zone", "Why"].map((c) => h("th", {}, c)))),
        h(
          "tbody",
          {},
          actions.length
            ? actions.map((a) => h("tr", {}, h("td", {}, when(a.at)), h("td", {}, a.scaleGroup || ""), h("td", {}, a.action || ""), h("td", {}, a.sliceId || ""), h("td", {}, a.zone || ""), h("td", { class: "why" }, a.reason || "")))
            : h("tr", {}, h("td", { colspan: 6, class: "muted" }, "No scaling actions yet.")),
        ),
      ),
    );
    await Promise.all(
      [...body.querySelectorAll("td[data-story]")].map(async (cell) => {
        const slice = await rpc("GetSlice", { sliceId: cell.dataset.story });
        replace(cell, story(slice.history));
      }),
    );
  }

  return poll(load);
}
