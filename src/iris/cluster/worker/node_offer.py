"""What a worker whose tasks are Pods offers the controller: its configured size, less what the
other Pods on its node (daemonsets, the controller) request.

Those Pods come and go after the worker registers (the controller moving onto the node, a
daemonset rolling out), so the worker reads its node's room again now and then and registers
again when its offer changed; otherwise the controller would place tasks the Kubernetes
scheduler cannot fit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from iris.cluster.runtime.types import ContainerRuntime
from iris.rpc import cluster_pb2 as pb

if TYPE_CHECKING:
    from iris.cluster.runtime.kubernetes import NodeRoom

# How often a worker reads its node's room; one Pod listing of one node each time.
OFFER_CHECK_INTERVAL_S = 30.0

OfferReader = Callable[[], pb.WorkerMetadata]


def offer_within(configured: pb.WorkerMetadata, room: NodeRoom | None) -> pb.WorkerMetadata:
    """`configured` with its cpu, memory and GPUs lowered to what `room` leaves; unchanged
    without a room to go by."""
    offer = pb.WorkerMetadata()
    offer.CopyFrom(configured)
    if room is None:
        return offer
    offer.cpu_millicores = min(offer.cpu_millicores, room.cpu_millicores)
    offer.memory_bytes = min(offer.memory_bytes, room.memory_bytes)
    if offer.device.HasField("gpu"):
        offer.device.gpu.count = min(offer.device.gpu.count, room.gpus)
    return offer


def describe_offer(metadata: pb.WorkerMetadata) -> str:
    gpus = f", {metadata.device.gpu.count} GPUs" if metadata.device.HasField("gpu") else ""
    return f"{metadata.cpu_millicores}m cpu, {metadata.memory_bytes} bytes of memory{gpus}"


def node_offer_reader(runtime: ContainerRuntime, configured: pb.WorkerMetadata) -> OfferReader | None:
    """A function giving the worker's current offer (raising `ContainerError` when the API server
    cannot be read), or None when the runtime's tasks do not share a node with other Pods."""
    from iris.cluster.runtime.kubernetes import KubernetesRuntime  # only a Kubernetes worker needs it

    if not isinstance(runtime, KubernetesRuntime):
        return None

    return lambda: offer_within(configured, runtime.node_room())
