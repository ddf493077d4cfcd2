"""An actor-hosting job: serves the actor `inference` on the task's named port `actor`.

Submit it from this directory with a named port, for example

    iris job run --config ../local.yaml --port actor -- python -m inference_server

or run `inference_client.py`, which submits it from Python and then calls it. With `--replicas N`
every task serves its own replica, and `ActorPool` spreads calls over them.
"""

from __future__ import annotations

import asyncio
import os

from iris.actor import ActorServer
from iris.client import iris_ctx


class InferenceModel:
    """A stand-in for a model: enough to show state, an async method and errors travelling back."""

    def __init__(self) -> None:
        self.requests = 0

    def predict(self, request: dict) -> dict:
        """Count the words of request["text"]; a request without "text" raises KeyError at the caller."""
        words = request["text"].split()
        self.requests += 1
        return {"words": len(words), "served_by": iris_ctx().task_id}

    async def embed(self, text: str, dim: int = 4) -> list[float]:
        """An async method: it runs on the server's event loop and may overlap other async calls."""
        await asyncio.sleep(0)
        return [float((sum(map(ord, text)) * (i + 1)) % 97) for i in range(dim)]

    def whoami(self) -> dict:
        ctx = iris_ctx()
        return {
            "task_id": ctx.task_id,
            "attempt_id": ctx.attempt_id,
            "worker_id": ctx.worker_id,
            "pid": os.getpid(),
        }

    def stats(self) -> dict:
        return {"requests": self.requests}


def main() -> None:
    server = ActorServer(port="actor")
    server.register("inference", InferenceModel())
    server.start()
    print(f"serving actor 'inference' at {server.url}", flush=True)
    # Until the task is killed (SIGTERM): the endpoint is unregistered on the way out.
    server.serve()


if __name__ == "__main__":
    main()
