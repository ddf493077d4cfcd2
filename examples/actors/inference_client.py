"""Start the `inference` actor job, call it from here and from a second job, then stop it.

python examples/actors/inference_client.py --local
python examples/actors/inference_client.py --controller-url http://localhost:10000
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from iris.actor import ActorClient, ActorPool
from iris.client import IrisClient, iris_ctx
from iris.client.resolver import ClusterResolver
from iris.cluster.types import Entrypoint, ResourceSpec

HERE = Path(__file__).resolve().parent
SMALL = ResourceSpec(cpu=0.1, memory="128MB")


def ask_from_a_job(namespace: str, text: str) -> dict:
    """Runs inside a second job: finds the actor through the controller the task was given."""
    resolver = ClusterResolver(iris_ctx().controller_address, namespace=namespace)
    return ActorClient(resolver, "inference").predict({"text": text})


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--local", action="store_true", help="start a throwaway cluster on this machine")
    where.add_argument("--controller-url")
    parser.add_argument("--replicas", type=int, default=2)
    options = parser.parse_args()

    client = IrisClient.local(workers=1) if options.local else IrisClient.remote(options.controller_url)
    with client:
        server_job = client.submit(
            Entrypoint.from_command(sys.executable, "-m", "inference_server"),
            name="inference",
            ports=["actor"],
            replicas=options.replicas,
            resources=SMALL,
            workspace=HERE,
        )
        try:
            resolver = ClusterResolver(client.url, namespace=server_job.job_id)
            actor = ActorClient(resolver, "inference")
            print("from outside:", actor.predict({"text": "hello from outside the cluster"}))
            try:
                actor.predict({"txt": "a typo"})
            except KeyError as exc:
                print("the actor raised KeyError:", exc)

            caller = client.submit(
                Entrypoint.from_callable(ask_from_a_job, server_job.job_id, "hello from another job"),
                name="inference-caller",
                resources=SMALL,
                workspace=HERE,
            )
            print("from a job:", caller.result(timeout=120))

            with ActorPool(resolver, "inference") as pool:
                print("round-robin:", [pool.predict({"text": "one two"})["served_by"] for _ in range(4)])
                print("broadcast:", [r.value for r in pool.broadcast("stats")])
        finally:
            server_job.terminate("example finished")


if __name__ == "__main__":
    main()
