// The dashboard's shell: hash routes to pages and the navigation bar. Each page's mount()
// returns the function that stops its refreshing when the page is left.
import { h, replace } from "./dom.js";
import * as autoscaler from "./pages/autoscaler.js";
import * as endpoints from "./pages/endpoints.js";
import * as job from "./pages/job.js";
import * as jobs from "./pages/jobs.js";
import * as task from "./pages/task.js";
import * as workers from "./pages/workers.js";

const ROUTES = [
  { pattern: /^#\/jobs$/, page: jobs, nav: "Jobs" },
  { pattern: /^#\/job\/(.+)$/, page: job, nav: "Jobs" },
  { pattern: /^#\/task\/(.+)$/, page: task, nav: "Jobs" },
  { pattern: /^#\/workers$/, page: workers, nav: "Workers" },
  { pattern: /^#\/autoscaler$/, page: autoscaler, nav: "Autoscaler" },
  { pattern: /^#\/endpoints$/, page: endpoints, nav: "Endpoints" },
];
const NAV = [
  ["Jobs", "#/jobs"],
  ["Workers", "#/workers"],
  ["Autoscaler", "#/autoscaler"],
  ["Endpoints", "#/endpoints"],
];

let unmount = null;

function route() {
  if (!location.hash || location.hash === "#" || location.hash === "#/") {
    location.replace("#/jobs");
    return;
  }
  const found = ROUTES.map((r) => ({ r, m: location.hash.match(r.pattern) })).find((x) => x.m);
  if (unmount) unmount();
  unmount = null;
  const main = document.getElementById("main");
  replace(
    document.getElementById("nav"),
    NAV.map(([name, href]) => h("a", { href, class: found && found.r.nav === name ? "active" : null }, name)),
  );
  if (!found) {
    replace(main, h("h1", {}, "Not found"), h("p", {}, "No page at ", location.hash, ". ", h("a", { href: "#/jobs" }, "Go to the jobs.")));
    return;
  }
  const params = found.m.slice(1).map(decodeURIComponent);
  replace(main);
  unmount = found.r.page.mount(main, params);
}

window.addEventListener("hashchange", route);
route();
