"""Which settings wrote a run's state, and the refusal to resume it under other settings.

Every checkpoint the bundled trainers commit records `trainer_fingerprint(cfg)` in its
`COMPLETE` marker (`trainstack.trainers.common.checkpoint.CheckpointStore`). Before a run resumes, the
newest complete checkpoint's record is compared with the run's own: a difference raises
`StateMismatch` (a ValueError, so every entry point exits 2), naming each changed key with
its old and new value and the two ways on: a new `run_name` (a new folder), or starting
fresh. A checkpoint with no record (written before trainstack kept one) is refused the same
way, since nothing says which settings wrote it.

What counts (`STATE_KEYS`): the settings that decide the shape or the meaning of the saved
model and optimizer state, or the trajectory that state is part of: the framework and
strategy (torch ddp and fsdp write different layouts), the model and its sizes, the data
(dataset, files, synthetic sample count, vocabulary), the optimizer's learning rate and
warmup, the global batch (the data position is step x global batch) and the seed (parameter
init and data order). What does not count: settings a run may change mid-way (`steps`,
`checkpoint_every`, `keep_checkpoints`, `log_every`, `tensorboard_dir`), how the same math
is computed (`grad_accum_steps`, `precision`, `compile`, `deterministic`, `bucket_cap_mb`,
`async_checkpoint`, thread counts), the world size (a resume may change it), and where
things go (`run_name`, `checkpoint_dir`, `model_dir`).

Your own code (`code_fingerprint`): trainstack cannot tell which of your arguments shape
your state, so the whole `entrypoint` and the plain `env` count; secrets, the source and the
image do not (a fix to your code is a normal reason to resume).

Framework-free; the Pulumi program and the CLI import it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

FINGERPRINT_FIELD: Final = "fingerprint"
"""The key of a `COMPLETE` marker (and of your code's run marker) that holds the record."""

STATE_KEYS: Final = (
    "framework",
    "strategy",
    "model",
    "dataset",
    "data_path",
    "synthetic_samples",
    "hidden_dim",
    "gpt_layers",
    "gpt_dim",
    "gpt_heads",
    "seq_len",
    "vocab_size",
    "global_batch_size",
    "learning_rate",
    "warmup_steps",
    "seed",
)
"""`TrainConfig` keys whose change makes a saved state another run's (see the module doc)."""

OTHER_KEYS: Final = (
    "steps",
    "checkpoint_every",
    "keep_checkpoints",
    "log_every",
    "tensorboard_dir",
    "preemption_grace_s",
    "deadline_margin_s",
    "grad_accum_steps",
    "precision",
    "compile",
    "deterministic",
    "bucket_cap_mb",
    "async_checkpoint",
    "torch_threads",
    "tf_threads",
    "run_name",
    "checkpoint_dir",
    "model_dir",
)
"""The other `TrainConfig` keys: a resume may change them (see the module doc). Every key is
in exactly one of the two lists (a test holds them to `TrainConfig`), so a new setting needs
a decision."""


class StateMismatch(ValueError):
    """A run's saved state was written under other settings; resuming it is refused."""


def _record(settings: Mapping[str, Any]) -> dict[str, Any]:
    canonical = json.dumps(dict(settings), sort_keys=True, separators=(",", ":"))
    return {
        "settings": json.loads(canonical),
        "sha256": hashlib.sha256(canonical.encode()).hexdigest(),
    }


def trainer_fingerprint(cfg: Any) -> dict[str, Any]:
    """The record of a bundled trainer config (`TrainConfig`): its `STATE_KEYS` values and
    their SHA-256."""
    values = cfg.model_dump(mode="json")
    return _record({key: values[key] for key in STATE_KEYS})


def code_fingerprint(entrypoint: Sequence[str], env: Mapping[str, str] | None) -> dict[str, Any]:
    """The record of your own code's run: its `entrypoint` argv and plain `env`."""
    return _record({"entrypoint": list(entrypoint), "env": dict(sorted((env or {}).items()))})


def changes(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """`key: old -> new` for every setting that differs between two records, sorted by key
    (a key only one side has shows `(unset)` on the other)."""
    old, new = saved.get("settings", {}), current.get("settings", {})
    missing = "(unset)"
    return [
        f"{key}: {json.dumps(old.get(key, missing))} -> {json.dumps(new.get(key, missing))}"
        for key in sorted(set(old) | set(new))
        if old.get(key, missing) != new.get(key, missing)
    ]


def ways_on(where: str) -> str:
    """The two ways past a refused resume, for a message."""
    return (
        "set a new trainer.run_name (a new run, in a folder of its own), or start this run "
        f"fresh by deleting {where} (`trainstack local-run --fresh` does that for a local run)"
    )


def check(
    saved: Mapping[str, Any] | None,
    current: Mapping[str, Any],
    *,
    what: str,
    where: str,
    unknown: str | None = None,
) -> None:
    """Raise StateMismatch unless `saved` (the record read back, None when there is none)
    matches `current`. `what` names the state ("checkpoint step 40 in gs://b/checkpoints/x"),
    `where` the folder that starting fresh deletes; `unknown` says why there is no record when
    the reason is known (default: written before trainstack recorded one)."""
    if saved is None:
        why = unknown or "records no settings fingerprint (written before trainstack recorded one)"
        raise StateMismatch(f"{what} {why}, so it cannot be resumed safely; {ways_on(where)}")
    if saved.get("sha256") == current.get("sha256"):
        return
    changed = changes(saved, current) or ["the recorded fingerprint differs"]
    keys = ", ".join(item.split(":", 1)[0] for item in changed)
    raise StateMismatch(
        f"{what} was written with other settings ({'; '.join(changed)}); resuming it would "
        f"continue another run's state under {keys}. Refused: {ways_on(where)}"
    )
