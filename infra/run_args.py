"""What every target's launch is told about the run: the bundled trainer's flags and the
run's checkpoint folder (`trainstack.infra.local_paths.run_name` names the run)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainstack.components.naming import bucket_name
from trainstack.infra.local_paths import run_name

if TYPE_CHECKING:
    from trainstack.infra.config_sections import StackView


def trainer_args(cfg: StackView, deployment: str) -> list[str]:
    """The stack's trainer settings as the trainer's `--key=value` flags (non-defaults only,
    in field order), so a job's command line shows exactly what the stack changed; the run's
    name is always among them (`trainstack.infra.local_paths.run_name`: the stack's name unless the stack
    sets one), since it names the run's checkpoint folder on every target."""
    named = cfg.trainer.model_copy(update={"run_name": run_name(cfg, deployment)})
    values = named.model_dump(exclude_defaults=True, mode="json")
    return [f"--{key}={value}" for key, value in values.items()]


def cloud_trainer_args(cfg: StackView, deployment: str) -> list[str]:
    """`trainer_args` for the bundled trainer on GKE, Compute Engine and TPU, plus
    `--model_dir=gs://<checkpoint bucket>/model/<run name>` unless the stack sets
    `trainer.model_dir`: the final model goes beside Vertex's AIP_MODEL_DIR export
    (`<base_output_dir>/model/`, the same bucket), outside the `checkpoints/` prefix the
    bucket's age rule deletes (`trainstack.components.training_buckets.CHECKPOINT_PREFIX`); without
    it the last checkpoint would be the only copy of the trained weights."""
    args = trainer_args(cfg, deployment)
    if cfg.trainer.model_dir:
        return args
    assert cfg.project is not None
    # The bucket TrainingBuckets names (same project, deployment and suffix): a plain
    # string, since the components take the trainer's flags as a list.
    bucket = bucket_name(cfg.project, deployment, "checkpoints", cfg.buckets.name_suffix or None)
    return [*args, f"--model_dir=gs://{bucket}/model/{run_name(cfg, deployment)}"]


def checkpoint_dir(cfg: StackView, deployment: str, checkpoint_url: str) -> str:
    """The run's checkpoint folder in the stack's checkpoint bucket: `trainer.checkpoint_dir`
    when set, else `<bucket>/checkpoints/<run name>`, one folder per run, under the prefix
    the bucket's age rule covers (`trainstack.components.training_buckets.CHECKPOINT_PREFIX`)."""
    chosen = cfg.trainer.checkpoint_dir
    return chosen or f"{checkpoint_url.rstrip('/')}/checkpoints/{run_name(cfg, deployment)}"
