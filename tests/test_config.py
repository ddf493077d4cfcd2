from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import yaml

from iris.config import (
    DEFAULT_CONTROLLER_PORT,
    DEFAULT_WORKER_PORT,
    ConfigError,
    apply_defaults,
    config_to_dict,
    format_size,
    load_and_validate,
    load_config,
    load_config_from_dict,
    parse_size,
    validate_config,
)
from iris.rpc import config_pb2
from iris.time import Duration

EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"
EXAMPLE_FILES = sorted(EXAMPLES_DIR.glob("*.yaml"))

GCP_CLUSTER = """
platform:
  gcp:
    project_id: proj
storage:
  bundle_prefix: gs://bucket/bundles
scale_groups:
  tpu:
    zones: [europe-west4-a]
    slice_template:
      accelerator_type: tpu
      accelerator_variant: v5litepod-16
      gcp: {}
"""


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def config_error(tmp_path: Path, text: str) -> str:
    """The message `load_and_validate` raises for `text`, which must start with the file name."""
    path = write_config(tmp_path, text)
    with pytest.raises(ConfigError) as excinfo:
        load_and_validate(path)
    message = str(excinfo.value)
    assert message.startswith(f"{path}: ")
    return message


def resolved(text: str) -> config_pb2.IrisClusterConfig:
    config = apply_defaults(load_config_from_dict(_yaml(text)))
    validate_config(config)
    return config


def _yaml(text: str) -> dict:
    return yaml.safe_load(textwrap.dedent(text))


# ---------------------------------------------------------------- examples


def test_examples_directory_has_the_documented_examples() -> None:
    names = {path.name for path in EXAMPLE_FILES}
    assert {"local.yaml", "eu-west4.yaml", "manual.yaml", "coreweave.yaml"} <= names


@pytest.mark.parametrize("example", EXAMPLE_FILES, ids=lambda path: path.name)
def test_example_config_loads_and_validates(example: Path) -> None:
    config = load_and_validate(example)
    assert config.platform.WhichOneof("platform") is not None
    assert config.scale_groups
    assert example.read_text().startswith("#"), "each example starts with a comment saying what it is for"


@pytest.mark.parametrize("example", EXAMPLE_FILES, ids=lambda path: path.name)
def test_example_config_to_dict_loads_back_unchanged(example: Path) -> None:
    config = load_and_validate(example)
    assert load_config_from_dict(config_to_dict(config)) == config


def test_local_example_has_laptop_timeouts_and_two_worker_slices() -> None:
    config = load_and_validate(EXAMPLES_DIR / "local.yaml")
    group = config.scale_groups["local-cpu"]
    assert group.slice_template.num_vms == 2
    assert (group.min_slices, group.max_slices) == (1, 4)
    assert group.resources.ram == 4 * 10**9
    assert Duration.from_proto(config.defaults.timeouts.heartbeat_interval) == Duration.parse("2s")
    assert Duration.from_proto(config.defaults.timeouts.worker_timeout) == Duration.parse("20s")


def test_coreweave_example_hosts_controller_on_cpu_group() -> None:
    config = load_and_validate(EXAMPLES_DIR / "coreweave.yaml")
    assert config.controller.coreweave.scale_group == "cpu-erapids"
    h100 = config.scale_groups["h100-8x"]
    assert h100.slice_template.coreweave.infiniband
    assert h100.resources.ram == 2048 * 10**9
    assert config.defaults.bootstrap.runtime == "kubernetes"


def test_eu_west4_example_controller_address_env_set_is_expanded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRIS_CONTROLLER_ADDRESS", "http://10.0.0.2:10000")
    config = load_and_validate(EXAMPLES_DIR / "eu-west4.yaml")
    assert config.defaults.bootstrap.controller_address == "http://10.0.0.2:10000"


# ---------------------------------------------------------------- loading


def test_load_unknown_key_typo_suggests_closest_key(tmp_path: Path) -> None:
    message = config_error(
        tmp_path,
        """
        platform: {local: {}}
        scale_groups:
          cpu:
            max_slice: 3
        """,
    )
    assert "scale_groups.cpu.max_slice: unknown key 'max_slice' in ScaleGroupConfig" in message
    assert "did you mean 'max_slices'?" in message


def test_load_legacy_accelerator_variant_on_group_suggests_slice_template(tmp_path: Path) -> None:
    message = config_error(
        tmp_path,
        """
        platform: {gcp: {project_id: p}}
        scale_groups:
          tpu_v5e_4:
            accelerator_variant: v5litepod-4
        """,
    )
    assert "scale_groups.tpu_v5e_4.accelerator_variant: unknown key" in message
    assert "did you mean 'slice_template.accelerator_variant'?" in message


def test_load_legacy_runtime_version_on_group_suggests_gcp_slice_field() -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'slice_template\.gcp\.runtime_version'\?"):
        load_config_from_dict({"scale_groups": {"tpu": {"runtime_version": "v2-alpha-tpuv5-lite"}}})


def test_load_unknown_key_without_close_match_lists_valid_keys() -> None:
    with pytest.raises(ConfigError, match=r"valid keys are: .*project_id"):
        load_config_from_dict({"platform": {"gcp": {"xyzzy": 1}}})


def test_load_bad_duration_string_names_key_path(tmp_path: Path) -> None:
    message = config_error(
        tmp_path,
        """
        platform: {local: {}}
        defaults:
          timeouts:
            boot_timeout: 5 minutes
        """,
    )
    assert "defaults.timeouts.boot_timeout: invalid duration '5 minutes'" in message


def test_load_bare_number_duration_raises_asking_for_unit() -> None:
    with pytest.raises(
        ConfigError, match=r"defaults\.ssh\.connect_timeout: a bare number \(30\) is ambiguous"
    ):
        load_config_from_dict({"defaults": {"ssh": {"connect_timeout": 30}}})


@pytest.mark.parametrize("value", ["90s", "1m30s", {"milliseconds": 90_000}])
def test_load_duration_string_or_milliseconds_sets_proto(value: object) -> None:
    config = load_config_from_dict({"defaults": {"timeouts": {"worker_timeout": value}}})
    assert config.defaults.timeouts.worker_timeout.milliseconds == 90_000


def test_load_size_strings_set_bytes() -> None:
    config = load_config_from_dict({"scale_groups": {"g": {"resources": {"ram": "512MiB", "disk": "2TB"}}}})
    assert config.scale_groups["g"].resources.ram == 512 * 2**20
    assert config.scale_groups["g"].resources.disk == 2 * 10**12


def test_load_invalid_size_names_key_path() -> None:
    with pytest.raises(ConfigError, match=r"scale_groups\.g\.resources\.ram: invalid size '12 gigs'"):
        load_config_from_dict({"scale_groups": {"g": {"resources": {"ram": "12 gigs"}}}})


def test_load_wrong_type_names_expected_type() -> None:
    with pytest.raises(
        ConfigError, match=r"scale_groups\.g\.max_slices: expected an integer, got string 'ten'"
    ):
        load_config_from_dict({"scale_groups": {"g": {"max_slices": "ten"}}})


def test_load_list_given_for_message_names_expected_mapping() -> None:
    with pytest.raises(
        ConfigError, match=r"defaults\.ssh: expected a mapping of SshConfig fields, got a list"
    ):
        load_config_from_dict({"defaults": {"ssh": ["root"]}})


def test_load_scalar_given_for_list_names_expected_list() -> None:
    with pytest.raises(ConfigError, match=r"scale_groups\.g\.zones: expected a list, got string 'us-a'"):
        load_config_from_dict({"scale_groups": {"g": {"zones": "us-a"}}})


def test_load_yaml_boolean_in_string_field_asks_to_quote() -> None:
    with pytest.raises(ConfigError, match=r"defaults\.ssh\.user: expected a string, got boolean true; quote"):
        load_config_from_dict({"defaults": {"ssh": {"user": True}}})


def test_load_yaml_float_in_string_field_asks_to_quote() -> None:
    with pytest.raises(ConfigError, match=r"accelerator_variant: expected a string, got number 1\.1; quote"):
        load_config_from_dict(_yaml("scale_groups: {g: {slice_template: {accelerator_variant: 1.10}}}"))


def test_load_yaml_integer_in_string_map_is_kept_as_text() -> None:
    config = load_config_from_dict({"defaults": {"bootstrap": {"env_vars": {"WORKERS": 8}}}})
    assert config.defaults.bootstrap.env_vars["WORKERS"] == "8"


def test_load_out_of_range_integer_names_key_path() -> None:
    with pytest.raises(ConfigError, match=r"defaults\.ssh\.port: 4294967296 is out of range"):
        load_config_from_dict({"defaults": {"ssh": {"port": 2**32}}})


def test_load_env_var_set_is_expanded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRIS_TEST_PROJECT", "my-proj")
    config = load_config_from_dict({"platform": {"gcp": {"project_id": "${IRIS_TEST_PROJECT}-x"}}})
    assert config.platform.gcp.project_id == "my-proj-x"


@pytest.mark.parametrize("environment", [None, ""], ids=["unset", "empty"])
def test_load_env_var_unset_or_empty_uses_default(
    monkeypatch: pytest.MonkeyPatch, environment: str | None
) -> None:
    if environment is None:
        monkeypatch.delenv("IRIS_TEST_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("IRIS_TEST_ADDRESS", environment)
    config = load_config_from_dict(
        {"defaults": {"bootstrap": {"controller_address": "${IRIS_TEST_ADDRESS:-http://localhost:10000}"}}}
    )
    assert config.defaults.bootstrap.controller_address == "http://localhost:10000"


def test_load_env_var_missing_without_default_names_key_and_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("IRIS_TEST_MISSING", raising=False)
    message = config_error(
        tmp_path,
        """
        platform: {local: {}}
        defaults:
          bootstrap:
            docker_image: ${IRIS_TEST_MISSING}/worker
        """,
    )
    assert "defaults.bootstrap.docker_image: environment variable IRIS_TEST_MISSING is not set" in message
    assert "${IRIS_TEST_MISSING:-default}" in message


def test_load_env_var_in_integer_field_is_converted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRIS_TEST_PORT", "2222")
    config = load_config_from_dict({"defaults": {"ssh": {"port": "${IRIS_TEST_PORT:-22}"}}})
    assert config.defaults.ssh.port == 2222


def test_load_env_var_in_duration_is_expanded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRIS_TEST_TIMEOUT", "45s")
    config = load_config_from_dict({"defaults": {"timeouts": {"boot_timeout": "${IRIS_TEST_TIMEOUT}"}}})
    assert config.defaults.timeouts.boot_timeout.milliseconds == 45_000


def test_load_env_var_missing_in_duration_reports_variable_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IRIS_TEST_MISSING", raising=False)
    with pytest.raises(ConfigError) as excinfo:
        load_config_from_dict(
            {"defaults": {"timeouts": {"boot_timeout": "${IRIS_TEST_MISSING}"}}}, source="c.yaml"
        )
    assert str(excinfo.value).startswith(
        "c.yaml: defaults.timeouts.boot_timeout: environment variable IRIS_TEST_MISSING is not set"
    )


@pytest.mark.parametrize("spelling", ["gpu", "GPU", "ACCELERATOR_TYPE_GPU"])
def test_load_enum_short_or_full_name_sets_value(spelling: str) -> None:
    config = load_config_from_dict(
        {"scale_groups": {"g": {"slice_template": {"accelerator_type": spelling}}}}
    )
    assert config.scale_groups["g"].slice_template.accelerator_type == config_pb2.ACCELERATOR_TYPE_GPU


def test_load_unknown_enum_value_lists_choices_and_suggests() -> None:
    with pytest.raises(ConfigError) as excinfo:
        load_config_from_dict({"scale_groups": {"g": {"slice_template": {"accelerator_type": "gpuu"}}}})
    message = str(excinfo.value)
    assert (
        "scale_groups.g.slice_template.accelerator_type: expected one of unspecified, cpu, gpu, tpu"
        in message
    )
    assert "did you mean 'gpu'?" in message


def test_load_two_members_of_oneof_raises_naming_both(tmp_path: Path) -> None:
    message = config_error(
        tmp_path,
        """
        platform:
          gcp: {project_id: p}
          local: {}
        """,
    )
    assert "platform: sets both 'gcp' and 'local', but they are alternatives (oneof 'platform')" in message


def test_load_empty_section_chooses_oneof_member() -> None:
    config = load_config_from_dict(_yaml("platform:\n  local:\n"))
    assert config.platform.WhichOneof("platform") == "local"


def test_load_scale_group_name_defaults_to_key() -> None:
    config = load_config_from_dict({"scale_groups": {"h100-8x": {"max_slices": 2}}})
    assert config.scale_groups["h100-8x"].name == "h100-8x"


def test_load_duplicate_yaml_key_raises_with_line(tmp_path: Path) -> None:
    message = config_error(
        tmp_path,
        """
        platform: {local: {}}
        scale_groups:
          cpu: {max_slices: 1}
          cpu: {max_slices: 2}
        """,
    )
    assert "invalid YAML" in message
    assert "duplicate key 'cpu'" in message
    assert "line 5, column 3" in message


def test_load_yaml_merge_keys_may_override_merged_values(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        """
        platform: {local: {}}
        scale_groups:
          a: &base
            max_slices: 3
            slice_template: {local: {}}
          b:
            <<: *base
            max_slices: 5
        """,
    )
    config = load_and_validate(path)
    assert config.scale_groups["a"].max_slices == 3
    assert config.scale_groups["b"].max_slices == 5


def test_load_invalid_yaml_names_file(tmp_path: Path) -> None:
    message = config_error(tmp_path, "platform: [local\n")
    assert "invalid YAML" in message


def test_load_missing_file_raises_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(missing))}: cannot read config file"):
        load_config(missing)


def test_load_top_level_list_raises() -> None:
    with pytest.raises(ConfigError, match="expected a mapping at the top level, got a list"):
        load_config_from_dict([1, 2])  # type: ignore[arg-type]


# ---------------------------------------------------------------- defaults


def test_defaults_local_platform_fills_controller_storage_and_timeouts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    config = resolved(
        """
        platform: {local: {}}
        scale_groups:
          cpu: {slice_template: {local: {}}}
        """
    )
    assert config.name == "iris"
    assert config.platform.label_prefix == "iris"
    assert config.controller.local.port == DEFAULT_CONTROLLER_PORT == 10000
    assert config.controller.local.state_dir == str(tmp_path / ".iris" / "iris")
    assert config.storage.bundle_prefix == f"file://{tmp_path}/.iris/iris/bundles"
    assert config.defaults.bootstrap.runtime == "process"
    assert config.defaults.bootstrap.worker_port == DEFAULT_WORKER_PORT == 10001
    timeouts = config.defaults.timeouts
    assert [
        str(Duration.from_proto(getattr(timeouts, name)))
        for name in (
            "boot_timeout",
            "init_timeout",
            "ssh_poll_interval",
            "heartbeat_interval",
            "worker_timeout",
            "kill_grace_period",
        )
    ] == ["5m", "10m", "5s", "5s", "1m", "10s"]
    autoscaler = config.defaults.autoscaler
    assert [
        str(Duration.from_proto(getattr(autoscaler, name)))
        for name in (
            "evaluation_interval",
            "scale_up_delay",
            "scale_down_delay",
            "startup_grace_period",
            "quota_backoff",
            "failure_backoff_max",
        )
    ] == ["10s", "1m", "5m", "10m", "5m", "10m"]
    assert (config.defaults.ssh.user, config.defaults.ssh.port) == ("root", 22)
    assert config.defaults.ssh.connect_timeout.milliseconds == 30_000
    group = config.scale_groups["cpu"]
    assert (group.min_slices, group.max_slices, group.slice_template.num_vms) == (0, 1, 1)


def test_defaults_state_dir_follows_cluster_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    config = resolved("name: dev\nplatform: {local: {}}\n")
    assert config.controller.local.state_dir == str(tmp_path / ".iris" / "dev")
    assert config.storage.bundle_prefix == f"file://{tmp_path}/.iris/dev/bundles"


def test_defaults_explicit_values_are_kept() -> None:
    config = resolved(
        """
        platform: {local: {}}
        controller: {local: {port: 0, state_dir: /srv/iris}}
        storage: {bundle_prefix: "file:///data/bundles"}
        defaults:
          timeouts: {worker_timeout: 7s}
          bootstrap: {runtime: docker, worker_port: 20001}
        scale_groups:
          cpu: {min_slices: 2, max_slices: 2, slice_template: {num_vms: 3, local: {}}}
        """
    )
    assert config.controller.local.port == 0
    assert config.controller.local.state_dir == "/srv/iris"
    assert config.storage.bundle_prefix == "file:///data/bundles"
    assert config.defaults.timeouts.worker_timeout.milliseconds == 7_000
    assert config.defaults.bootstrap.runtime == "docker"
    assert config.defaults.bootstrap.worker_port == 20001
    group = config.scale_groups["cpu"]
    assert (group.min_slices, group.max_slices, group.slice_template.num_vms) == (2, 2, 3)


def test_defaults_explicit_zero_min_slices_is_kept_not_replaced() -> None:
    config = resolved(
        "platform: {local: {}}\nscale_groups: {cpu: {max_slices: 0, slice_template: {local: {}}}}\n"
    )
    assert config.scale_groups["cpu"].max_slices == 0


def test_defaults_gcp_platform_uses_docker_and_no_local_controller() -> None:
    config = resolved(GCP_CLUSTER)
    assert config.defaults.bootstrap.runtime == "docker"
    assert config.defaults.bootstrap.cache_dir == "/var/cache/iris"
    assert config.controller.WhichOneof("controller") is None
    assert config.storage.log_prefix == "gs://bucket/logs"


def test_defaults_coreweave_platform_extends_startup_grace_period() -> None:
    config = apply_defaults(load_config_from_dict({"platform": {"coreweave": {"region": "US-WEST-04A"}}}))
    assert config.defaults.autoscaler.startup_grace_period.milliseconds == 2_400_000
    assert config.platform.coreweave.namespace == "iris"


def test_defaults_input_config_is_not_modified() -> None:
    original = load_config_from_dict({"platform": {"local": {}}})
    apply_defaults(original)
    assert original == load_config_from_dict({"platform": {"local": {}}})


# ---------------------------------------------------------------- validation


def test_validate_missing_platform_lists_choices(tmp_path: Path) -> None:
    message = config_error(tmp_path, "name: x\n")
    assert "platform: no platform chosen; set exactly one of gcp, manual, local, coreweave" in message


def test_validate_min_slices_above_max_slices_names_group(tmp_path: Path) -> None:
    message = config_error(
        tmp_path,
        """
        platform: {local: {}}
        scale_groups:
          cpu: {min_slices: 5, max_slices: 2, slice_template: {local: {}}}
        """,
    )
    assert "scale_groups.cpu.min_slices: min_slices (5) is greater than max_slices (2)" in message


def test_validate_negative_min_slices_raises() -> None:
    with pytest.raises(ConfigError, match=r"scale_groups\.cpu\.min_slices: must be >= 0, got -1"):
        resolved(
            "platform: {local: {}}\nscale_groups: {cpu: {min_slices: -1, slice_template: {local: {}}}}\n"
        )


def test_validate_slice_platform_mismatch_names_both_platforms(tmp_path: Path) -> None:
    message = config_error(
        tmp_path,
        """
        platform: {coreweave: {region: US-WEST-04A}}
        storage: {bundle_prefix: "s3://b/bundles"}
        scale_groups:
          gpu:
            slice_template:
              accelerator_variant: v5litepod-16
              gcp: {zone: us-central2-b}
        """,
    )
    assert (
        "scale_groups.gpu.slice_template: is a 'gcp' slice but the cluster platform is 'coreweave'" in message
    )


def test_validate_slice_without_platform_section_says_what_to_add() -> None:
    with pytest.raises(
        ConfigError, match=r"scale_groups\.cpu\.slice_template: no platform section; add a 'local:'"
    ):
        resolved("platform: {local: {}}\nscale_groups: {cpu: {max_slices: 1}}\n")


def test_validate_gcp_without_bundle_prefix_lists_allowed_schemes(tmp_path: Path) -> None:
    message = config_error(
        tmp_path, GCP_CLUSTER.replace("storage:\n  bundle_prefix: gs://bucket/bundles\n", "")
    )
    assert "storage.bundle_prefix: required for the 'gcp' platform" in message
    assert "use one of file://, s3://, gs://" in message


def test_validate_bundle_prefix_unsupported_scheme_lists_allowed() -> None:
    with pytest.raises(
        ConfigError,
        match=r"storage\.bundle_prefix: 'http://x/b' has an unsupported scheme; allowed: file://, s3://",
    ):
        resolved(GCP_CLUSTER.replace("gs://bucket/bundles", "http://x/b"))


def test_validate_gcp_slice_without_zone_explains_both_options() -> None:
    with pytest.raises(
        ConfigError,
        match=r"scale_groups\.tpu\.slice_template\.gcp\.zone: GCP slices need a zone; "
        r"set slice_template\.gcp\.zone or the group's zones list",
    ):
        resolved(GCP_CLUSTER.replace("    zones: [europe-west4-a]\n", ""))


def test_validate_gcp_slice_zone_in_template_is_enough() -> None:
    config = resolved(
        GCP_CLUSTER.replace("    zones: [europe-west4-a]\n", "").replace("gcp: {}", "gcp: {zone: a}")
    )
    assert config.scale_groups["tpu"].slice_template.gcp.zone == "a"


def test_validate_manual_slice_without_hosts_raises() -> None:
    with pytest.raises(
        ConfigError, match=r"scale_groups\.m\.slice_template\.manual\.hosts: manual slices need"
    ):
        resolved(
            """
            platform: {manual: {}}
            storage: {bundle_prefix: "file:///shared/bundles"}
            scale_groups: {m: {slice_template: {manual: {}}}}
            """
        )


def test_validate_manual_group_needing_more_hosts_than_listed_raises() -> None:
    with pytest.raises(
        ConfigError, match=r"max_slices \(3\) x num_vms \(1\) needs 3 hosts, but only 2 are listed"
    ):
        resolved(
            """
            platform: {manual: {}}
            storage: {bundle_prefix: "file:///shared/bundles"}
            scale_groups: {m: {max_slices: 3, slice_template: {manual: {hosts: [a, b]}}}}
            """
        )


def test_validate_coreweave_slice_without_instance_type_raises() -> None:
    with pytest.raises(
        ConfigError, match=r"scale_groups\.g\.slice_template\.coreweave\.instance_type: CoreWeave"
    ):
        resolved(
            """
            platform: {coreweave: {}}
            storage: {bundle_prefix: "s3://b/bundles"}
            scale_groups: {g: {slice_template: {coreweave: {region: R}}}}
            """
        )


@pytest.mark.parametrize(
    ("scale_group_line", "expected"),
    [
        ("", r"controller\.coreweave\.scale_group: required: .*\(defined groups: cpu\)"),
        (
            "scale_group: cpuu",
            r"controller\.coreweave\.scale_group: 'cpuu' is not a scale group; did you mean 'cpu'",
        ),
    ],
)
def test_validate_coreweave_controller_scale_group_must_exist(scale_group_line: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        resolved(
            f"""
            platform: {{coreweave: {{}}}}
            storage: {{bundle_prefix: "s3://b/bundles"}}
            controller: {{coreweave: {{{scale_group_line}}}}}
            scale_groups: {{cpu: {{slice_template: {{coreweave: {{instance_type: cd-gp-i64-erapids}}}}}}}}
            """
        )


def test_validate_controller_for_other_platform_raises() -> None:
    with pytest.raises(
        ConfigError, match="controller: is a 'manual' controller but the cluster platform is 'gcp'"
    ):
        resolved(GCP_CLUSTER + "controller: {manual: {host: h}}\n")


def test_validate_local_controller_may_drive_gcp_platform() -> None:
    config = resolved(GCP_CLUSTER + "controller: {local: {}}\n")
    assert config.controller.WhichOneof("controller") == "local"


def test_validate_unknown_runtime_lists_runtimes() -> None:
    with pytest.raises(
        ConfigError,
        match=r"defaults\.bootstrap\.runtime: 'podman' is not a runtime; "
        r"choose one of containerd, docker, kubernetes, process",
    ):
        resolved("platform: {local: {}}\ndefaults: {bootstrap: {runtime: podman}}\n")


def test_validate_zero_duration_names_key_path() -> None:
    with pytest.raises(
        ConfigError, match=r"defaults\.timeouts\.worker_timeout: must be a positive duration, got 0ms"
    ):
        resolved("platform: {local: {}}\ndefaults: {timeouts: {worker_timeout: 0s}}\n")


def test_validate_scale_group_name_differing_from_key_raises() -> None:
    with pytest.raises(
        ConfigError, match=r"scale_groups\.cpu\.name: 'gpu' differs from the group's key 'cpu'"
    ):
        resolved("platform: {local: {}}\nscale_groups: {cpu: {name: gpu, slice_template: {local: {}}}}\n")


def test_validate_error_without_file_uses_given_source() -> None:
    with pytest.raises(ConfigError, match=r"^inline: platform: no platform chosen"):
        validate_config(apply_defaults(config_pb2.IrisClusterConfig()), source="inline")


# ---------------------------------------------------------------- sizes


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1024, 1024),
        ("1024", 1024),
        ("128GB", 128 * 10**9),
        ("128gb", 128 * 10**9),
        ("512MiB", 512 * 2**20),
        ("2TB", 2 * 10**12),
        ("1.5GiB", 3 * 2**29),
        ("16Gi", 16 * 2**30),
        ("10 KB", 10_000),
        ("0", 0),
    ],
)
def test_parse_size_valid_returns_bytes(value: str | int, expected: int) -> None:
    assert parse_size(value) == expected


@pytest.mark.parametrize("value", ["12 gigs", "GB", "-1GB", "1.2.3GB", "0.5B", -5])
def test_parse_size_invalid_raises_value_error(value: str | int) -> None:
    with pytest.raises(ValueError, match="invalid size"):
        parse_size(value)


@pytest.mark.parametrize(
    ("num_bytes", "text"),
    [
        (0, "0B"),
        (999, "999B"),
        (1_500, "1.5KB"),
        (2 * 10**9, "2.0GB"),
        (2048 * 10**9, "2.0TB"),
        (2**30, "1.1GB"),
    ],
)
def test_format_size_returns_decimal_units(num_bytes: int, text: str) -> None:
    assert format_size(num_bytes) == text


def test_config_to_dict_uses_yaml_vocabulary() -> None:
    config = load_config_from_dict(
        {
            "defaults": {"timeouts": {"worker_timeout": "90s"}},
            "scale_groups": {
                "g": {"resources": {"ram": "512MiB"}, "slice_template": {"accelerator_type": "tpu"}}
            },
        }
    )
    data = config_to_dict(config)
    assert data["defaults"]["timeouts"]["worker_timeout"] == "1m30s"
    assert data["scale_groups"]["g"]["resources"]["ram"] == "512MiB"
    assert data["scale_groups"]["g"]["slice_template"]["accelerator_type"] == "tpu"
