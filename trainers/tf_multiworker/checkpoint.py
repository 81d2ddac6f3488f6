"""TensorFlow checkpoints in the shared step-directory layout (`trainers.common.checkpoint`).

A step directory holds `ckpt.index` + `ckpt.data-*` (`tf.train.Checkpoint.write` of the model,
the optimizer and its slots; the step is the optimizer's `iterations`) and `meta.json`; the
`COMPLETE` marker is written last by the commit, so a save killed at any point is never
loaded. This is the contract BackupAndRestore and CheckpointManager implement for Keras,
kept in the layout the torch trainer and the rest of trainstack use.

Chief-writes rule (TensorFlow's multi-worker guide): every worker of a synchronous strategy
calls `save`, because writing may read replicated variables collectively; the chief writes
into the checkpoint directory and the other workers into a temporary directory that is
removed at once. With parameter servers only the chief (the coordinator) saves.

Local paths are written in place; `gs://` (or any other fsspec URL) is staged in a local
temporary directory and copied with gcsfs, which honours the GCS emulator settings, rather
than through TensorFlow's own filesystem layer. `io_device` pins the file I/O to the
coordinator when variables live on other tasks (parameter servers, remote TPU hosts), so
every shard is written where the staging directory is.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from trainers.common.checkpoint import CheckpointStore, step_name, test_delay

PREFIX = "ckpt"
META_FILE = "meta.json"


@dataclass
class SaveResult:
    step: int
    stall_s: float
    """Time the training loop was blocked."""
    path: str


class TFCheckpointer:
    def __init__(
        self,
        url: str,
        *,
        keep: int,
        is_chief: bool,
        checkpoint: tf.train.Checkpoint,
        meta: dict[str, Any],
        io_device: str | None = None,
        on_written: Callable[[int, float], None] | None = None,
    ) -> None:
        self.store = CheckpointStore(url, keep=keep)
        self.is_chief = is_chief
        self.checkpoint = checkpoint
        self.meta = {"framework": "tensorflow", **meta}
        self.options = tf.train.CheckpointOptions(experimental_io_device=io_device)
        self.on_written = on_written

    def latest_step(self) -> int | None:
        return self.store.latest()

    def _write_local(self, directory: str) -> None:
        self.checkpoint.write(os.path.join(directory, PREFIX), options=self.options)

    def save(self, step: int) -> SaveResult:
        started = time.perf_counter()
        final = self.store.path(step_name(step))
        if not self.is_chief:
            scratch = tempfile.mkdtemp(prefix="trainstack-ckpt-")
            try:
                self._write_local(scratch)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            return SaveResult(step, time.perf_counter() - started, self.store.url_of(final))
        tmp = self.store.new_tmp(step, uuid.uuid4().hex[:12])
        if self.store.remote:
            staging = tempfile.mkdtemp(prefix="trainstack-ckpt-")
            try:
                self._write_local(staging)
                self.store.upload_dir(staging, tmp)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        else:
            self._write_local(tmp)
        meta = {**self.meta, "step": step}
        self.store.write_bytes(f"{tmp}/{META_FILE}", json.dumps(meta).encode())
        test_delay()
        self.store.commit(tmp, step)
        self.store.prune()
        if self.on_written:
            self.on_written(step, time.perf_counter() - started)
        return SaveResult(step, time.perf_counter() - started, self.store.url_of(final))

    def restore(self, step: int) -> dict[str, Any]:
        """Load `step` into the tracked objects; returns the checkpoint's meta record.

        Raises ValueError when the directory holds another trainer's checkpoint.
        """
        path = self.store.path(step_name(step))
        meta = json.loads(self.store.read_bytes(f"{path}/{META_FILE}"))
        if meta.get("framework") != "tensorflow":
            raise ValueError(
                f"checkpoint {self.store.url_of(path)} was written by the "
                f"{meta.get('framework')!r} trainer; use another checkpoint_dir"
            )
        if self.store.remote:
            staging = tempfile.mkdtemp(prefix="trainstack-restore-")
            try:
                self.store.download_dir(path, staging)
                self._read(os.path.join(staging, PREFIX))
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        else:
            self._read(f"{path}/{PREFIX}")
        return dict(meta)

    def _read(self, prefix: str) -> None:
        status = self.checkpoint.read(prefix, options=self.options)
        # Every saved value must land in an existing variable and every variable must get
        # one (model, optimizer slots, iterations): a model or optimizer that changed
        # shape since the save fails here instead of training from a half-restored state.
        status.assert_consumed()
