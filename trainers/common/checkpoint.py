"""Checkpoint directories on a local path or `gs://` (fsspec/gcsfs), framework-free.

Layout: `{dir}/step-{N:08d}/` per step. A save writes into `{dir}/step-N.tmp-<token>/`, moves
it to `step-N/` (a rename locally; a copy on object stores, which have no atomic directory
rename) and writes the `COMPLETE` marker last, with the settings fingerprint of the run that
wrote it (`trainstack.trainers.common.fingerprint`). Only directories with the marker are loaded,
so a save killed at any point leaves nothing that a restart would trust; the next save
deletes the leftovers and all but the newest `keep` complete checkpoints. What goes inside a
step directory is the trainer's business (`trainstack.trainers.torch_ddp.checkpoint` for torch,
`trainstack.trainers.tf_multiworker.checkpoint` for TensorFlow); this module imports neither framework.
GCS and emulator options come from `trainstack.trainers.common.storage`.

Test hook: `TRAINSTACK_TEST_SLOW_CKPT=<seconds>` (`test_delay`) sleeps between writing the
payload and committing it, so a test can kill a run in the middle of a save.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from typing import Any

from trainstack.trainers.common.cluster import trial_id
from trainstack.trainers.common.fingerprint import (
    FINGERPRINT_FIELD,
    StateMismatch,
    check,
    trainer_fingerprint,
)
from trainstack.trainers.common.storage import storage_options

MARKER = "COMPLETE"
_STEP_RE = re.compile(r"^step-(\d{8})$")
_TMP_RE = re.compile(r"^step-\d{8}\.tmp-[0-9a-f]+$")


MARKED_STEP_RE = re.compile(r"step-(\d+)")
"""A checkpoint folder's name in the run contract: the bundled trainers pad the step to 8
digits, your own code may not."""


def step_name(step: int) -> str:
    return f"step-{step:08d}"


AIP_CHECKPOINT_DIR_ENV = "AIP_CHECKPOINT_DIR"


def run_checkpoint_dir(cfg: Any, env: Mapping[str, str]) -> str | None:
    """A bundled trainer's checkpoint folder (`TrainConfig` `cfg`): `cfg.checkpoint_dir`
    when given (every target but Vertex gets `<bucket>/checkpoints/<run_name>` from
    `trainstack.infra.compose`), else on Vertex `AIP_CHECKPOINT_DIR/<run_name>` (Vertex's folder is one
    per job spec, the same for every run of a stack), else None (no checkpoints).

    A tuning trial's folder (`<base>/<trial id>/checkpoints/`) is named by the trial id
    alone, and a new tuning job numbers its trials from 1 again with other hyperparameters:
    there the run's folder also carries the settings' fingerprint
    (`<run_name>-<sha256[:12]>`), so a trial resumes only state written under its own
    settings and never refuses (or, before fingerprints, silently resumed) another job's."""
    if cfg.checkpoint_dir:
        return str(cfg.checkpoint_dir)
    platform = env.get(AIP_CHECKPOINT_DIR_ENV, "").rstrip("/")
    if not platform:
        return None
    if trial_id(env) is not None:
        return f"{platform}/{cfg.run_name}-{trainer_fingerprint(cfg)['sha256'][:12]}"
    return f"{platform}/{cfg.run_name}"


def check_resume(cfg: Any, env: Mapping[str, str]) -> None:
    """Before a launcher starts the bundled trainer (`TrainConfig` `cfg`): raise
    `StateMismatch` when the run's newest checkpoint was written under other settings, so
    the refusal is an exit 2 of the launcher rather than a worker failure that torchrun
    restarts and reports as 1. A folder that cannot be read here is left to the trainer,
    which checks again before it resumes."""
    url = run_checkpoint_dir(cfg, env)
    if not url:
        return
    try:
        CheckpointStore(url, keep=1, fingerprint=trainer_fingerprint(cfg)).resumable()
    except StateMismatch:
        raise
    except Exception:  # noqa: BLE001, S110 - storage or credentials: the trainer decides
        pass


def newest_marked(url: str) -> tuple[int, str] | None:
    """The newest `step-<N>` folder under `url` (a local path or `gs://`) that holds the
    `COMPLETE` marker, as (N, folder name): what `trainstack status` and `local-run` report
    as saved, for the bundled trainers and for your own code alike."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(url.rstrip("/"), **storage_options(url))
    root = root.rstrip("/")
    try:
        names = [str(p).rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(root, detail=False)]
    except FileNotFoundError:
        return None
    marked = [
        (int(m[1]), name)
        for name in names
        if (m := MARKED_STEP_RE.fullmatch(name)) and fs.exists(f"{root}/{name}/{MARKER}")
    ]
    return max(marked) if marked else None


class CheckpointStore:
    """Directory bookkeeping: listing, committing and pruning step directories."""

    def __init__(
        self, url: str, *, keep: int, fingerprint: Mapping[str, Any] | None = None
    ) -> None:
        import fsspec

        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.url = url.rstrip("/")
        self.options = storage_options(self.url)
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **self.options)
        self.remote = "://" in self.url and not self.url.startswith("file://")
        self.keep = keep
        self.fingerprint = dict(fingerprint) if fingerprint is not None else None
        """Recorded in every marker this store commits; what `verify` compares with."""

    def path(self, name: str) -> str:
        return f"{self.root.rstrip('/')}/{name}"

    def url_of(self, path: str) -> str:
        """A path from `self.fs` as a URL other fsspec users can open."""
        return self.fs.unstrip_protocol(path) if self.remote else path

    def _names(self) -> list[str]:
        # gcsfs caches listings; other ranks and earlier processes change the directory.
        self.fs.invalidate_cache()
        try:
            entries = self.fs.ls(self.root, detail=False)
        except FileNotFoundError:
            return []
        return [str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries]

    def is_complete(self, step: int) -> bool:
        return bool(self.fs.exists(self.path(f"{step_name(step)}/{MARKER}")))

    def complete_steps(self) -> list[int]:
        """Steps with a committed checkpoint, oldest first."""
        steps = []
        for name in self._names():
            m = _STEP_RE.match(name)
            if m and self.fs.exists(self.path(f"{name}/{MARKER}")):
                steps.append(int(m.group(1)))
        return sorted(steps)

    def latest(self) -> int | None:
        steps = self.complete_steps()
        return steps[-1] if steps else None

    def new_tmp(self, step: int, token: str) -> str:
        path = self.path(f"{step_name(step)}.tmp-{token}")
        self.fs.makedirs(path, exist_ok=True)
        return path

    def commit(self, tmp: str, step: int) -> str:
        final = self.path(step_name(step))
        if self.fs.exists(final):
            # An uncommitted leftover of a killed save of this same step.
            self.fs.rm(final, recursive=True)
        if self.remote:
            # Object stores copy and delete anyway; gcsfs's mv first tries the moveTo API,
            # which emulators lack and answer only after a long retry loop.
            self.fs.copy(tmp + "/", final, recursive=True)
            self.fs.rm(tmp, recursive=True)
        else:
            self.fs.mv(tmp, final, recursive=True)
        marker: dict[str, Any] = {"step": step, "committed_at": time.time()}
        if self.fingerprint is not None:
            marker[FINGERPRINT_FIELD] = self.fingerprint
        with self.fs.open(f"{final}/{MARKER}", "w") as f:
            f.write(json.dumps(marker))
        return final

    def saved_fingerprint(self, step: int) -> dict[str, Any] | None:
        """The fingerprint recorded in `step`'s marker; None when it records none."""
        with self.fs.open(self.path(f"{step_name(step)}/{MARKER}"), "r") as f:
            text = f.read()
        try:
            marker = json.loads(text)
        except ValueError:
            return None
        found = marker.get(FINGERPRINT_FIELD) if isinstance(marker, dict) else None
        return found if isinstance(found, dict) else None

    def verify(self, step: int) -> None:
        """Raise `StateMismatch` unless `step` was committed with this store's fingerprint
        (no fingerprint given: nothing to compare, nothing raised)."""
        if self.fingerprint is None:
            return
        check(
            self.saved_fingerprint(step),
            self.fingerprint,
            what=f"checkpoint step {step} in {self.url}",
            where=self.url,
        )

    def resumable(self) -> int | None:
        """The newest complete step, verified against this store's fingerprint (raises
        `StateMismatch`); None when there is none."""
        latest = self.latest()
        if latest is not None:
            self.verify(latest)
        return latest

    def prune(self) -> list[str]:
        """Delete stale temporaries, uncommitted step dirs and all but the newest `keep`."""
        removed = []
        complete = self.complete_steps()
        drop = {step_name(s) for s in complete[: -self.keep]}
        keep = {step_name(s) for s in complete[-self.keep :]}
        for name in self._names():
            stale = _TMP_RE.match(name) or (_STEP_RE.match(name) and name not in keep)
            if name in drop or stale:
                self.fs.rm(self.path(name), recursive=True)
                removed.append(name)
        return removed

    def clear(self) -> list[str]:
        """Delete every step directory, committed or not, and every temporary, so the next
        run starts from step 0; other files in the directory stay. Returns the names."""
        removed = []
        for name in self._names():
            if _STEP_RE.match(name) or _TMP_RE.match(name):
                self.fs.rm(self.path(name), recursive=True)
                removed.append(name)
        return sorted(removed)

    def write_bytes(self, path: str, data: bytes) -> None:
        with self.fs.open(path, "wb") as f:
            f.write(data)

    def read_bytes(self, path: str) -> bytes:
        with self.fs.open(path, "rb") as f:
            return bytes(f.read())

    def upload_dir(self, local_dir: str, path: str) -> None:
        """Copy the files of a local directory into `path` (a directory of this store)."""
        self.fs.makedirs(path, exist_ok=True)
        for name in sorted(os.listdir(local_dir)):
            self.fs.put_file(os.path.join(local_dir, name), f"{path}/{name}")

    def download_dir(self, path: str, local_dir: str) -> None:
        """Copy the files of `path` (a directory of this store) into a local directory."""
        os.makedirs(local_dir, exist_ok=True)
        self.fs.invalidate_cache()
        for entry in self.fs.ls(path, detail=False):
            name = str(entry).rstrip("/").rsplit("/", 1)[-1]
            self.fs.get_file(entry, os.path.join(local_dir, name))


def test_delay() -> None:
    """Sleep `TRAINSTACK_TEST_SLOW_CKPT` seconds (0 when unset) between payload and commit."""
    delay = float(os.environ.get("TRAINSTACK_TEST_SLOW_CKPT", "0") or 0)
    if delay > 0:
        time.sleep(delay)
