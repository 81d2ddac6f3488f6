"""Goodput of a local run preempted K times at random steps, per checkpoint interval (CPU).

    python benchmarks/goodput.py [--preemptions 3] [--steps 200] [--workers 2]
        [--checkpoint-every 10,50] [--seed 0] [--provisioning-delay-s 0] [--signals TERM,KILL]
                                                                    # prints one JSON object

For each checkpoint interval, the `local` stack (the bundled torch trainer: the CNN on the
digits, `--workers` torchrun processes on gloo, `log_every` 1) runs through the real CLI,
`trainstack local-run --config-file F --steps N --workers W`, once uninterrupted and once
preempted per signal:

- uninterrupted (`ideal_s`: the CLI's wall time, start to exit);
- preempted K times: once rank 0 has logged a step at or past each of K seeded random steps,
  the CLI gets a real SIGTERM (every worker saves and the CLI exits 143, as README says), and
  the same command is started again, which resumes from the newest checkpoint. `wall_s` runs
  from the first start to the final exit, `goodput` is `ideal_s / wall_s`.

Per preemption: `recovery_s` runs from the SIGTERM to rank 0's first `train` record after
the resume: the save at the signal, the processes' exit, a new CLI, torchrun and workers, the
checkpoint load and one step. Locally the signal is detected at once; on the cloud the
supervisor's polling and the new machine come on top. A simulated provisioning delay
(`--provisioning-delay-s`, a sleep between the exit and the restart, as a new VM would take)
counts in `wall_s` but not in `recovery_s`, and is reported as `provisioning_delay_s`.
`lost_steps` is the step rank 0 had trained to when the run stopped minus the step the next
start resumed from: the steps trained twice. The trainer saves at the step it stops at on
SIGTERM (`trainers/torch_ddp/train.py`, `_Trainer.run`), so the expected value is 0 at any
interval. `--signals KILL` preempts with SIGKILL instead (one preempted run per signal, per
interval): nothing is saved, as when a node is lost, so the run resumes from the newest
periodic save and the interval decides the lost work (about half of it at random steps).

`recovery_overhead_s` is the median of `recovery_s` and `lost_steps_per_preemption` the mean
of `lost_steps`; the goals (issue 24) are at most 30 s and at most half the checkpoint
interval. `params_match` compares the final `params_sha256` of both runs: a resumed run must
end with the uninterrupted run's parameters bit for bit. The defaults take 4 to 7 minutes on a
2-core machine, depending on other load; `--signals TERM,KILL` half as long again.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

import yaml
from checkpoint_stall import _records  # benchmarks/, beside this script
from torchrun_records import benchmark_env

from trainstack.trainers.common.signals import descendants

REPO = Path(__file__).resolve().parents[1]
STACK = REPO / "stacks" / "Pulumi.local.yaml"
END_MARGIN = 10
"""No preemption in the last steps: the trainer stops a step or two after the signal (the
stop flag is all-reduced one step late), and the signal must land before the run finishes."""
POLL_S = 0.05
EXIT_TIMEOUT_S = 120.0
"""Longer than the launcher's own stop deadline (`preemption_grace_s` 30 s + 15 s)."""
SIGNALS = {"TERM": (signal.SIGTERM, 143), "KILL": (signal.SIGKILL, -signal.SIGKILL)}
"""The signal each preemption sends the CLI and the exit status it then ends with: SIGTERM
saves at the signal; SIGKILL saves nothing, as when a node is lost, so the run resumes from
the newest periodic checkpoint."""


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preemptions", type=int, default=3)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--checkpoint-every", default="10,50")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--provisioning-delay-s", type=float, default=0.0)
    p.add_argument("--signals", default="TERM")
    args = p.parse_args(argv)
    if args.preemptions < 1:
        p.error(f"--preemptions must be >= 1, got {args.preemptions}")
    if args.steps - END_MARGIN <= args.preemptions:
        p.error(f"--steps must be > --preemptions + {END_MARGIN}, got {args.steps}")
    if args.provisioning_delay_s < 0:
        p.error(f"--provisioning-delay-s must be >= 0, got {args.provisioning_delay_s}")
    try:
        args.intervals = [int(v) for v in args.checkpoint_every.split(",")]
    except ValueError:
        p.error(f"--checkpoint-every must be comma-separated integers, got {args.checkpoint_every}")
    if any(v < 1 for v in args.intervals):
        p.error(f"--checkpoint-every values must be >= 1, got {args.checkpoint_every}")
    args.signal_names = args.signals.split(",")
    if not set(args.signal_names) <= set(SIGNALS):
        p.error(
            f"--signals must be a comma-separated subset of {','.join(SIGNALS)}, got {args.signals}"
        )
    return args


def preemption_steps(seed: int, steps: int, count: int) -> list[int]:
    """`count` distinct steps in [1, steps - END_MARGIN), sorted: where the signals go."""
    return sorted(random.Random(seed).sample(range(1, steps - END_MARGIN), count))


def segments(records: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Rank 0's records of one run name, split into its CLI runs. Each run's rank 0 begins
    with `resume` (when it resumed) and then `start`; a killed CLI writes no `exit` record,
    so that is what marks the runs."""
    out: list[list[dict[str, Any]]] = []
    for r in records:
        if r.get("rank") != 0:
            continue
        event = r.get("event")
        if not out or event == "resume" or (event == "start" and out[-1][-1]["event"] != "resume"):
            out.append([])
        out[-1].append(r)
    return out


def _rank0(records: list[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    return [r for r in records if r.get("event") == event and r.get("rank") == 0]


def preemption_figures(
    records: list[dict[str, Any]], signal_times: list[float], provisioning_delay_s: float
) -> list[dict[str, Any]]:
    """One entry per SIGTERM, from the preempted run's log records (every CLI run of it) and
    the wall-clock times (`time.time()`, the records' clock) the signals were sent."""
    runs = segments(records)
    if len(runs) != len(signal_times) + 1:
        raise ValueError(
            f"{len(signal_times)} preemptions need {len(signal_times) + 1} CLI runs in the log, "
            f"found {len(runs)}"
        )
    out = []
    for sent, before, after in zip(signal_times, runs, runs[1:], strict=False):
        trained = [r["step"] for r in _rank0(before, "train")]
        at_step = max(trained, default=0)
        resume = _rank0(after, "resume")
        resumed_from = resume[0]["step"] if resume else 0
        first_step = _rank0(after, "train")[0]["time"]
        saved = [r for r in _rank0(before, "checkpoint") if r.get("reason") == "preemption"]
        out.append(
            {
                "preempted_at_step": at_step,
                "resumed_from_step": resumed_from,
                "lost_steps": at_step - resumed_from,
                "recovery_s": first_step - sent - provisioning_delay_s,
                # Where the recovery time goes: the save at the signal (none after SIGKILL),
                # the restart up to the checkpoint loaded, and the first step.
                "save_s": saved[0]["time"] - sent if saved else None,
                "restart_and_load_s": (
                    resume[0]["time"] - (saved[0]["time"] if saved else sent) - provisioning_delay_s
                    if resume
                    else None
                ),
                "first_step_s": first_step - resume[0]["time"] if resume else None,
            }
        )
    return out


def summarize(
    ideal: dict[str, Any],
    preempted: dict[str, Any],
    signal_times: list[float],
    provisioning_delay_s: float,
) -> dict[str, Any]:
    """The figures for one checkpoint interval. `ideal` and `preempted` hold `wall_s` and
    `records` (the run name's whole log)."""
    each = preemption_figures(preempted["records"], signal_times, provisioning_delay_s)
    ideal_done = _rank0(ideal["records"], "done")[-1]
    final_done = _rank0(segments(preempted["records"])[-1], "done")[-1]
    return {
        "preemptions": len(each),
        "ideal_s": ideal["wall_s"],
        "wall_s": preempted["wall_s"],
        "goodput": ideal["wall_s"] / preempted["wall_s"],
        "recovery_overhead_s": statistics.median(e["recovery_s"] for e in each),
        "provisioning_delay_s": provisioning_delay_s,
        "lost_steps_per_preemption": statistics.mean(e["lost_steps"] for e in each),
        "params_match": ideal_done["params_sha256"] == final_done["params_sha256"],
        "params_sha256": {
            "ideal": ideal_done["params_sha256"],
            "preempted": final_done["params_sha256"],
        },
        "each": each,
    }


def goals(intervals: list[dict[str, Any]]) -> dict[str, dict[str, bool]]:
    """Issue 24's aims, per signal over every interval: median recovery at most 30 s, and at
    most half a checkpoint interval of steps lost per preemption on average."""
    out: dict[str, dict[str, bool]] = {}
    for i in intervals:
        met = out.setdefault(
            i["signal"], {"recovery_overhead_le_30s": True, "lost_steps_le_half_interval": True}
        )
        met["recovery_overhead_le_30s"] &= i["recovery_overhead_s"] <= 30
        met["lost_steps_le_half_interval"] &= (
            i["lost_steps_per_preemption"] <= i["checkpoint_every"] / 2
        )
    return out


def write_stack(tmp: Path, run: str, every: int) -> Path:
    """The `local` stack as `Pulumi.<run>.yaml` (the run name), logging every step, saving
    every `every` steps, with `local.root` under `tmp`."""
    cfg = yaml.safe_load(STACK.read_text())
    cfg["config"]["trainstack:local"]["root"] = str(tmp / "root")
    cfg["config"]["trainstack:trainer"].update({"checkpoint_every": every, "log_every": 1})
    path = tmp / f"Pulumi.{run}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def _alive(pid: int) -> bool:
    """`pid` runs (a zombie does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def _log_records(log: Path) -> list[dict[str, Any]]:
    return _records(log) if log.exists() else []


class Runner:
    """Starts `trainstack local-run` for one stack file, as a person or scheduler would."""

    def __init__(self, config: Path, args: argparse.Namespace, stderr: IO[str]) -> None:
        self.config, self.args, self.stderr = config, args, stderr
        run = config.name.split(".")[1]
        self.log = config.parent / "root" / "logs" / f"{run}.jsonl"

    def start(self, *extra: str) -> subprocess.Popen[str]:
        cmd = [
            sys.executable,
            "-m",
            "trainstack.infra.cli",
            "local-run",
            "--config-file",
            str(self.config),
            "--steps",
            str(self.args.steps),
            "--workers",
            str(self.args.workers),
            *extra,
        ]
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.stderr,
            text=True,
            cwd=REPO,
            env={**benchmark_env(), "PYTHONPATH": str(REPO)},
            start_new_session=True,
        )

    def wait(self, proc: subprocess.Popen[str], expect: int) -> None:
        try:
            code = proc.wait(timeout=EXIT_TIMEOUT_S)
        finally:
            if proc.poll() is None:
                proc.kill()  # its workers die with it (parent-death signal)
                proc.wait()
        if code != expect:
            raise RuntimeError(
                f"local-run --config-file {self.config} exited {code}, expected {expect}; "
                f"see {self.stderr.name}"
            )

    def uninterrupted(self) -> dict[str, Any]:
        started = time.perf_counter()
        self.wait(self.start("--fresh"), 0)
        return {"wall_s": time.perf_counter() - started, "records": _log_records(self.log)}

    def preempted(
        self, targets: list[int], delay_s: float, name: str
    ) -> tuple[dict[str, Any], list[float]]:
        """Signal the CLI with SIGNALS[name] once rank 0 has trained to each target step (in
        a resumed run, at its first step when the target lies behind it), restart it once its
        processes are gone and `delay_s` has passed, and finally let it finish. Returns the
        run and the times the signals were sent."""
        sig, code = SIGNALS[name]
        signal_times: list[float] = []
        started = time.perf_counter()
        for i, target in enumerate(targets):
            seen = len(_log_records(self.log))
            workers: list[int] = []
            proc = self.start(*(["--fresh"] if i == 0 else []))
            try:
                while not any(
                    r["step"] >= target for r in _rank0(_log_records(self.log)[seen:], "train")
                ):
                    if proc.poll() is not None:
                        break
                    time.sleep(POLL_S)
                else:
                    workers = descendants(proc.pid)
                    signal_times.append(time.time())
                    proc.send_signal(sig)
            finally:
                self.wait(proc, code)
            # A killed CLI's workers follow it through the parent-death signal; the next
            # start must not meet them (a lost node's processes are gone too).
            while any(_alive(pid) for pid in workers):
                time.sleep(POLL_S)
            time.sleep(delay_s)
        self.wait(self.start(), 0)
        run = {"wall_s": time.perf_counter() - started, "records": _log_records(self.log)}
        return run, signal_times


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    started = time.perf_counter()
    targets = preemption_steps(args.seed, args.steps, args.preemptions)
    intervals = []
    with tempfile.TemporaryDirectory(prefix="trainstack-goodput-") as tmp_name:
        tmp = Path(tmp_name)
        with (tmp / "local-run.stderr.log").open("w") as err:
            for every in args.intervals:
                ideal = Runner(write_stack(tmp, f"ideal-{every}", every), args, err)
                ideal_run = ideal.uninterrupted()
                for name in args.signal_names:
                    config = write_stack(tmp, f"sig{name.lower()}-{every}", every)
                    run, signal_times = Runner(config, args, err).preempted(
                        targets, args.provisioning_delay_s, name
                    )
                    intervals.append(
                        {
                            "checkpoint_every": every,
                            "signal": f"SIG{name}",
                            **summarize(ideal_run, run, signal_times, args.provisioning_delay_s),
                        }
                    )
    print(
        json.dumps(
            {
                "intervals": intervals,
                "goals": goals(intervals),
                "config": {
                    "stack": "local (cnn on digits, torch DDP, gloo)",
                    "steps": args.steps,
                    "workers": args.workers,
                    "preemptions": args.preemptions,
                    "target_steps": targets,
                    "seed": args.seed,
                    "log_every": 1,
                    "provisioning_delay_s": args.provisioning_delay_s,
                    "cpus": os.cpu_count(),
                },
                "wall_s": time.perf_counter() - started,
            }
        )
    )


if __name__ == "__main__":
    main()
