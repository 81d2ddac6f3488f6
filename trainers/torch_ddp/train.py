"""The bundled PyTorch trainer: DDP or FSDP2 over whatever cluster the environment describes.

Launch shapes:

    python -m trainstack.trainers.torch_ddp --model=mlp --dataset=digits --steps=300      # one process
    torchrun --standalone --nproc-per-node 2 -m trainstack.trainers.torch_ddp --config run.yaml
    torchrun --nnodes $N --node-rank $R --master-addr $A --nproc-per-node 8 -m trainstack.trainers.torch_ddp

One process per node (Vertex, GKE Indexed Job, TPU VM, GCE) works too: rank and world come
from `trainstack.trainers.common.cluster`. Backend: NCCL on GPU, gloo on CPU.

Exit codes: 0 done; 2 invalid config or cluster environment, a newest checkpoint of other
settings (`trainstack.trainers.common.fingerprint`) or a save the storage refused (a full disk);
6 the machine's capacity ends (`TRAINSTACK_DEADLINE` less `deadline_margin_s` reached, after a
checkpoint: `trainstack.trainers.common.deadline`); 143 preempted after saving a checkpoint
(`trainstack.trainers.common.exit_codes`); anything else is a crash.

`TRAINSTACK_COLLECTIVE_TIMEOUT_S` (`contract.COLLECTIVE_TIMEOUT_ENV`) bounds how long a
collective waits for a lost or hung peer; `trainstack local-run` sets it.

Test hook: `TRAINSTACK_TEST_STEP_DELAY_S` sleeps that long each step, so tests can signal a
run at a chosen step.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from trainstack.trainers.common.checkpoint import (
    CheckpointStore,
    CheckpointWriteError,
    run_checkpoint_dir,
)
from trainstack.trainers.common.cli import load_config
from trainstack.trainers.common.cluster import resolve_cluster
from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.contract import (
    EVENT_CAPACITY_ENDED,
    EVENT_CHECKPOINT,
    EVENT_CHECKPOINT_BEGIN,
    EVENT_CHECKPOINT_SKIPPED,
    EVENT_CHECKPOINT_WRITTEN,
    EVENT_DONE,
    EVENT_FAILED,
    EVENT_IDLE,
    EVENT_PREEMPTED,
    EVENT_RESUME,
    EVENT_START,
    EVENT_TRAIN,
    FIELD_EVENT,
    FIELD_SEVERITY,
    TORCH_MODULE,
)
from trainstack.trainers.common.data import Dataset, load_dataset, shard_sampler
from trainstack.trainers.common.deadline import Deadline
from trainstack.trainers.common.digest import params_sha256 as digest_arrays
from trainstack.trainers.common.exit_codes import (
    CAPACITY_ENDED_EXIT_CODE,
    CONFIG_ERROR_EXIT_CODE,
    PREEMPTED_EXIT_CODE,
)
from trainstack.trainers.common.fingerprint import StateMismatch, trainer_fingerprint
from trainstack.trainers.common.metrics import MetricsLogger, gpu_peak_flops, report_hypertune
from trainstack.trainers.common.records import LogWindow, done_record
from trainstack.trainers.common.schedule import learning_rate
from trainstack.trainers.torch_ddp.checkpoint import Checkpointer, serialize
from trainstack.trainers.torch_ddp.distributed import (
    Runtime,
    collective_timeout,
    init_distributed,
    wrap,
)
from trainstack.trainers.torch_ddp.metrics import gpu_stats, torch_scalar_writer
from trainstack.trainers.torch_ddp.models import build_model, flops_per_sample
from trainstack.trainers.torch_ddp.preemption import PREEMPTION, PreemptionWatcher


def _param_array(param: nn.Parameter) -> Any:
    tensor = param.detach()
    if hasattr(tensor, "full_tensor"):
        tensor = tensor.full_tensor()
    return tensor.to("cpu", torch.float32).contiguous().numpy()


def params_sha256(model: nn.Module) -> str:
    """Digest of the full parameters (`trainstack.trainers.common.digest`) under their module names.
    FSDP shards are gathered first (a collective, so every rank must call this)."""
    return digest_arrays(unwrap(model).named_parameters(), _param_array)


def unwrap(model: nn.Module) -> nn.Module:
    """The user-level module under torch.compile and DDP wrappers (FSDP2 wraps in place)."""
    inner: Any = model
    while True:
        if hasattr(inner, "_orig_mod"):
            inner = inner._orig_mod
        elif isinstance(inner, nn.parallel.DistributedDataParallel):
            inner = inner.module
        else:
            return inner


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _configure_determinism(cfg: TrainConfig) -> None:
    if not cfg.deterministic:
        return
    # cuBLAS needs a fixed workspace to be deterministic; it must be set before CUDA starts.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def _loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor, ds: Dataset) -> torch.Tensor:
    logits = model(x)
    if ds.task == "lm":
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    return F.cross_entropy(logits, y)


def _autocast(rt: Runtime) -> contextlib.AbstractContextManager[Any]:
    if rt.cfg.precision == "bf16" and rt.device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _sync_context(
    model: nn.Module, rt: Runtime, last: bool
) -> contextlib.AbstractContextManager[Any]:
    """Skip the gradient all-reduce on all but the last micro-batch of an accumulation."""
    target: Any = unwrap_compiled(model)
    if rt.cfg.strategy == "fsdp":
        target.set_requires_gradient_sync(last)
        return contextlib.nullcontext()
    if isinstance(target, nn.parallel.DistributedDataParallel) and not last:
        return target.no_sync()
    return contextlib.nullcontext()


def unwrap_compiled(model: nn.Module) -> nn.Module:
    return getattr(model, "_orig_mod", model)


def _micro_batches(
    x: torch.Tensor, y: torch.Tensor, n: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    size = x.shape[0] // n
    for i in range(n):
        yield x[i * size : (i + 1) * size], y[i * size : (i + 1) * size]


@torch.no_grad()
def evaluate(model: nn.Module, ds: Dataset, rt: Runtime, batch: int = 512) -> dict[str, float]:
    """Loss and accuracy on the whole test split; every rank computes it (FSDP needs all
    ranks in the forward pass), so it needs no reduction."""
    model.eval()
    total_loss, correct, count = 0.0, 0, 0
    for start in range(0, len(ds.test), batch):
        x = torch.from_numpy(ds.test.x[start : start + batch]).to(rt.device)
        y = torch.from_numpy(ds.test.y[start : start + batch]).to(rt.device)
        with _autocast(rt):
            logits = model(x)
        logits = logits.float()
        if ds.task == "lm":
            loss = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum"
            )
            count_now = y.numel()
        else:
            loss = F.cross_entropy(logits, y, reduction="sum")
            count_now = y.shape[0]
        total_loss += float(loss)
        correct += int((logits.argmax(-1) == y).sum())
        count += count_now
    model.train()
    return {"test_loss": total_loss / count, "test_accuracy": correct / count}


def _global_mean(value: float, rt: Runtime) -> float:
    if not rt.distributed:
        return value
    t = torch.tensor(
        [value], device=rt.device, dtype=torch.float64 if rt.device.type == "cpu" else torch.float32
    )
    dist.all_reduce(t)
    return float(t.item()) / rt.cluster.world_size


def train(rt: Runtime) -> int:
    """Run (or resume) the configured training; returns the process exit code."""
    cfg, cluster = rt.cfg, rt.cluster
    if cfg.global_batch_size % (cluster.world_size * cfg.grad_accum_steps):
        raise ValueError(
            f"global_batch_size ({cfg.global_batch_size}) must be divisible by world size "
            f"({cluster.world_size}) x grad_accum_steps ({cfg.grad_accum_steps})"
        )
    logger = MetricsLogger(
        rank=cluster.rank,
        node=cluster.node_rank,
        worker=cluster.local_rank,
        run_name=cfg.run_name,
        total_steps=cfg.steps,
        tensorboard_dir=cfg.tensorboard_dir or os.environ.get("AIP_TENSORBOARD_LOG_DIR"),
        scalar_writer=torch_scalar_writer,
    )
    try:
        return _Trainer(rt, logger).run()
    except CheckpointWriteError as e:
        if cluster.rank == 0:  # the one error line `trainstack local-run` ends with
            logger.log(EVENT_FAILED, e.step, severity="ERROR", error=str(e), exit_code=2)
        raise
    finally:
        logger.close()


class _Trainer:
    def __init__(self, rt: Runtime, logger: MetricsLogger) -> None:
        cfg, cluster, device = rt.cfg, rt.cluster, rt.device
        self.rt, self.cfg, self.logger, self.device = rt, cfg, logger, device
        self.rank, self.world = cluster.rank, cluster.world_size
        self.ds = load_dataset(cfg, rank=self.rank, world_size=self.world)
        self.sampler = shard_sampler(cfg, self.ds, rank=self.rank, world_size=self.world)
        # Same initial parameters on every rank (and for every world size), then per-rank
        # random streams.
        _seed_everything(cfg.seed)
        raw = build_model(cfg, self.ds.input_shape, self.ds.num_classes).to(device)
        self.model = wrap(raw, rt)
        self.raw = unwrap(self.model)
        # The fused CUDA kernel is one launch for every parameter (benchmarks/gpu_throughput);
        # FSDP's DTensor parameters keep the default foreach path.
        self.optimizer = torch.optim.AdamW(
            self.raw.parameters(),
            lr=cfg.learning_rate,
            weight_decay=0.0,
            fused=device.type == "cuda" and cfg.strategy != "fsdp",
        )
        _seed_everything(cfg.seed + self.rank)
        self.ckpt_dir = run_checkpoint_dir(cfg, os.environ)
        self.written: list[float] = []
        self.checkpointer = (
            Checkpointer(
                self.ckpt_dir,
                keep=cfg.keep_checkpoints,
                rank=self.rank,
                world_size=self.world,
                sharded=cfg.strategy == "fsdp",
                async_save=cfg.async_checkpoint,
                overlap_copy=True,
                on_written=self._written,
                fingerprint=trainer_fingerprint(cfg),
            )
            if self.ckpt_dir
            else None
        )
        self.sample_flops = flops_per_sample(self.raw, cfg)
        self.peak = (
            gpu_peak_flops(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
        )
        self.tokens_per_sample = cfg.seq_len if self.ds.task == "lm" else 0
        self.stall_total = 0.0
        self._copying: tuple[int, dict[str, Any]] | None = None
        self.window = LogWindow()
        self.loss_value: float | None = None

    def _resume(self) -> int:
        if self.checkpointer is None:
            return 0
        latest, skipped = self.checkpointer.resume_point()
        for passed in skipped if self.rank == 0 else []:
            fields = passed.fields(str(self.ckpt_dir), latest)
            self.logger.log(EVENT_CHECKPOINT_SKIPPED, passed.step, severity="WARNING", **fields)
        if latest is None:
            return 0
        step = self.checkpointer.load(latest, self.raw, self.optimizer)
        self.logger.log(EVENT_RESUME, step, checkpoint_dir=self.ckpt_dir)
        return step

    def _written(self, step: int, secs: float) -> None:
        """Rank 0's commit of `step`; from the writer thread for an async save."""
        self.written.append(secs)
        self.logger.log(EVENT_CHECKPOINT_WRITTEN, step, write_s=secs)

    def _save(self, step: int, *, reason: str | None = None) -> None:
        if self.checkpointer is None:
            return
        self._copied()
        self.logger.log(EVENT_CHECKPOINT_BEGIN, step)
        saved = self.checkpointer.save(self.raw, self.optimizer, step=step, sync=reason is not None)
        asynchronous = reason is None and self.checkpointer.async_save
        fields = {
            "stall_s": saved.stall_s,
            "path": saved.path,
            "write_s": None if asynchronous or not self.written else self.written[-1],
            "async_write": asynchronous,
            "reason": reason,
        }
        if asynchronous:
            # Logged once the copy is taken, with the wait for it counted in stall_s.
            self._copying = (step, fields)
        else:
            self._log_save(step, fields)

    def _copied(self) -> None:
        """Finish an async save's copy (it overlaps the next step's forward and backward)."""
        if self.checkpointer is None or self._copying is None:
            return
        (step, fields), self._copying = self._copying, None
        fields["stall_s"] += self.checkpointer.before_update()
        self._log_save(step, fields)

    def _log_save(self, step: int, fields: dict[str, Any]) -> None:
        if fields["reason"] is None:
            self.stall_total += fields["stall_s"]
        self.logger.log(EVENT_CHECKPOINT, step, **fields)

    def _step(self, step: int) -> torch.Tensor:
        cfg, device = self.cfg, self.device
        t0 = time.perf_counter()
        idx = self.sampler.indices(step)
        x = torch.from_numpy(self.ds.train.x[idx]).to(device, non_blocking=True)
        y = torch.from_numpy(self.ds.train.y[idx]).to(device, non_blocking=True)
        self.window.data_wait += time.perf_counter() - t0
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(cfg, step)
        step_loss = torch.zeros((), device=device)
        for i, (mx, my) in enumerate(_micro_batches(x, y, cfg.grad_accum_steps)):
            last = i == cfg.grad_accum_steps - 1
            with _sync_context(self.model, self.rt, last), _autocast(self.rt):
                loss = _loss(self.model, mx, my, self.ds) / cfg.grad_accum_steps
            loss.backward()
            step_loss += loss.detach()
        self._copied()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.window.steps += 1
        return step_loss

    def _log_window(self, step: int, step_loss: torch.Tensor) -> None:
        self.loss_value = _global_mean(float(step_loss), self.rt)
        now = time.perf_counter()
        fields = self.window.fields(
            now,
            loss=self.loss_value,
            lr=learning_rate(self.cfg, step - 1),
            global_batch_size=self.cfg.global_batch_size,
            tokens_per_sample=self.tokens_per_sample,
            flops_per_sample=self.sample_flops,
            peak_flops=self.peak,
            devices=self.world,
        )
        if self.device.type == "cuda":
            fields.update(gpu_stats(self.device.index or 0))
        self.logger.log(EVENT_TRAIN, step, **fields)
        self.window = LogWindow(start=now)

    def run(self) -> int:
        cfg = self.cfg
        start_step = self._resume()
        self.logger.log(
            EVENT_START,
            start_step,
            world_size=self.world,
            platform=self.rt.cluster.platform,
            strategy=cfg.strategy,
            model=cfg.model,
            dataset=cfg.dataset,
            per_rank_batch=cfg.global_batch_size // self.world,
            device=str(self.device),
            params=sum(p.numel() for p in self.raw.parameters()),
        )
        step_delay = float(os.environ.get("TRAINSTACK_TEST_STEP_DELAY_S", "0") or 0)
        deadline = Deadline.from_env(os.environ, cfg.deadline_margin_s)
        watcher = PreemptionWatcher(
            grace_s=cfg.preemption_grace_s, device=self.device, deadline=deadline
        ).install()
        # Throughput skips the first steps (allocator and kernel warm-up) and checkpoint stalls.
        warm_steps = min(5, max(cfg.steps - start_step - 1, 0))
        timed_start, timed_stall = time.perf_counter(), 0.0
        step = start_step
        try:
            self.model.train()
            while step < cfg.steps:
                if step_delay:
                    time.sleep(step_delay)
                reason = watcher.stop_reason()
                if reason is not None:
                    watcher.drain()
                    return self._stop(step, start_step, reason, watcher.deadline)
                if step - start_step == warm_steps:
                    timed_start, timed_stall = time.perf_counter(), self.stall_total
                step_loss = self._step(step)
                step += 1
                if step % cfg.log_every == 0 or step == cfg.steps:
                    self._log_window(step, step_loss)
                if step % cfg.checkpoint_every == 0 and step < cfg.steps:
                    self._save(step)
            watcher.drain()
            timed = time.perf_counter() - timed_start - (self.stall_total - timed_stall)
            if step > start_step:
                self._save(step, reason="final")
            elif self.checkpointer is not None:
                self.checkpointer.wait()
            self._done(step, start_step, (step - start_step - warm_steps, timed))
            return 0
        finally:
            watcher.uninstall()
            if self.checkpointer is not None:
                with contextlib.suppress(RuntimeError):
                    self.checkpointer.wait()

    def _stop(self, step: int, start: int, reason: str, deadline: Deadline | None) -> int:
        """Save and leave on a preemption or the capacity's end; the exit code."""
        if reason == PREEMPTION:
            grace = self.cfg.preemption_grace_s
            self.logger.log(EVENT_PREEMPTED, step, severity="WARNING", grace_s=grace)
            self._save(step, reason=PREEMPTION)
            return PREEMPTED_EXIT_CODE
        if step > start:  # a resumed run stopped at once: its checkpoint is there already
            self._save(step, reason=EVENT_CAPACITY_ENDED)
        saved = step if self.checkpointer is not None and (step > start or start > 0) else None
        # After the save (its barrier included): the node launcher reads this line as "saved
        # and stopping", so a run whose save failed is not taken for one that ended well.
        assert deadline is not None
        self.logger.log(
            EVENT_CAPACITY_ENDED,
            step,
            severity="WARNING",
            checkpoint_step=saved,
            deadline=int(deadline.at),
            margin_s=deadline.margin_s,
        )
        return CAPACITY_ENDED_EXIT_CODE

    def _export_model(self) -> str | None:
        """Write the full (unsharded) final weights to `model_dir` (cloud stacks pass
        `<checkpoint bucket>/model/<run>`), else AIP_MODEL_DIR, where Vertex expects the
        model artifact: outside `checkpoints/`, which the bucket's age rule deletes. A
        collective under FSDP, so every rank calls it."""
        model_dir = self.cfg.model_dir or os.environ.get("AIP_MODEL_DIR")
        if not model_dir:
            return None
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
        )

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        state = get_model_state_dict(self.raw, options=options)
        if self.rank != 0:
            return None
        store = CheckpointStore(model_dir, keep=1)
        store.fs.makedirs(store.root, exist_ok=True)
        path = store.path("model.pt")
        store.write_bytes(path, serialize({"model": state, "config": self.cfg.model_dump()}))
        return store.url_of(path)

    def _done(self, step: int, start_step: int, timed: tuple[int, float]) -> None:
        metrics = evaluate(self.model, self.ds, self.rt)
        digest = params_sha256(self.model)
        model_path = self._export_model()
        done = done_record(
            params_sha256=digest,
            loss=self.loss_value,
            metrics=metrics,
            world_size=self.world,
            resumed_from=start_step,
            checkpoint_dir=self.ckpt_dir,
            checkpoint_stall_s=self.stall_total,
            model_path=model_path,
            timed=timed,
            global_batch_size=self.cfg.global_batch_size,
            tokens_per_sample=self.tokens_per_sample,
        )
        if self.rank == 0:
            report_hypertune(done, step)
            self.logger.log(EVENT_DONE, step, **done)


def main(argv: Sequence[str]) -> int:
    try:
        cfg = load_config(argv)
        if cfg.framework != "torch":
            raise ValueError(
                f"trainer.framework is {cfg.framework!r}; {TORCH_MODULE} runs 'torch' only"
            )
        cluster = resolve_cluster()
        timeout = collective_timeout(os.environ)
    except ValueError as e:
        print(f"trainstack trainer: {e}", file=sys.stderr)
        return CONFIG_ERROR_EXIT_CODE
    if not cluster.trains:
        # Parameter servers, reducers and evaluators have nothing to do in a DDP job.
        idle = {FIELD_EVENT: EVENT_IDLE, "role": cluster.role, FIELD_SEVERITY: "INFO"}
        print(json.dumps(idle), flush=True)
        return 0
    # Conv weights with one input channel have a size-1 dim whose stride autograd and DDP's
    # bucket views choose differently; the layouts are equivalent, so the warning is noise.
    warnings.filterwarnings("ignore", message="Grad strides do not match bucket view strides")
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    _configure_determinism(cfg)
    rt = init_distributed(cfg, cluster, timeout)
    try:
        return train(rt)
    except (StateMismatch, CheckpointWriteError) as e:
        # A refused write stops every rank, and one says why; stderr may be on the full disk.
        if cluster.rank == 0 or isinstance(e, StateMismatch):
            with contextlib.suppress(OSError):
                print(f"trainstack trainer: {e}", file=sys.stderr)
        return CONFIG_ERROR_EXIT_CODE
    finally:
        if rt.distributed and dist.is_initialized():
            dist.destroy_process_group()
