"""Atomic, resumable torch checkpoints on a local path or `gs://` (through fsspec/gcsfs).

The step-directory layout, the commit protocol and pruning live in
`trainstack.trainers.common.checkpoint` (framework-free, shared with the TensorFlow trainer).

Payload:
- DDP (and single process): rank 0 writes `state.pt` with the model, the optimizer, the step
  and every rank's RNG states (torch, numpy, python; CUDA when present).
- FSDP: `torch.distributed.checkpoint` writes the sharded model and optimizer, each rank its
  own shard (FileSystemWriter locally, FsspecWriter for gs://), and rank 0 writes
  `trainer.pt` with the step and the RNG states.

The data position is the global step (see `trainstack.trainers.common.data`).

Async saves (`async_checkpoint`) copy the state and write the copy on a background thread;
at most one write is in flight, and the next save waits for it. The copy goes into host
buffers kept from one save to the next (pinned memory, filled on a side stream, on CUDA), so
only the first save pays for allocating them; they cost host memory the size of the state
(of this rank's shard under FSDP) for the rest of the run. With `overlap_copy` the copy
overlaps what the caller computes next (on CPU it runs on a thread), and the caller calls
`before_update()` before it next changes the parameters or the optimizer state; the training
loop is then blocked only for what is left of the copy at that point. DDP: rank 0 copies
with `trainstack.trainers.torch_ddp.staging` and writes `state.pt` from the copy. FSDP:
`torch.distributed.checkpoint.async_save` copies with its `DefaultStager` and writes every
rank's shard on its own thread, coordinated over a gloo group of its own (collectives from
two threads must not share one group); when all shards are written, rank 0 adds
`trainer.pt` and commits. Preemption and final saves are always synchronous.
"""

from __future__ import annotations

import io
import random
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict_saver import AsyncSaveResponse

from trainstack.trainers.common.checkpoint import (
    CheckpointStore,
    CheckpointWriteError,
    Skipped,
    step_name,
    test_delay,
    write_failure,
)
from trainstack.trainers.common.fingerprint import StateMismatch
from trainstack.trainers.torch_ddp.staging import Copy, HostCopy

STATE_FILE = "state.pt"
TRAINER_FILE = "trainer.pt"


def rng_state() -> dict[str, Any]:
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": [
            name,
            torch.from_numpy(np.asarray(keys).astype(np.int64)),
            int(pos),
            int(has_gauss),
            float(cached),
        ],
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def _cuda() -> bool:
    return torch.cuda.is_available()


def serialize(obj: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _deserialize(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def gathered_item(
    rng: dict[str, Any], failure: CheckpointWriteError | None
) -> tuple[dict[str, Any], tuple[str, int] | None]:
    """What one rank contributes to a save's all-gather: its RNG state and its failure."""
    return rng, None if failure is None else (str(failure), failure.step)


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


@dataclass
class SaveResult:
    step: int
    stall_s: float
    """Time the training loop was blocked."""
    path: str


class Checkpointer:
    """Saves and restores the whole training state; every rank calls every method."""

    def __init__(
        self,
        url: str,
        *,
        keep: int,
        rank: int,
        world_size: int,
        sharded: bool,
        async_save: bool = False,
        overlap_copy: bool = False,
        on_written: Callable[[int, float], None] | None = None,
        fingerprint: dict[str, Any] | None = None,
    ) -> None:
        self.store = CheckpointStore(url, keep=keep, fingerprint=fingerprint)
        self.rank = rank
        self.world_size = world_size
        self.sharded = sharded
        self.async_save = async_save
        self.overlap_copy = overlap_copy
        self.on_written = on_written
        # One worker: at most one write in flight, and its exception comes back via result().
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint")
        self._pending: Future[Any] | None = None
        self._pending_step = 0
        """The step of the save in flight (of the last save once it is done)."""
        self._staged: Copy | None = None
        self._host = HostCopy()
        self._stager: Any = None
        # Created by every rank at the same point (a collective), before any save.
        self._async_group = (
            dist.new_group(backend="gloo") if async_save and sharded and _distributed() else None
        )

    # -- saving -------------------------------------------------------------------------

    def _exchange(self, failure: CheckpointWriteError | None) -> list[dict[str, Any]]:
        """Every rank's RNG state, gathered with each rank's failed earlier write (an async
        save's error surfaces only on its writer): any failure raises on every rank, so they
        stop together rather than wait for a peer that has left."""
        mine = rng_state()
        gathered: list[Any] = [gathered_item(mine, failure)]
        if _distributed():
            gathered = [None] * self.world_size
            dist.all_gather_object(gathered, gathered_item(mine, failure))
        for _, failed in gathered:
            if failed is not None:
                raise CheckpointWriteError(*failed)
        return [rng for rng, _ in gathered]

    def _token(self) -> str:
        token = [uuid.uuid4().hex[:12]]
        if _distributed():
            dist.broadcast_object_list(token, src=0)
        return str(token[0])

    def before_update(self) -> float:
        """Block until the copy of an async save is taken; returns the seconds blocked. With
        `overlap_copy`, call it before changing parameters or optimizer state."""
        staged, self._staged = self._staged, None
        if staged is None:
            return 0.0
        started = time.perf_counter()
        try:
            staged.before_update()
        except Exception as e:
            raise RuntimeError(f"checkpoint copy failed: {e}") from e
        return time.perf_counter() - started

    def wait(self) -> None:
        """Block until an in-flight async write has committed; re-raise its error."""
        self.before_update()
        pending, self._pending = self._pending, None
        if pending is not None:
            try:
                pending.result()
            except BaseException as e:  # torch's CheckpointException is no Exception
                failed = write_failure(e, self._pending_step, self.store.url)
                if failed is not None:
                    raise failed from None
                if not isinstance(e, Exception):
                    raise
                raise RuntimeError(f"background checkpoint write failed: {e}") from e

    def _settle(self) -> CheckpointWriteError | None:
        """`wait`, with a storage refusal of the write it waited for returned, not raised."""
        try:
            self.wait()
        except CheckpointWriteError as e:
            return e
        return None

    def _staging(self) -> Any:
        """The reusable staging copier of `dcp.async_save` (`DefaultStager`), created on the
        first async FSDP save."""
        if self._stager is None:
            from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

            self._stager = DefaultStager(
                StagingOptions(
                    use_pinned_memory=_cuda(),
                    use_shared_memory=False,
                    use_async_staging=self.overlap_copy,
                    use_non_blocking_copy=self.overlap_copy and _cuda(),
                )
            )
        if _cuda():
            # The stager's copies run on a stream of their own, which does not wait for the
            # optimizer step still queued on this one.
            torch.cuda.current_stream().synchronize()
        return self._stager

    def _write_copy(self, step: int, copy: Copy, started: float) -> str:
        return self._write_state(step, copy.result(), started)

    def _write_state(self, step: int, state: dict[str, Any], started: float) -> str:
        tmp = self.store.new_tmp(step, uuid.uuid4().hex[:12])
        # Streamed into the file: no serialized copy of the whole state in memory.
        with self.store.fs.open(f"{tmp}/{STATE_FILE}", "wb") as f:
            torch.save(state, f)
        test_delay()
        self._commit(step, tmp, started)
        return self.store.path(step_name(step))

    def save(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        step: int,
        sync: bool = False,
    ) -> SaveResult:
        """Save `step`; `sync` forces a blocking write (used at the end and on preemption)."""
        started = time.perf_counter()
        rngs = self._exchange(self._settle())
        asynchronous = self.async_save and not sync
        self._pending_step = step
        if self.sharded:
            path = self._save_sharded(step, model, optimizer, rngs, started, asynchronous)
            return SaveResult(step, time.perf_counter() - started, self.store.url_of(path))
        path = self.store.path(step_name(step))
        failure: CheckpointWriteError | None = None
        if self.rank == 0:
            state = {
                "step": step,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "rng": rngs,
                "world_size": self.world_size,
            }
            if asynchronous:
                copy = self._host.start(state, background=self.overlap_copy)
                self._staged = copy
                self._pending = self._executor.submit(self._write_copy, step, copy, started)
            else:
                failure = self._guarded(step, lambda: self._write_state(step, state, started))
        if not asynchronous:
            # Nobody moves on (or exits after a preemption save) before the commit, and a
            # write refused on rank 0 stops every rank.
            self._agree(failure)
        if not self.overlap_copy:
            self.before_update()
        return SaveResult(step, time.perf_counter() - started, self.store.url_of(path))

    def _guarded(self, step: int, write: Callable[[], object]) -> CheckpointWriteError | None:
        """Run `write`; a storage refusal comes back as the error, anything else is raised."""
        try:
            write()
        except BaseException as e:  # torch's CheckpointException is no Exception
            failed = write_failure(e, step, self.store.url)
            if failed is None:
                raise
            return failed
        return None

    def _agree(self, failure: CheckpointWriteError | None) -> None:
        """Rank 0's write outcome on every rank (a barrier as well): raises its failure."""
        answer: list[Any] = [None if failure is None else (str(failure), failure.step)]
        if _distributed():
            dist.broadcast_object_list(answer, src=0)
        if answer[0] is not None:
            raise CheckpointWriteError(*answer[0])

    def _save_sharded(
        self,
        step: int,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        rngs: list[dict[str, Any]],
        started: float,
        asynchronous: bool,
    ) -> str:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        token = self._token()
        tmp = self.store.path(f"{step_name(step)}.tmp-{token}")
        if self.rank == 0:
            self.store.fs.makedirs(tmp, exist_ok=True)
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {"model": model_sd, "optim": optim_sd}
        trainer = {"step": step, "rng": rngs, "world_size": self.world_size}
        final = self.store.path(step_name(step))
        if asynchronous:
            response = dcp.async_save(
                state,
                storage_writer=self._writer(tmp),
                process_group=self._async_group,
                async_stager=self._staging(),
            )
            if isinstance(response, AsyncSaveResponse):
                self._staged = Copy(response.staging_completion)
                written = response.upload_completion
            else:
                written = response
            if not self.overlap_copy:
                self.before_update()
            # Every rank's future completes after the coordinator wrote the metadata, that
            # is after all shards are written; rank 0 then commits on its own thread.
            self._pending = (
                self._executor.submit(self._commit_sharded, written, step, tmp, trainer, started)
                if self.rank == 0
                else written
            )
            return final
        failure = self._guarded(step, lambda: dcp.save(state, storage_writer=self._writer(tmp)))
        if failure is not None:
            raise failure  # dcp.save fails on every rank alike: its errors are gathered
        if self.rank == 0:
            failure = self._guarded(step, lambda: self._commit_trainer(step, tmp, trainer, started))
        self._agree(failure)
        return final

    def _commit(self, step: int, tmp: str, started: float) -> None:
        self.store.commit(tmp, step)
        self.store.prune()
        if self.on_written:
            self.on_written(step, time.perf_counter() - started)

    def _commit_sharded(
        self, written: Future[Any], step: int, tmp: str, trainer: dict[str, Any], started: float
    ) -> None:
        written.result()
        self._commit_trainer(step, tmp, trainer, started)

    def _commit_trainer(self, step: int, tmp: str, trainer: dict[str, Any], started: float) -> None:
        """Rank 0, once every shard is written: `trainer.pt`, then the commit."""
        self.store.write_bytes(f"{tmp}/{TRAINER_FILE}", serialize(trainer))
        test_delay()
        self._commit(step, tmp, started)

    def _writer(self, path: str) -> Any:
        from torch.distributed.checkpoint import FileSystemWriter
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

        if self.store.remote:
            return FsspecWriter(self.store.url_of(path), **self.store.options)
        return FileSystemWriter(path)

    def _reader(self, path: str) -> Any:
        from torch.distributed.checkpoint import FileSystemReader
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader

        if self.store.remote:
            return FsspecReader(self.store.url_of(path), **self.store.options)
        return FileSystemReader(path)

    # -- loading ------------------------------------------------------------------------

    def resume_point(self) -> tuple[int | None, list[Skipped]]:
        """The newest complete step and the newer folders passed over
        (`CheckpointStore.resume_point`), agreed by all ranks (rank 0 decides); raises
        `StateMismatch` on every rank when that step was written under other settings."""
        answer: list[Any] = [None, None, []]
        if self.rank == 0:
            try:
                answer[0], answer[2] = self.store.resume_point()
            except StateMismatch as e:
                answer[1] = str(e)
        if _distributed():
            dist.broadcast_object_list(answer, src=0)
        if answer[1] is not None:
            raise StateMismatch(answer[1])
        return (None if answer[0] is None else int(answer[0])), list(answer[2])

    def latest_step(self) -> int | None:
        """`resume_point`'s step."""
        return self.resume_point()[0]

    def load(self, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
        """Restore model, optimizer and this rank's RNG from `step`; returns the step."""
        path = self.store.path(step_name(step))
        if self.sharded:
            import torch.distributed.checkpoint as dcp
            from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

            model_sd, optim_sd = get_state_dict(model, optimizer)
            state: dict[str, Any] = {"model": model_sd, "optim": optim_sd}
            dcp.load(state, storage_reader=self._reader(path))
            set_state_dict(
                model,
                optimizer,
                model_state_dict=state["model"],
                optim_state_dict=state["optim"],
            )
            meta = _deserialize(self.store.read_bytes(f"{path}/{TRAINER_FILE}"))
        else:
            meta = _deserialize(self.store.read_bytes(f"{path}/{STATE_FILE}"))
            model.load_state_dict(meta["model"])
            optimizer.load_state_dict(meta["optimizer"])
        rngs = meta["rng"]
        if len(rngs) == self.world_size:
            set_rng_state(rngs[self.rank])
        return int(meta["step"])
