// Live pages: each page polls the controller while it is shown.

// How often a page asks the controller again.
export const REFRESH_MS = 2000;

// Runs `load` now and again REFRESH_MS after each run finishes, until the returned function is
// called. Errors show in the header and the next run tries again.
export function poll(load) {
  let timer = null;
  let stopped = false;
  const status = document.getElementById("status");
  async function run() {
    try {
      await load();
      status.textContent = `updated ${new Date().toLocaleTimeString()}`;
      status.classList.remove("error");
    } catch (error) {
      status.textContent = error.message;
      status.classList.add("error");
    }
    if (!stopped) timer = setTimeout(run, REFRESH_MS);
  }
  run();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
