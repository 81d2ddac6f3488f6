"""Target `local`: the trainer as processes on this machine (`LocalTrainingJob`, and
`trainstack local-run`), its "buckets" under `local.root`. Stack section `trainstack:local`."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast

from pydantic import Field

from trainstack.components.catalog.batch import WorldSize, local_world_size
from trainstack.components.code_summary import LOCAL_RUNS_ON
from trainstack.components.local_training_job import LocalTrainingJob, LocalTrainingJobArgs
from trainstack.infra.local_paths import (
    local_checkpoint_dir,
    local_log_path,
    local_root_arg,
    run_name,
)
from trainstack.infra.logs import FileLogs, check_worker, file_lines, line_record
from trainstack.infra.outputs import (
    OUTPUT_JOB_STATE,
    OUTPUT_LOCAL_CHECKPOINT_DIR,
    OUTPUT_LOCAL_LOG,
    OUTPUT_LOCAL_PIDS,
    OUTPUT_LOCAL_ROOT,
    OUTPUT_TARGET,
)
from trainstack.infra.plan_inputs import number
from trainstack.infra.project import current_place
from trainstack.infra.stack_outputs import read_outputs
from trainstack.infra.targets.base import RunResource, Section, StandaloneTarget
from trainstack.trainers.common.bounds import MAX_LOCAL_WORKERS
from trainstack.trainers.common.checkpoint import newest_marked
from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.contract import (
    EVENT_DONE,
    EVENT_EXIT,
    EVENT_FAILED,
    EVENT_LAUNCH,
    EVENT_RESUME,
    EVENT_START,
    EVENT_TRAIN,
    FIELD_EVENT,
    FIELD_STEP,
)
from trainstack.trainers.common.exit_codes import INTERRUPTED_EXIT_CODE, PREEMPTED_EXIT_CODE
from trainstack.trainers.common.scalars import StrictScalars
from trainstack.trainers.common.user_code import DEFAULT_LAUNCHER
from trainstack.trainers.local_start import on_storage
from trainstack.trainers.run_lock import LOCAL_RUN as LOCAL_RUN_HOLDER
from trainstack.trainers.run_lock import RunHolder, running_pid_file

if TYPE_CHECKING:
    from trainstack.infra.config_sections import StackView
    from trainstack.trainers.common.user_code import StackTrainer, UserCode


class LocalConfig(StrictScalars, Section):
    """`trainstack:local`: run the trainer as processes on this machine."""

    workers: int = Field(default=2, ge=1, le=MAX_LOCAL_WORKERS)
    root: str | None = None
    """Holds the local stand-ins for the buckets; relative to the stack's base folder
    (`trainstack.infra.project`). Default: the run's own `<project>/.trainstack/local/<key>`."""


def _local(cfg: StackView) -> LocalConfig:
    return cast(LocalConfig, cfg.compute)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


LOCAL_RUN: Final = "pulumi-python:dynamic/local:TrainingRun"


def planned_checkpoint_dir(inputs: Mapping[str, Any]) -> str | None:
    """The local run's checkpoint folder: trainers/local.py prepare_run and
    trainers/local_code.py take the trainer's own checkpoint_dir, else
    <root>/checkpoints/<run_name>."""
    trainer = inputs.get("trainer") or {}
    if trainer.get("checkpoint_dir"):
        return str(trainer["checkpoint_dir"])
    if inputs.get("root") and trainer.get("run_name"):
        return f"{inputs['root']}/checkpoints/{trainer['run_name']}"
    return None


def local_lines(inputs: Mapping[str, Any]) -> list[str]:
    trainer = inputs.get("trainer")
    trainer = trainer if isinstance(trainer, Mapping) else {}
    workers = f"{number(inputs.get('workers'))} workers on this machine run"
    if "entrypoint" in trainer:
        entrypoint = trainer["entrypoint"]
        command = (
            shlex.join(str(a) for a in entrypoint) if isinstance(entrypoint, list) else entrypoint
        )
        source = f" {trainer['source']}" if trainer.get("source") else ""
        # No launcher given: the local target's default (`Local.default_launcher`).
        launcher = trainer.get("launcher", DEFAULT_LAUNCHER)
        return [f"{workers} your code{source}: {command} (launcher {launcher})"]
    bundled = (
        f"{workers} the bundled {trainer.get('framework')} trainer: strategy "
        f"{trainer.get('strategy')}, model {trainer.get('model')} on {trainer.get('dataset')}, "
        f"{number(trainer.get('steps'))} steps, global batch "
        f"{number(trainer.get('global_batch_size'))}"
    )
    return [bundled]


class Local(StandaloneTarget):
    name = "local"
    section = "local"
    run_resources = (
        # base_dir only resolves a relative root when processes start; diff never reads it.
        RunResource(
            LOCAL_RUN,
            ("trainstack.components._local_provider", "LocalRunProvider", {"base_dir": "."}),
            local_lines,
            checkpoint_dir=planned_checkpoint_dir,
            checkpoint_first=True,
            settings=lambda inputs: inputs.get("trainer"),
        ),
    )
    model = LocalConfig

    def section_problems(
        self, section: LocalConfig, region: str | None, trainer: StackTrainer | None
    ) -> list[str]:
        return []  # pydantic checks every key; nothing here depends on the catalog

    def world_size(self, section: LocalConfig, trainer: TrainConfig) -> WorldSize:
        return local_world_size(trainer.framework, trainer.strategy, section.workers)

    def summary(self, cfg: StackView) -> dict[str, Any]:
        return {"tpu_chips": 0, "gpus": 0, "machines": _local(cfg).workers, "hourly_usd": 0.0}

    def run_limit(self, cfg: StackView, seconds: int) -> tuple[bool, str]:
        return False, "not enforced: the local runner ignores it; stop it with Ctrl-C or SIGTERM"

    def runs_on(self, cfg: StackView, code: UserCode) -> str:
        return LOCAL_RUNS_ON

    def local_run_root(self, cfg: StackView) -> str | None:
        return _local(cfg).root

    def local_run_workers(self, cfg: StackView) -> int | None:
        return _local(cfg).workers

    def code_world_size(self, cfg: StackView, code: UserCode) -> int:
        return _local(cfg).workers

    def compose_alone(
        self, cfg: StackView, deployment: str, labels: Mapping[str, str]
    ) -> dict[str, Any]:
        local = _local(cfg)
        # The trainer config, run name and folder of `trainstack local-run` (local_paths), so
        # either resumes the other's; processes start on `pulumi up`, stop on destroy.
        trainer = cfg.trainer.model_copy(update={"run_name": run_name(cfg, deployment)})
        root = local_root_arg(deployment, local.root)
        local_args: LocalTrainingJobArgs = {
            "trainer": trainer,
            "workers": local.workers,
            "root": root,
            "base_dir": str(current_place().base_dir),  # where `trainer.source` was checked
            "labels": labels,
        }
        job = LocalTrainingJob(f"{deployment}-job", local_args)
        return {
            OUTPUT_TARGET: "local",
            OUTPUT_LOCAL_ROOT: root,
            OUTPUT_LOCAL_PIDS: job.pids,
            OUTPUT_LOCAL_LOG: job.log_path,
            OUTPUT_LOCAL_CHECKPOINT_DIR: job.checkpoint_dir,
            OUTPUT_JOB_STATE: job.state,
        }

    def status_alone(
        self, cfg: StackView, stack: str, outputs: dict[str, Any] | None
    ) -> dict[str, Any]:
        log = local_log_path(cfg, stack, outputs, _local(cfg).root)
        step, done, failed, exit_code = None, False, False, None
        if log.is_file():
            # The log keeps every run of the stack: only the newest attempt's records count.
            for line in file_lines(FileLogs(log, None), follow=False, poll_s=0):
                record = line_record(line)
                if not isinstance(record, dict):
                    continue
                event = record.get(FIELD_EVENT)
                if event in (EVENT_START, EVENT_RESUME, EVENT_LAUNCH):
                    done, failed, exit_code = False, False, None
                elif event in (EVENT_TRAIN, EVENT_DONE):
                    found = record.get(FIELD_STEP)
                    is_step = isinstance(found, int) and not isinstance(found, bool)
                    step = found if is_step else step  # a garbled record's step is none
                    done = done or event == EVENT_DONE
                elif event == EVENT_FAILED:
                    failed = True
                elif event == EVENT_EXIT and isinstance(record.get("exit_code"), int):
                    exit_code = record["exit_code"]
        ckpt_dir = local_checkpoint_dir(cfg, stack, outputs, _local(cfg).root)
        pids = [int(p) for p in (outputs or {}).get("local_pids") or [] if str(p).isdigit()]
        hosts = [
            {
                "name": f"worker {i}",
                "state": "running" if _alive(p) else "exited",
                "address": f"pid {p}",
            }
            for i, p in enumerate(pids)
        ]
        holder = RunHolder.read(running_pid_file(log))
        if holder is not None and holder.by == LOCAL_RUN_HOLDER and holder.alive():
            # `trainstack local-run`: one launcher process supervising the workers; a pid the
            # OS has given to another process since does not count (its start time differs).
            # The processes `pulumi up` started are the outputs' `local_pids`, listed above.
            hosts.append({"name": "local-run", "state": "running", "address": f"pid {holder.pid}"})
        running = any(h["state"] == "running" for h in hosts)
        if running:
            state = "RUNNING"
        elif exit_code is not None:
            # `local-run` said how the attempt ended: 143/130 stopped (resumable), others failed.
            stopped = exit_code in (PREEMPTED_EXIT_CODE, INTERRUPTED_EXIT_CODE)
            state = "SUCCEEDED" if exit_code == 0 else "STOPPED" if stopped else "FAILED"
        elif failed:
            state = "FAILED"
        else:
            state = "SUCCEEDED" if done else "STOPPED" if log.is_file() else "NOT_STARTED"
        return {
            "state": state,
            "hosts": hosts,
            "started": None,
            "ended": None,
            "step": step,
            # The bundled trainers' folders count once complete; your code's marker is its own.
            "checkpoint": on_storage(
                ckpt_dir,
                "read its checkpoints",
                lambda: newest_marked(ckpt_dir, strict=cfg.trainer.user_code is None),
            ),
            "checkpoint_dir": ckpt_dir,
        }

    def log_file(
        self, cfg: StackView, stack: str, outputs_file: Path | None, worker: int | None
    ) -> Path:
        check_worker(worker, _local(cfg).workers, stack)
        outputs = read_outputs(stack, outputs_file) if outputs_file else None
        return local_log_path(cfg, stack, outputs, _local(cfg).root)


TARGET = Local()
