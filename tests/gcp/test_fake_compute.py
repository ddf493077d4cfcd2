"""The real gcloud's Compute commands against the fake: a VM on a real host, reached over SSH."""

from __future__ import annotations

from pathlib import Path

from fakes.gcp import FakeGcp
from fakes.gcp.gcloud import Gcloud

ZONE = "europe-west4-a"
OTHER_ZONE = "us-west4-a"
IMAGE = ("--image-family=debian-12", "--image-project=debian-cloud")


def _create(gcloud: Gcloud, name: str, *flags: str) -> None:
    gcloud.ok(
        "compute",
        "instances",
        "create",
        name,
        f"--zone={ZONE}",
        "--machine-type=n2-standard-4",
        *IMAGE,
        *flags,
    )


def test_compute_instance_create_describe_list_delete_on_one_host(fake_gcp: FakeGcp, gcloud: Gcloud) -> None:
    free_before = fake_gcp.free_hosts
    _create(gcloud, "controller", "--labels=iris-cluster=c1", "--metadata=iris-role=controller")
    _create(gcloud, "bystander")

    vm = gcloud.json("compute", "instances", "describe", "controller", f"--zone={ZONE}")
    (host,) = [fake_gcp.instance("controller").host]
    assert host is not None
    assert vm["status"] == "RUNNING" and vm["labels"] == {"iris-cluster": "c1"} and vm["id"].isdigit()
    interface = vm["networkInterfaces"][0]
    assert interface["networkIP"] == interface["accessConfigs"][0]["natIP"] == host.address
    assert {"key": "iris-role", "value": "controller"} in vm["metadata"]["items"]
    everywhere = gcloud.json("compute", "instances", "list", "--filter=labels.iris-cluster=c1")
    assert [i["name"] for i in everywhere] == ["controller"]
    # Naming zones makes gcloud send one batch request of per-zone lists.
    in_zones = gcloud.json("compute", "instances", "list", f"--zones={ZONE},{OTHER_ZONE}")
    assert sorted(i["name"] for i in in_zones) == ["bystander", "controller"]
    assert ("GET", f"/compute/v1/projects/{fake_gcp.project}/zones/{OTHER_ZONE}/instances") in fake_gcp.calls
    assert fake_gcp.free_hosts == free_before - 2

    gcloud.ok("compute", "instances", "delete", "controller", f"--zone={ZONE}", "--quiet")
    assert [i.name for i in fake_gcp.instances()] == ["bystander"] and fake_gcp.free_hosts == free_before - 1


def test_compute_ssh_and_scp_reach_the_vm_host_and_metadata_and_labels_update(
    fake_gcp: FakeGcp, gcloud: Gcloud, tmp_path: Path
) -> None:
    _create(gcloud, "vm", "--labels=a=1")
    host = fake_gcp.instance("vm").host
    assert host is not None

    out = gcloud.ok(
        "compute", "ssh", "vm", f"--zone={ZONE}", "--internal-ip", "--command=ip -4 -o addr show dev eth0"
    )
    assert f"inet {host.address}/" in out
    # gcloud put its key into the project's metadata, which every VM accepts.
    assert "ssh-rsa" in fake_gcp.compute.project_metadata()["ssh-keys"]
    payload = tmp_path / "payload.txt"
    payload.write_text("bootstrap\n")
    gcloud.ok("compute", "scp", str(payload), "vm:/var/lib/iris/payload.txt", f"--zone={ZONE}")
    assert host.host_path("/var/lib/iris/payload.txt").read_text() == "bootstrap\n"

    gcloud.ok(
        "compute",
        "instances",
        "add-metadata",
        "vm",
        f"--zone={ZONE}",
        "--metadata=iris-controller-port=10000",
    )
    gcloud.ok("compute", "instances", "add-labels", "vm", f"--zone={ZONE}", "--labels=b=2")
    vm = gcloud.json("compute", "instances", "describe", "vm", f"--zone={ZONE}")
    assert vm["labels"] == {"a": "1", "b": "2"}
    assert vm["metadata"]["items"] == [{"key": "iris-controller-port", "value": "10000"}]
