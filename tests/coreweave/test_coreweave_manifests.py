"""infra/coreweave/k8s holds what `iris cluster start` creates for examples/coreweave.yaml: each
manifest there equals the one the platform builds from that config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

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
        "controller-deployment.yaml": [deployment, service],
        "controller-nodepool.yaml": [
            res.nodepool(pool_name, prefix, group, template.slice_template.coreweave.instance_type, template.max_slices, 0)
        ],
    }

    for name, manifests in expected.items():
        assert _documents(name) == {(m["kind"], m["metadata"]["name"]): m for m in manifests}, name
    [configmap] = _documents("configmap.yaml").values()
    assert configmap["metadata"] == {"name": res.CONFIGMAP_NAME, "namespace": namespace}
    assert list(configmap["data"]) == [res.CONFIG_KEY]
