"""The job model's vocabulary: constraints as users type them, TPU topologies, GPU specs,
priorities and job names."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iris.cluster.types import (
    Constraint,
    ConstraintOp,
    CoschedulingConfig,
    JobName,
    Priority,
    ResourceSpec,
    attribute_from_proto,
    attribute_to_proto,
    job_id_of_task,
    normalize_job_id,
    parse_attribute,
    parse_gpu_spec,
    parse_priority,
    tpu_device,
    tpu_topology,
)
from iris.rpc import cluster_pb2 as pb

ACCEPTED_FORMS = ("KEY=VALUE", "KEY!=VALUE", "KEY>=VALUE", "KEY<=VALUE", "!KEY", "KEY in A,B")

# ---------------------------------------------------------------- attributes


@pytest.mark.parametrize(
    ("text", "expected"),
    [("3", 3), ("-2", -2), ("1.5", 1.5), ("us-central1-a", "us-central1-a"), ("true", "true"), ("", "")],
)
def test_parse_attribute_numbers_become_numbers_and_text_stays_text(text, expected):
    value = parse_attribute(text)
    assert value == expected
    assert type(value) is type(expected)


@pytest.mark.parametrize("value", [7, -3, 2.5, "zone-a", ""])
def test_attribute_proto_round_trip_keeps_value_and_type(value):
    back = attribute_from_proto(attribute_to_proto(value))
    assert back == value
    assert type(back) is type(value)


def test_attribute_to_proto_bool_is_lowercase_text_not_an_int():
    assert attribute_from_proto(attribute_to_proto(True)) == "true"
    assert attribute_from_proto(attribute_to_proto(False)) == "false"


# ---------------------------------------------------------------- constraints: parsing


@pytest.mark.parametrize(
    ("text", "key", "op", "value"),
    [
        ("zone=us-central1-a", "zone", ConstraintOp.EQ, "us-central1-a"),
        ("preemptible!=true", "preemptible", ConstraintOp.NE, "true"),
        ("cpu-gen>3", "cpu-gen", ConstraintOp.GT, 3),
        ("cpu-gen>=3", "cpu-gen", ConstraintOp.GE, 3),
        ("cpu-gen<4", "cpu-gen", ConstraintOp.LT, 4),
        ("cpu-gen<=4", "cpu-gen", ConstraintOp.LE, 4),
        ("memory-gb>=1.5", "memory-gb", ConstraintOp.GE, 1.5),
        ("tpu-worker-id=0", "tpu-worker-id", ConstraintOp.EQ, 0),
        ("  zone = us-east1-b  ", "zone", ConstraintOp.EQ, "us-east1-b"),
        ("cloud.google.com/gke-nodepool=tpu", "cloud.google.com/gke-nodepool", ConstraintOp.EQ, "tpu"),
        ("note=a=b", "note", ConstraintOp.EQ, "a=b"),
    ],
)
def test_constraint_parse_comparison_forms_give_operator_and_typed_value(text, key, op, value):
    constraint = Constraint.parse(text)
    assert (constraint.key, constraint.op, constraint.value) == (key, op, value)
    assert type(constraint.value) is type(value)
    assert constraint.values == ()


def test_constraint_parse_bare_key_means_exists():
    assert Constraint.parse("tpu-name") == Constraint("tpu-name", ConstraintOp.EXISTS)
    assert Constraint.parse("  tpu-name ") == Constraint("tpu-name", ConstraintOp.EXISTS)


def test_constraint_parse_bang_key_means_does_not_exist():
    assert Constraint.parse("!spot") == Constraint("spot", ConstraintOp.NOT_EXISTS)


def test_constraint_parse_in_list_gives_typed_values_and_skips_blanks():
    constraint = Constraint.parse("zone in us-central1-a, us-central1-b,,")
    assert constraint.op == ConstraintOp.IN
    assert constraint.key == "zone"
    assert constraint.values == ("us-central1-a", "us-central1-b")

    numbers = Constraint.parse("cpu-gen in 3,4,5.5")
    assert numbers.values == (3, 4, 5.5)
    assert [type(v) for v in numbers.values] == [int, int, float]


@pytest.mark.parametrize("text", ["", "   ", "=a", ">=3", "!", "!=x", "zo ne=a", "zone in", "zone~a"])
def test_constraint_parse_malformed_raises_naming_accepted_forms(text):
    with pytest.raises(ValueError) as raised:
        Constraint.parse(text)
    message = str(raised.value)
    assert repr(text) in message or "IN needs at least one value" in message
    if "IN needs" not in message:
        for form in ACCEPTED_FORMS:
            assert form in message, (form, message)


def test_constraint_parse_in_without_values_raises_saying_in_needs_a_value():
    with pytest.raises(ValueError, match="IN needs at least one value"):
        Constraint.parse("zone in ,")


def test_constraint_parse_double_equals_is_equality_or_rejected_never_a_value_starting_with_equals():
    """Users coming from Python type "zone==a". Reading that as zone equal to "=a" builds a
    constraint no worker satisfies, whose description "zone==a" hides the mistake."""
    try:
        constraint = Constraint.parse("zone==us-central1-a")
    except ValueError as exc:
        assert "KEY=VALUE" in str(exc)
        return
    assert constraint == Constraint("zone", ConstraintOp.EQ, "us-central1-a"), constraint


def test_constraint_without_key_raises():
    with pytest.raises(ValueError, match="needs an attribute key"):
        Constraint("", ConstraintOp.EXISTS)


def test_constraint_in_without_values_raises_naming_key():
    with pytest.raises(ValueError, match="'zone': IN needs at least one value"):
        Constraint("zone", ConstraintOp.IN)


# ---------------------------------------------------------------- constraints: describe


@pytest.mark.parametrize(
    ("constraint", "text"),
    [
        (Constraint("zone", ConstraintOp.EQ, "us-central1-a"), "zone=us-central1-a"),
        (Constraint("preemptible", ConstraintOp.NE, "true"), "preemptible!=true"),
        (Constraint("cpu-gen", ConstraintOp.GT, 3), "cpu-gen>3"),
        (Constraint("cpu-gen", ConstraintOp.GE, 3), "cpu-gen>=3"),
        (Constraint("cpu-gen", ConstraintOp.LT, 3), "cpu-gen<3"),
        (Constraint("cpu-gen", ConstraintOp.LE, 3), "cpu-gen<=3"),
        (Constraint("tpu-name", ConstraintOp.EXISTS), "tpu-name exists"),
        (Constraint("spot", ConstraintOp.NOT_EXISTS), "spot does not exist"),
        (Constraint("zone", ConstraintOp.IN, values=("a", "b", 3)), "zone in {a, b, 3}"),
    ],
)
def test_constraint_describe_reads_like_the_cli_form(constraint, text):
    assert constraint.describe() == text


@pytest.mark.parametrize(
    "text", ["zone=us-central1-a", "preemptible!=true", "cpu-gen>3", "cpu-gen>=3", "cpu-gen<3", "cpu-gen<=3"]
)
def test_constraint_describe_of_parsed_comparison_is_the_text_typed(text):
    assert Constraint.parse(text).describe() == text


# ---------------------------------------------------------------- constraints: protos


@pytest.mark.parametrize(
    "constraint",
    [
        Constraint("zone", ConstraintOp.EQ, "us-central1-a"),
        Constraint("preemptible", ConstraintOp.NE, "true"),
        Constraint("cpu-gen", ConstraintOp.GT, 3),
        Constraint("cpu-gen", ConstraintOp.GE, -1),
        Constraint("memory-gb", ConstraintOp.LT, 2.5),
        Constraint("cpu-gen", ConstraintOp.LE, 0),
        Constraint("tpu-name", ConstraintOp.EXISTS),
        Constraint("spot", ConstraintOp.NOT_EXISTS),
        Constraint("zone", ConstraintOp.IN, values=("a", 2, 3.5)),
    ],
    ids=lambda c: c.describe(),
)
def test_constraint_proto_round_trip_is_identity(constraint):
    proto = constraint.to_proto()
    assert proto.op == int(constraint.op)
    back = Constraint.from_proto(pb.Constraint.FromString(proto.SerializeToString()))
    assert back == constraint
    assert type(back.value) is type(constraint.value)
    assert [type(v) for v in back.values] == [type(v) for v in constraint.values]


def test_constraint_to_proto_in_carries_values_not_value():
    proto = Constraint("zone", ConstraintOp.IN, values=("a", "b")).to_proto()
    assert proto.op == pb.CONSTRAINT_OP_IN
    assert [v.string_value for v in proto.values] == ["a", "b"]
    assert not proto.HasField("value")


def test_constraint_to_proto_int_value_is_int_field():
    proto = Constraint.parse("cpu-gen>=3").to_proto()
    assert proto.value.WhichOneof("value") == "int_value"
    assert proto.value.int_value == 3


def test_constraint_from_proto_without_operator_raises_naming_key():
    with pytest.raises(ValueError, match="constraint on 'zone' has no valid operator"):
        Constraint.from_proto(pb.Constraint(key="zone"))


_keys = st.from_regex(r"[a-z][a-z0-9._/-]{0,12}", fullmatch=True)
_values = st.one_of(
    st.integers(-1000, 1000),
    st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True),
    st.floats(-100, 100, allow_nan=False).filter(lambda f: not f.is_integer()),
)
_CMP_OPS = [
    ConstraintOp.EQ,
    ConstraintOp.NE,
    ConstraintOp.GT,
    ConstraintOp.GE,
    ConstraintOp.LT,
    ConstraintOp.LE,
]
_constraints = st.one_of(
    st.builds(
        Constraint,
        key=_keys,
        op=st.sampled_from(_CMP_OPS),
        value=_values,
    ),
    st.builds(Constraint, key=_keys, op=st.sampled_from([ConstraintOp.EXISTS, ConstraintOp.NOT_EXISTS])),
    st.builds(
        Constraint,
        key=_keys,
        op=st.just(ConstraintOp.IN),
        values=st.lists(_values, min_size=1, max_size=4).map(tuple),
    ),
)


@given(_constraints)
def test_constraint_property_proto_round_trip_is_identity(constraint):
    assert Constraint.from_proto(constraint.to_proto()) == constraint


@given(_constraints.filter(lambda c: c.op in _CMP_OPS))
def test_constraint_property_parse_of_cli_form_is_identity(constraint):
    """Whatever a comparison constraint describes itself as, typed on the CLI, parses back to it."""
    assert Constraint.parse(constraint.describe()) == constraint


def test_coscheduling_config_to_proto_defaults_to_tpu_name():
    assert CoschedulingConfig().to_proto().group_by == "tpu-name"
    assert CoschedulingConfig("zone").to_proto().group_by == "zone"


# ---------------------------------------------------------------- TPU topologies


@pytest.mark.parametrize(
    ("variant", "chips", "chips_per_host", "hosts"),
    [
        ("v4-8", 4, 4, 1),
        ("v4-32", 16, 4, 4),
        ("v5litepod-4", 4, 4, 1),
        ("v5litepod-8", 8, 8, 1),
        ("v5litepod-16", 16, 4, 4),
        ("v5litepod-256", 256, 4, 64),
        ("v5p-8", 4, 4, 1),
        ("v5p-16", 8, 4, 2),
        ("v6e-8", 8, 8, 1),
        ("v6e-16", 16, 4, 4),
        ("v2-8", 4, 4, 1),
        ("v3-32", 16, 4, 4),
    ],
)
def test_tpu_topology_known_variant_gives_chips_and_hosts(variant, chips, chips_per_host, hosts):
    topology = tpu_topology(variant)
    assert (topology.chips, topology.chips_per_host, topology.hosts) == (chips, chips_per_host, hosts)
    assert topology.variant == variant


def test_tpu_topology_is_case_and_space_insensitive():
    topology = tpu_topology(" V5LITEPOD-16 ")
    assert (topology.chips, topology.hosts) == (16, 4)


@pytest.mark.parametrize("variant", ["v7x-8", "v9-8", "v5lite-8"])
def test_tpu_topology_unknown_generation_raises_listing_known_ones(variant):
    with pytest.raises(ValueError) as raised:
        tpu_topology(variant)
    message = str(raised.value)
    assert "unknown TPU generation" in message and repr(variant) in message
    for generation in ("v4", "v5litepod", "v5p", "v6e"):
        assert generation in message


@pytest.mark.parametrize("variant", ["", "tpu", "v4", "v4-", "4-8", "v4-eight", "H100"])
def test_tpu_topology_malformed_variant_raises_with_example_forms(variant):
    with pytest.raises(ValueError, match=r"unknown TPU variant .*expected a form like v4-8, v5litepod-16"):
        tpu_topology(variant)


def test_tpu_topology_core_counted_variant_below_one_chip_raises():
    with pytest.raises(ValueError, match="'v4-1' has no whole chip"):
        tpu_topology("v4-1")


def test_tpu_device_without_count_asks_for_whole_host():
    device = tpu_device("v5litepod-16")
    assert device.WhichOneof("device") == "tpu"
    assert (device.tpu.variant, device.tpu.count) == ("v5litepod-16", 0)
    assert tpu_device("v5litepod-16", 2).tpu.count == 2


# ---------------------------------------------------------------- GPU specs


@pytest.mark.parametrize(
    ("text", "variant", "count"),
    [
        ("H100x8", "H100", 8),
        ("H100X8", "H100", 8),
        ("h100x2", "h100", 2),
        ("H100", "H100", 1),
        ("A100-80GBx4", "A100-80GB", 4),
        ("L4", "L4", 1),
        ("8", "", 8),
        (" H100x8 ", "H100", 8),
    ],
)
def test_parse_gpu_spec_variant_and_count(text, variant, count):
    device = parse_gpu_spec(text)
    assert device.WhichOneof("device") == "gpu"
    assert (device.gpu.variant, device.gpu.count) == (variant, count)


@pytest.mark.parametrize("text", ["RTX6000", "RTX4090", "GTX1080"])
def test_parse_gpu_spec_variant_with_x_before_digits_is_one_gpu_of_that_variant(text):
    """NVIDIA names such as RTX6000 contain an X followed by digits; they are not "RT" times 6000."""
    device = parse_gpu_spec(text)
    assert (device.gpu.variant, device.gpu.count) == (text, 1)


def test_parse_gpu_spec_variant_with_x_and_explicit_count():
    device = parse_gpu_spec("RTX6000x2")
    assert (device.gpu.variant, device.gpu.count) == ("RTX6000", 2)


@pytest.mark.parametrize("text", ["", "H100 x8", "8xH100", "H100*8", "-H100"])
def test_parse_gpu_spec_malformed_raises_with_example(text):
    with pytest.raises(ValueError, match=r"invalid GPU spec .*H100x8"):
        parse_gpu_spec(text)


@pytest.mark.parametrize("text", ["H100x0", "0"])
def test_parse_gpu_spec_zero_count_raises(text):
    with pytest.raises(ValueError, match="the count must be at least 1"):
        parse_gpu_spec(text)


def test_resource_spec_to_proto_carries_gpu_device_and_sizes():
    spec = ResourceSpec(cpu=2.5, memory="2GB", disk="10GB", device=parse_gpu_spec("H100x8")).to_proto()
    assert (spec.cpu_millicores, spec.memory_bytes, spec.disk_bytes) == (2500, 2 * 1000**3, 10 * 1000**3)
    assert (spec.device.gpu.variant, spec.device.gpu.count) == ("H100", 8)


def test_resource_spec_negative_cpu_raises():
    with pytest.raises(ValueError, match="cpu must be >= 0"):
        ResourceSpec(cpu=-1).to_proto()


# ---------------------------------------------------------------- priorities


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("production", Priority.PRODUCTION),
        ("PRODUCTION", Priority.PRODUCTION),
        (" Interactive ", Priority.INTERACTIVE),
        ("batch", Priority.BATCH),
        ("5", 5),
        ("-10", -10),
        ("150", 150),
        (42, 42),
    ],
)
def test_parse_priority_names_and_numbers(text, expected):
    assert parse_priority(text) == int(expected)


def test_priority_bands_order_production_above_interactive_above_batch():
    assert parse_priority("production") > parse_priority("interactive") > parse_priority("batch")


@pytest.mark.parametrize("text", ["urgent", "", "high", "1.5"])
def test_parse_priority_unknown_raises_listing_names(text):
    with pytest.raises(ValueError) as raised:
        parse_priority(text)
    message = str(raised.value)
    assert f"unknown priority {text!r}" in message
    assert "use a number or one of batch, interactive, production" in message


# ---------------------------------------------------------------- job names


def test_job_name_parse_root_and_child():
    root = JobName.parse("train")
    assert root.parts == ("train",)
    assert str(root) == "/train"
    assert root.parent is None

    child = JobName.parse("/train/eval/")
    assert child.parts == ("train", "eval")
    assert str(child) == "/train/eval"
    assert child.parent == root
    assert root.child("eval") == child
    assert JobName.root("train") == root


def test_job_name_task_id_appends_index():
    assert JobName.parse("/train/eval").task_id(3) == "/train/eval/3"


@pytest.mark.parametrize("name", ["a", "0abc", "run-2024.01_x", "v5litepod-16", "x" * 128, "7b-model"])
def test_job_name_parse_accepts_valid_parts(name):
    assert str(JobName.parse(name)) == f"/{name}"


@pytest.mark.parametrize("name", ["/train/0", "0", "/123/eval", "train/42/x"])
def test_job_name_digits_only_part_raises_saying_those_are_task_ids(name):
    with pytest.raises(ValueError) as raised:
        JobName.parse(name)
    message = str(raised.value)
    assert repr(name) in message
    assert "cannot be only digits" in message
    assert "task ids" in message


def test_job_name_child_with_digits_only_name_raises_about_task_ids():
    with pytest.raises(ValueError, match="task ids"):
        JobName.parse("/train").child("0")


@pytest.mark.parametrize("name", ["", "/", "  ", "//"])
def test_job_name_empty_raises(name):
    with pytest.raises(ValueError, match="cannot be empty"):
        JobName.parse(name)


@pytest.mark.parametrize("name", ["-train", ".hidden", "a b", "a//b", "train/é", "x" * 129, "a:b"])
def test_job_name_invalid_characters_raise_with_the_rule(name):
    with pytest.raises(ValueError, match="must start with a letter or digit and contain only"):
        JobName.parse(name)


def test_normalize_job_id_adds_leading_slash():
    assert normalize_job_id("my-job") == "/my-job"
    assert normalize_job_id("/my-job/child") == "/my-job/child"


def test_job_id_of_task_strips_index_and_rejects_non_task_ids():
    assert job_id_of_task("/train/eval/3") == "/train/eval"
    for bad in ("/train", "/train/x", "3"):
        with pytest.raises(ValueError, match="expected '<job id>/<task index>'"):
            job_id_of_task(bad)
