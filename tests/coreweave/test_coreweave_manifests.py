"""infra/coreweave/k8s holds what `iris cluster start` creates for examples/coreweave.yaml: each
manifest there equals the one the platform builds from that config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from iris.cli.build import IMAGE_KINDS, build, default_tag
from iris.cli.cluster_common import configured_images
from iris.cluster.platform import coreweave_resources as res
from iris.cluster.platform.coreweave import controller_manifests
from iris.config import load_and_validate

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "infra" / "coreweave" / "k8s"


def _documents(name: str) -> dict[tuple[str, str], dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def test_manifests_match_what_cluster_start_creates_for_the_example() -> None:
    config = load_and_validate(REPO / "examples" / "coreweave.yaml")
    namespace = config.platform.coreweave.namespace
    prefix = config.platform.label_prefix
    deployment, service = controller_manifests(config)
    group = config.controller.coreweave.scale_group
    template = config.scale_groups[group]
    pool_name = res.nodepool_name(prefix, group)
    expected = {
        "namespace.yaml": [res.namespace(namespace)],
        "rbac.yaml": res.rbac(namespace),
        "controller-deployment.yaml": [res.controller_state_claim(namespace), deployment, service],
        "controller-nodepool.yaml": [
            res.nodepool(pool_name, prefix, group, template.slice_template.coreweave.instance_type, template.max_slices, 0)
        ],
    }

    for name, manifests in expected.items():
        assert _documents(name) == {(m["kind"], m["metadata"]["name"]): m for m in manifests}, name
    [configmap] = _documents("configmap.yaml").values()
    assert configmap["metadata"] == {"name": res.CONFIGMAP_NAME, "namespace": namespace}
    assert list(configmap["data"]) == [res.CONFIG_KEY]


def test_ghcr_push_of_each_built_image_names_the_image_the_example_runs() -> None:
    """`iris build <kind>-image` (the CoreWeave controller from its Dockerfile) then `iris build
    push TAG --registry ghcr` publishes each image under the name examples/coreweave.yaml and the
    manifests use."""
    config = load_and_validate(REPO / "examples" / "coreweave.yaml")
    expected = {**configured_images(config), "task": config.defaults.bootstrap.task_image}
    assert set(expected) == {"worker", "controller-coreweave", "task"}
    built = {
        "worker": default_tag(IMAGE_KINDS["worker"], None),
        "controller-coreweave": default_tag(IMAGE_KINDS["controller"], "Dockerfile.controller.coreweave"),
        "task": default_tag(IMAGE_KINDS["task"], None),
    }
    runner = CliRunner()
    for kind, tag in built.items():
        pushed = runner.invoke(build, ["push", tag, "--registry", "ghcr", "--dry-run"])
        assert pushed.exit_code == 0, pushed.output
        assert pushed.output.strip() == expected[kind], kind
    [deployment] = [d for d in _documents("controller-deployment.yaml").values() if d["kind"] == "Deployment"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == expected["controller-coreweave"]
