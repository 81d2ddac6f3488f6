"""TensorFlow checkpoints in the shared step-directory layout (`trainstack.trainers.common.checkpoint`).

A step directory holds `ckpt.index` + `ckpt.data-*` (`tf.train.Checkpoint.write` of the model,
the optimizer and its slots; the step is the optimizer's `iterations`) and `meta.json`; the
`COMPLETE` marker is written last by the commit, with the run's settings fingerprint, so a
save killed at any point is never loaded and a checkpoint of other settings is refused. This is the contract BackupAndRestore and CheckpointManager implement for Keras,
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

Async saves (`async_checkpoint`, mirrored and multi_worker_mirrored): TensorFlow's own async
checkpoint (`CheckpointOptions(experimental_enable_async_checkpoint=True)`) copies the
variables to host memory on the training thread and writes the files on its thread; the
rest of the save (waiting for those files, the upload of a staged gs:// checkpoint, the meta
record, the commit and pruning; on other workers, removing the scratch copy) runs on a
thread of ours, so training goes on at once. At most one save is in flight; the next save,
and every synchronous one (preemption, final), waits for it first. TensorFlow's async writer
adds the `tf.train.Checkpoint`'s save counter to the files; a restore creates the counter
when the checkpoint holds one, so every variable in the files still has to be matched.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from trainstack.trainers.common.checkpoint import (
    CheckpointStore,
    Skipped,
    step_name,
    test_delay,
    write_failure,
)

PREFIX = "ckpt"
META_FILE = "meta.json"
SAVE_COUNTER = "save_counter/.ATTRIBUTES/VARIABLE_VALUE"


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
        async_save: bool = False,
        on_written: Callable[[int, float], None] | None = None,
        fingerprint: dict[str, Any] | None = None,
    ) -> None:
        self.store = CheckpointStore(url, keep=keep, fingerprint=fingerprint)
        self.is_chief = is_chief
        self.checkpoint = checkpoint
        self.meta = {"framework": "tensorflow", **meta}
        self.options = tf.train.CheckpointOptions(experimental_io_device=io_device)
        self.async_options = tf.train.CheckpointOptions(
            experimental_io_device=io_device, experimental_enable_async_checkpoint=True
        )
        self.async_save = async_save
        self.on_written = on_written
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint")
        self._pending: Future[None] | None = None
        self._pending_step = 0
        """The step of the save in flight (of the last save once it is done)."""

    def resume_point(self) -> tuple[int | None, list[Skipped]]:
        """The newest complete step and the newer folders passed over
        (`CheckpointStore.resume_point`); raises `StateMismatch` (every worker reads the same
        marker) when it was written under other settings."""
        return self.store.resume_point()

    def latest_step(self) -> int | None:
        """`resume_point`'s step."""
        return self.resume_point()[0]

    def _write_local(self, directory: str, asynchronous: bool) -> None:
        options = self.async_options if asynchronous else self.options
        self.checkpoint.write(os.path.join(directory, PREFIX), options=options)

    def wait(self) -> None:
        """Block until an in-flight async save has committed; re-raise its error."""
        pending, self._pending = self._pending, None
        if pending is not None:
            try:
                pending.result()
            except Exception as e:
                failed = write_failure(e, self._pending_step, self.store.url)
                if failed is not None:
                    raise failed from None
                raise RuntimeError(f"background checkpoint write failed: {e}") from e

    def save(self, step: int, *, sync: bool = False) -> SaveResult:
        """Save `step`; `sync` forces a blocking write (used at the end and on preemption)."""
        started = time.perf_counter()
        self.wait()
        asynchronous = self.async_save and not sync
        self._pending_step = step
        final = self.store.path(step_name(step))
        if not self.is_chief:
            scratch = tempfile.mkdtemp(prefix="trainstack-ckpt-")
            try:
                self._write_local(scratch, asynchronous)
            except BaseException:
                shutil.rmtree(scratch, ignore_errors=True)
                raise
            if asynchronous:
                self._pending = self._executor.submit(self._drop_scratch, scratch)
            else:
                shutil.rmtree(scratch, ignore_errors=True)
            return SaveResult(step, time.perf_counter() - started, self.store.url_of(final))
        tmp = self.store.new_tmp(step, uuid.uuid4().hex[:12])
        local = tempfile.mkdtemp(prefix="trainstack-ckpt-") if self.store.remote else tmp
        try:
            self._write_local(local, asynchronous)
        except BaseException:
            if local != tmp:
                shutil.rmtree(local, ignore_errors=True)
            raise
        if asynchronous:
            self._pending = self._executor.submit(self._finish, step, tmp, local, started)
        else:
            try:
                self._finish(step, tmp, local, started)
            except Exception as e:
                failed = write_failure(e, step, self.store.url)
                if failed is None:
                    raise
                raise failed from None
        return SaveResult(step, time.perf_counter() - started, self.store.url_of(final))

    def _drop_scratch(self, scratch: str) -> None:
        try:
            self.checkpoint.sync()
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _finish(self, step: int, tmp: str, local: str, started: float) -> None:
        """Everything after `checkpoint.write`: on the writer thread for an async save."""
        try:
            self.checkpoint.sync()
            if local != tmp:
                self.store.upload_dir(local, tmp)
        finally:
            if local != tmp:
                shutil.rmtree(local, ignore_errors=True)
        meta = {**self.meta, "step": step}
        self.store.write_bytes(f"{tmp}/{META_FILE}", json.dumps(meta).encode())
        test_delay()
        self.store.commit(tmp, step)
        self.store.prune()
        if self.on_written:
            self.on_written(step, time.perf_counter() - started)

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
        if any(name == SAVE_COUNTER for name, _ in tf.train.list_variables(prefix)):
            # Written asynchronously: match the save counter the async writer added.
            _ = self.checkpoint.save_counter
        status = self.checkpoint.read(prefix, options=self.options)
        # Every saved value must land in an existing variable and every variable must get
        # one (model, optimizer slots, iterations): a model or optimizer that changed
        # shape since the save fails here instead of training from a half-restored state.
        status.assert_consumed()
