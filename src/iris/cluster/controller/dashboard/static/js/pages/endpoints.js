// Endpoints that running jobs registered: name, address, owning job, metadata.
import { rpc } from "../api.js";
import { h, replace } from "../dom.js";
import { jobLink } from "../format.js";
import { poll } from "../live.js";

export function mount(root) {
  const body = h("tbody");
  replace(
    root,
    h("h1", {}, "Endpoints"),
    h(
      "table",
      { class: "grid endpoints" },
      h("thead", {}, h("tr", {}, ["Name", "Address", "Job", "Metadata"].map((c) => h("th", {}, c)))),
      body,
    ),
  );
  return poll(async () => {
    const endpoints = (await rpc("ListEndpoints", {})).endpoints || [];
    replace(
      body,
      endpoints.length
        ? endpoints.map((e) =>
            h(
              "tr",
              { dataset: { endpoint: e.endpointId } },
              h("td", {}, e.name),
              h("td", {}, h("code", {}, e.address)),
              h("td", {}, jobLink(e.jobId)),
              h("td", {}, Object.entries(e.metadata || {}).map(([k, v]) => h("span", { class: "chip" }, `${k}=${v}`))),
            ),
          )
        : h("tr", {}, h("td", { colspan: 4, class: "muted" }, "No running job has registered an endpoint.")),
    );
  });
}
