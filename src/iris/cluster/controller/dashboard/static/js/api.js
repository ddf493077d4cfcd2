// The controller's Connect RPC API with JSON bodies: the dashboard reads nothing else.

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
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(request),
    });
  } catch (error) {
    throw new RpcError(method, "unavailable", `the controller is unreachable (${error.message})`);
  }
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    throw new RpcError(method, body.code || String(response.status), body.message || response.statusText);
  }
  return body;
}
