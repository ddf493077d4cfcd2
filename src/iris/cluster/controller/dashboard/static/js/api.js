// The controller's Connect RPC API with JSON bodies: the dashboard reads nothing else.
//
// On a cluster with auth on, every call carries the token kept in this tab's sessionStorage. It
// gets there from the login form, or from a `?token=` in the address, which is taken out of the
// address at once so that it stays out of the history and of anything copied from the bar.

const TOKEN_KEY = "iris.token";
export const UNAUTHENTICATED_EVENT = "iris:unauthenticated";

export function adoptTokenFromAddress() {
  const url = new URL(location.href);
  const token = url.searchParams.get("token");
  if (!token) return;
  sessionStorage.setItem(TOKEN_KEY, token);
  url.searchParams.delete("token");
  history.replaceState(null, "", url.pathname + url.search + url.hash);
}

export function setToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export function hasToken() {
  return Boolean(sessionStorage.getItem(TOKEN_KEY));
}

export class RpcError extends Error {
  constructor(method, code, message) {
    super(`${method}: ${message}`);
    this.code = code;
  }
}

export async function rpc(method, request = {}) {
  let response;
  try {
    response = await fetch(`iris.cluster.ControllerService/${method}`, {
      method: "POST",
      headers: requestHeaders(),
      body: JSON.stringify(request),
    });
  } catch (error) {
    throw new RpcError(method, "unavailable", `the controller is unreachable (${error.message})`);
  }
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    if (body.code === "unauthenticated") window.dispatchEvent(new CustomEvent(UNAUTHENTICATED_EVENT));
    throw new RpcError(method, body.code || String(response.status), body.message || response.statusText);
  }
  return body;
}

function requestHeaders() {
  const headers = { "Content-Type": "application/json" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  return headers;
}
