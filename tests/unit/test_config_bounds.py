"""Every numeric key of the stack config has a ceiling and floats are finite
(`trainstack.trainers.common.bounds`): `limits.max_run_hours: 1e300` used to pass the plan
and wrap around in the startup scripts' bash arithmetic. The vertex section's counts and
timeout, and gpu_cluster.node_count, have theirs from the platform's limits, in the one rule
the stack key and the component argument share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests import REPO_ROOT
from trainstack.components._vertex_args import validate_args as validate_vertex_args
from trainstack.components.a100_cluster.validate import a100_cluster_problems
from trainstack.infra.cli import app
from trainstack.infra.config import ConfigError, LimitsConfig, load_stack_config
from trainstack.infra.plan import read_stack_file

runner = CliRunner()


def _problems(**sections: Any) -> list[str]:
    config = {"trainstack:local": {"workers": 2}}
    config.update({f"trainstack:{key}": value for key, value in sections.items()})
    with pytest.raises(ConfigError) as info:
        load_stack_config(config)
    return info.value.errors


@pytest.mark.parametrize(
    ("sections", "expected"),
    [
        (
            {"limits": {"max_run_hours": 1e300}},
            "limits.max_run_hours: 1e+300 is too large; valid: <= 8760.0",
        ),
        (
            {"limits": {"max_run_hours": float("nan")}},
            "limits.max_run_hours: NaN is not a finite number; valid: a finite number",
        ),
        (
            {"limits": {"max_hourly_usd": float("inf")}},
            "limits.max_hourly_usd: Infinity is not a finite number; valid: a finite number",
        ),
        (
            {"trainer": {"steps": 1e300}},
            "trainer.steps: 1e+300 is too large; valid: <= 9007199254740992",
        ),
        (
            {"trainer": {"global_batch_size": 10**12}},
            "trainer.global_batch_size: 1000000000000 is too large; valid: <= 1048576",
        ),
        (
            {"trainer": {"learning_rate": 1e308}},
            "trainer.learning_rate: 1e+308 is too large; valid: <= 10.0",
        ),
        (
            {"trainer": {"learning_rate": "1e308"}},  # PyYAML (YAML 1.1) reads 1e308 as text
            "trainer.learning_rate: '1e308' is too large; valid: <= 10.0",
        ),
        (
            {"trainer": {"steps": True}},
            "trainer.steps: true is not an integer; valid: a whole number",
        ),
        (
            {"trainer": {"steps": "20"}},
            "trainer.steps: '20' is not an integer; valid: a whole number",
        ),
        (
            {"trainer": {"checkpoint_every": False}},
            "trainer.checkpoint_every: false is not an integer; valid: a whole number",
        ),
        (
            {"trainer": {"learning_rate": float("inf")}},
            "trainer.learning_rate: Infinity is not a finite number; valid: a finite number",
        ),
        (
            {"trainer": {"learning_rate": float("nan")}},
            "trainer.learning_rate: NaN is not a finite number; valid: a finite number",
        ),
        ({"trainer": {"seed": -1}}, "trainer.seed: -1 is too small; valid: >= 0"),
        (
            {"trainer": {"seed": 2**32}},
            "trainer.seed: 4294967296 is too large; valid: <= 4294967295",
        ),
        (
            {"trainer": {"preemption_grace_s": 1e9}},
            "trainer.preemption_grace_s: 1000000000.0 is too large; valid: <= 3600.0",
        ),
        ({"local": {"workers": 513}}, "local.workers: 513 is too large; valid: <= 512"),
    ],
)
def test_numbers_past_their_ceiling_are_refused(sections: dict[str, Any], expected: str) -> None:
    assert _problems(**sections) == [expected]


def test_the_largest_values_pass_and_the_run_limit_fits_int64() -> None:
    cfg = load_stack_config(
        {
            "trainstack:local": {"workers": 512},
            "trainstack:limits": {"max_run_hours": 8760},
            "trainstack:trainer": {
                "seed": 2**32 - 1,
                "steps": 2**53,
                "preemption_grace_s": 3600,
                "global_batch_size": 512,
            },
        }
    )
    assert cfg.limits.max_run_seconds == 31_536_000
    assert LimitsConfig(max_run_hours=8760).max_run_seconds == 31_536_000


def test_plan_refuses_a_run_limit_bash_cannot_hold(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.forever.yaml"
    path.write_text(
        "config:\n  trainstack:local: {workers: 2}\n  trainstack:limits: {max_run_hours: 1e300}\n"
    )
    result = runner.invoke(app, ["plan", "--config-file", str(path)])
    assert (result.exit_code, result.stdout, result.stderr) == (
        2,
        "",
        "error: stack 'forever': "
        # PyYAML reads `1e300` (no dot) as a string, which pydantic reads as the number.
        "limits.max_run_hours: '1e300' is too large; valid: <= 8760.0\n",
    )


TUNING = {
    "metric_id": "loss",
    "goal": "MINIMIZE",
    "max_trial_count": 8,
    "parallel_trial_count": 2,
    "parameters": [
        {"parameter_id": "learning_rate", "type": "double", "min_value": 0.01, "max_value": 0.1}
    ],
}
INT32 = "2147483647"
VERTEX_CEILINGS = [
    # The API's own formats (aiplatform v1 discovery: replicaCount int64, the tuning counts
    # int32) and the run limit's year for scheduling.timeout (catalog.vertex).
    ({"replica_count": 2**53 + 1}, ["replica_count: 9007199254740993 is too large; valid: <= 9007199254740992"]),
    ({"reduction_server": {"enabled": True, "replica_count": 2**53 + 1}}, ["reduction_server.replica_count: 9007199254740993 is not allowed; valid: 'auto' or an integer 1-9007199254740992"]),
    ({"timeout_s": 31_536_001}, ["timeout_s: 31536001 is too large; valid: <= 31536000"]),
    ({"hyperparameter_tuning": {**TUNING, "max_trial_count": 2**31, "parallel_trial_count": 2**31}}, [
        f"hyperparameter_tuning.max_trial_count: 2147483648 is too large; valid: <= {INT32}",
        f"hyperparameter_tuning.parallel_trial_count: 2147483648 is too large; valid: <= {INT32}",
    ]),
    ({"hyperparameter_tuning": {**TUNING, "max_failed_trial_count": 2**31}}, [f"hyperparameter_tuning.max_failed_trial_count: 2147483648 is too large; valid: <= {INT32}"]),
]  # fmt: skip


@pytest.mark.parametrize(("override", "expected"), VERTEX_CEILINGS)
def test_vertex_numbers_past_the_api_limits_are_refused_by_stack_and_component(
    override: dict[str, Any], expected: list[str]
) -> None:
    # Your own code (no batch split over the replicas): only the ceiling speaks.
    _, config = read_stack_file(REPO_ROOT / "examples/own-trainer/Pulumi.vertex.yaml")
    section = {**config["trainstack:vertex"], **override}
    with pytest.raises(ConfigError) as info:
        load_stack_config({**config, "trainstack:vertex": section})
    assert info.value.errors == [f"vertex.{line}" for line in expected]
    # The component's own check, the same rule (components/_vertex_args.py).
    args = {
        **section,
        "region": "us-central1",
        "display_name": "exp-42",
        "package_uri": "gs://p-staging/trainer.tar.gz",
    }
    with pytest.raises(ValueError) as raised:
        validate_vertex_args(args)
    assert str(raised.value).splitlines() == expected


def test_the_largest_vertex_numbers_pass() -> None:
    _, config = read_stack_file(REPO_ROOT / "examples/own-trainer/Pulumi.vertex.yaml")
    tuning = {**TUNING, "max_trial_count": 2**31 - 1, "parallel_trial_count": 2**31 - 1}
    section = {
        **config["trainstack:vertex"],
        "timeout_s": 31_536_000,
        "reduction_server": {"enabled": True, "replica_count": 2**53},
        "hyperparameter_tuning": tuning,
    }
    cfg = load_stack_config({**config, "trainstack:vertex": section})
    assert cfg.compute.timeout_s == 31_536_000


@pytest.mark.parametrize("backend", ["gke", "gce"])
def test_a_gpu_cluster_holds_at_most_a_zones_node_pool_or_zonal_group(backend: str) -> None:
    # 1,000: a GKE node pool zone and a zonal MIG alike (catalog.gpus.MAX_NODES).
    _, config = read_stack_file(REPO_ROOT / "examples/own-trainer/Pulumi.gce.yaml")
    section = {
        **config["trainstack:gpu_cluster"],
        "backend": backend,
        "node_count": 1001,
        "compact_placement": False,
    }
    with pytest.raises(ConfigError) as info:
        load_stack_config({**config, "trainstack:gpu_cluster": section})
    assert info.value.errors == ["gpu_cluster.node_count: 1001 is too large; valid: <= 1000"]
    assert a100_cluster_problems(section, prefix="", shape_only=True) == [
        "node_count: 1001 is too large; valid: <= 1000"
    ]
    cfg = load_stack_config({**config, "trainstack:gpu_cluster": {**section, "node_count": 1000}})
    assert cfg.compute.node_count == 1000


def test_the_engines_doubles_still_count_as_whole_numbers() -> None:
    """The engine hands a dynamic provider its numbers as doubles (protobuf Struct
    `number_value`): `steps: 20.0` is the stack's 20, as before."""
    from trainstack.trainers.common.user_code import StackTrainer

    assert StackTrainer.model_validate({"steps": 20.0, "global_batch_size": 64.0}).steps == 20
