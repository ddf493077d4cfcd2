// The dashboard's shell: hash routes to pages and the navigation bar. Each page's mount()
// returns the function that stops its refreshing when the page is left.
import { UNAUTHENTICATED_EVENT, adoptTokenFromAddress, hasToken, setToken } from "./api.js";
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

// The cluster wants a token (none yet, or the one kept has expired): ask for one, then reload
// the page the user was on.
function showLogin() {
  if (document.getElementById("login")) return;
  if (unmount) unmount();
  unmount = null;
  const input = h("input", { type: "password", name: "token", autocomplete: "off", placeholder: "token", "aria-label": "token" });
  const submit = (event) => {
    event.preventDefault();
    setToken(input.value.trim());
    route();
  };
  replace(
    document.getElementById("main"),
    h(
      "form",
      { id: "login", class: "login", onsubmit: submit },
      h("h1", {}, "Log in"),
      h("p", {}, hasToken() ? "The token was refused (it may have expired). " : "This cluster needs a token. ",
        "Paste a token (from iris token create, or the session token in the file iris login writes); it is kept in this tab only."),
      input,
      h("button", { type: "submit" }, "Log in"),
    ),
  );
  input.focus();
}

adoptTokenFromAddress();
window.addEventListener(UNAUTHENTICATED_EVENT, showLogin);
window.addEventListener("hashchange", route);
route();
