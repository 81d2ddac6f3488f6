"""Host copies of a training state for async checkpoints, in buffers kept from save to save.

`HostCopy.start(state)` copies every tensor of a nested dict / list / tuple state into a host
buffer of the same shape and dtype, allocated on the first save and reused after (pinned
memory on CUDA), and returns a `Copy`. Everything that is not a tensor is kept by reference:
RNG states and step numbers are fresh objects, and `optimizer.state_dict()` builds new
parameter-group dicts, so nothing of it changes while the copy is written.

CUDA: the copies are queued on a side stream that first waits for the work already queued on
the current one (the optimizer step that produced the state), into pinned memory without
blocking the host; `Copy.before_update()` makes the current stream wait for them, again
without blocking the host, and `Copy.result()` (on the writer thread) waits on the host.
CPU: with `background` the copy runs on a thread of its own, so it overlaps whatever the
caller computes next; `before_update()` and `result()` wait for it.
"""

from __future__ import annotations

from collections.abc import Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch


def _done(value: Any) -> Future[Any]:
    future: Future[Any] = Future()
    future.set_result(value)
    return future


class Copy:
    """One state being copied; `result()` is the host copy."""

    def __init__(self, future: Future[Any], event: torch.cuda.Event | None = None) -> None:
        self.future = future
        self.event = event

    def before_update(self) -> None:
        """Order the copy before any later change of the copied tensors."""
        if self.event is not None:
            torch.cuda.current_stream().wait_event(self.event)
        else:
            self.future.result()

    def result(self) -> Any:
        state = self.future.result()
        if self.event is not None:
            self.event.synchronize()
        return state


class HostCopy:
    """Reusable host buffers for the tensors of a state (one state layout per instance)."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[Hashable, ...], torch.Tensor] = {}
        self._thread: ThreadPoolExecutor | None = None
        self._stream: torch.cuda.Stream | None = None

    def _buffer(self, path: tuple[Hashable, ...], tensor: torch.Tensor) -> torch.Tensor:
        buf = self._buffers.get(path)
        if buf is None or buf.shape != tensor.shape or buf.dtype != tensor.dtype:
            buf = torch.empty(
                tensor.shape, dtype=tensor.dtype, pin_memory=tensor.device.type == "cuda"
            )
            self._buffers[path] = buf
        return buf

    def _copy(self, obj: Any, path: tuple[Hashable, ...]) -> Any:
        if isinstance(obj, torch.Tensor):
            buf = self._buffer(path, obj)
            buf.copy_(obj.detach(), non_blocking=obj.device.type == "cuda")
            return buf
        if isinstance(obj, dict):
            out = type(obj)((k, self._copy(v, (*path, k))) for k, v in obj.items())
            if hasattr(obj, "_metadata"):
                # Module state dicts carry per-module versions that loading reads.
                out._metadata = obj._metadata  # type: ignore[attr-defined]
            return out
        if isinstance(obj, list | tuple):
            return type(obj)(self._copy(v, (*path, i)) for i, v in enumerate(obj))
        return obj

    def start(self, state: Any, *, background: bool) -> Copy:
        """Start copying `state`; the previous copy must have been written (its buffers are
        reused)."""
        if torch.cuda.is_available() and _has_cuda_tensor(state):
            if self._stream is None:
                self._stream = torch.cuda.Stream()
            self._stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self._stream):
                copied = self._copy(state, ())
                event = torch.cuda.Event()
                event.record(self._stream)
            return Copy(_done(copied), event)
        if not background:
            return Copy(_done(self._copy(state, ())))
        if self._thread is None:
            self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckpt-copy")
        return Copy(self._thread.submit(self._copy, state, ()))


def _has_cuda_tensor(obj: Any) -> bool:
    if isinstance(obj, torch.Tensor):
        return obj.device.type == "cuda"
    if isinstance(obj, dict):
        return any(_has_cuda_tensor(v) for v in obj.values())
    if isinstance(obj, list | tuple):
        return any(_has_cuda_tensor(v) for v in obj)
    return False
