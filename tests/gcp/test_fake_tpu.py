"""The real gcloud's TPU VM commands against the fake: nodes on real hosts, reached over SSH."""

from __future__ import annotations

from pathlib import Path

from fakes.gcp import FakeGcp
from fakes.gcp.gcloud import Gcloud
from fakes.gcp.tpu import NodeState

from iris.time import wait_until

ZONE = "europe-west4-b"
TPU = ("compute", "tpus", "tpu-vm")


def _create_async(gcloud: Gcloud, name: str, accelerator: str, *flags: str) -> None:
    gcloud.ok(
        *TPU,
        "create",
        name,
        f"--zone={ZONE}",
        f"--accelerator-type={accelerator}",
        "--version=v2-alpha-tpuv5-lite",
        "--async",
        *flags,
    )


def _wait_ready(fake: FakeGcp, name: str) -> None:
    wait_until(lambda: fake.node(name).state == NodeState.READY, 30.0, 0.05, f"node {name} to be READY")


def test_tpu_create_multi_host_waits_until_ready_and_delete_frees_its_hosts(
    fake_gcp: FakeGcp, gcloud: Gcloud
) -> None:
    free_before = fake_gcp.free_hosts
    gcloud.ok(
        *TPU, "create", "slice-a", f"--zone={ZONE}", "--accelerator-type=v4-16", "--version=tpu-ubuntu2204-base",
        "--labels=iris-cluster=c1,iris-scale-group=g", "--preemptible",
    )  # fmt: skip

    node = gcloud.json(*TPU, "describe", "slice-a", f"--zone={ZONE}")
    assert node["name"] == f"projects/{fake_gcp.project}/locations/{ZONE}/nodes/slice-a"
    assert node["state"] == "READY" and node["health"] == "HEALTHY" and node["apiVersion"] == "V2"
    assert node["acceleratorType"] == "v4-16" and node["acceleratorConfig"] == {
        "type": "V4",
        "topology": "2x2x2",
    }
    assert node["labels"] == {"iris-cluster": "c1", "iris-scale-group": "g"}
    assert node["schedulingConfig"] == {"preemptible": True}
    addresses = [endpoint["ipAddress"] for endpoint in node["networkEndpoints"]]
    assert addresses == [host.address for host in fake_gcp.node("slice-a").hosts] and len(set(addresses)) == 2
    assert fake_gcp.free_hosts == free_before - 2

    gcloud.ok(*TPU, "delete", "slice-a", f"--zone={ZONE}", "--quiet")
    assert fake_gcp.nodes() == [] and fake_gcp.free_hosts == free_before


def test_tpu_create_async_returns_while_creating_and_list_filters_by_label(
    fake_gcp: FakeGcp, gcloud: Gcloud
) -> None:
    fake_gcp.operation_delay = 60.0
    _create_async(gcloud, "slow", "v5litepod-16", "--labels=iris-cluster=c1", "--spot")
    fake_gcp.operation_delay = 0.0
    _create_async(gcloud, "other", "v5litepod-4", "--labels=iris-cluster=c2")

    listed = gcloud.json(*TPU, "list", f"--zone={ZONE}", "--filter=labels.iris-cluster=c1")
    assert [(n["name"].rsplit("/", 1)[1], n["state"]) for n in listed] == [("slow", "CREATING")]
    assert listed[0]["schedulingConfig"] == {"spot": True} and "networkEndpoints" not in listed[0]
    assert fake_gcp.node("other").state == NodeState.READY and len(fake_gcp.node("other").hosts) == 1


def test_tpu_v5litepod_16_gets_four_hosts_that_ssh_and_scp_reach_one_by_one_and_all(
    fake_gcp: FakeGcp, gcloud: Gcloud, tmp_path: Path
) -> None:
    _create_async(gcloud, "pod", "v5litepod-16")
    _wait_ready(fake_gcp, "pod")
    hosts = [host.address for host in fake_gcp.node("pod").hosts]
    assert len(hosts) == 4
    identity = "ip -4 -o addr show dev eth0"

    one = gcloud.ok(
        *TPU, "ssh", "pod", f"--zone={ZONE}", "--worker=2", "--internal-ip", f"--command={identity}"
    )
    assert f"inet {hosts[2]}/" in one and all(f"inet {h}/" not in one for h in hosts if h != hosts[2])
    payload = tmp_path / "payload.txt"
    payload.write_text("bootstrap\n")
    gcloud.ok(*TPU, "scp", str(payload), "pod:/var/lib/iris/payload.txt", f"--zone={ZONE}", "--worker=3")
    machines = fake_gcp.node("pod").hosts
    assert machines[3].host_path("/var/lib/iris/payload.txt").read_text() == "bootstrap\n"
    assert not machines[2].host_path("/var/lib/iris/payload.txt").exists()

    everyone = gcloud.ok(*TPU, "ssh", "pod", f"--zone={ZONE}", "--worker=all", f"--command={identity}")
    assert sorted(line.split()[3].split("/")[0] for line in everyone.splitlines()) == sorted(hosts)
    # gcloud put its key in the node's metadata, which the hosts' sshd now accepts.
    assert "ssh-rsa" in fake_gcp.node("pod").metadata["ssh-keys"]


def test_tpu_preempted_node_describes_preempted_and_its_processes_are_gone(
    fake_gcp: FakeGcp, gcloud: Gcloud
) -> None:
    _create_async(gcloud, "victim", "v5litepod-8", "--preemptible")
    _wait_ready(fake_gcp, "victim")
    gcloud.ok(
        *TPU,
        "ssh",
        "victim",
        f"--zone={ZONE}",
        "--worker=0",
        "--command=setsid sleep 600 </dev/null >/dev/null 2>&1 &",
    )
    (host,) = fake_gcp.node("victim").hosts
    assert any(p.name() == "sleep" for p in host.processes())

    fake_gcp.preempt("victim")

    assert gcloud.json(*TPU, "describe", "victim", f"--zone={ZONE}")["state"] == "PREEMPTED"
    assert host.processes() == []
