"""A worker's offer on a node other Pods share: its configured size, lowered to the node's room."""

from __future__ import annotations

from iris.cluster.runtime.kubernetes import NodeRoom
from iris.cluster.worker.node_offer import describe_offer, offer_within
from iris.rpc import cluster_pb2 as pb


def _gpu_worker(cpu_millicores: int, memory_bytes: int, gpus: int) -> pb.WorkerMetadata:
    metadata = pb.WorkerMetadata(hostname="n1", cpu_millicores=cpu_millicores, memory_bytes=memory_bytes)
    metadata.device.gpu.count = gpus
    metadata.device.gpu.variant = "H100"
    return metadata


def test_offer_within_a_smaller_room_is_lowered_to_the_room() -> None:
    configured = _gpu_worker(64_000, 256 << 30, 8)

    offer = offer_within(configured, NodeRoom(cpu_millicores=61_500, memory_bytes=200 << 30, gpus=7))

    assert (offer.cpu_millicores, offer.memory_bytes, offer.device.gpu.count) == (61_500, 200 << 30, 7)
    assert offer.device.gpu.variant == "H100" and offer.hostname == "n1"
    assert configured.cpu_millicores == 64_000, "the configured size is kept for the next check"


def test_offer_within_a_larger_room_or_no_room_is_the_configured_size() -> None:
    configured = _gpu_worker(4_000, 16 << 30, 2)

    assert offer_within(configured, NodeRoom(cpu_millicores=64_000, memory_bytes=256 << 30, gpus=8)) == configured
    assert offer_within(configured, None) == configured


def test_offer_within_leaves_a_worker_without_gpus_without_gpus() -> None:
    configured = pb.WorkerMetadata(cpu_millicores=8_000, memory_bytes=32 << 30)

    offer = offer_within(configured, NodeRoom(cpu_millicores=6_000, memory_bytes=32 << 30, gpus=0))

    assert not offer.device.HasField("gpu")
    assert describe_offer(offer) == f"6000m cpu, {32 << 30} bytes of memory"
