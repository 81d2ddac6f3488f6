"""Training stall per checkpoint save, async against synchronous, on local disk and GCS (CPU).

    python benchmarks/checkpoint_stall.py [--targets local,gcs] [--strategies ddp,fsdp]
        [--dim 1024 --layers 4]                         # prints one JSON object

The bundled torch trainer (`trainstack.trainers.torch_ddp`, torchrun, 2 ranks, gloo, one thread each)
trains the bundled GPT at a width whose model state is over 500 MB: with `--dim 1024
--layers 4` (byte vocabulary, context 16) it has 50.7M fp32 parameters, and the state a
resume needs, parameters plus AdamW's two moments, is 608 MB. That state is what every save
writes (plus the step and RNG states); `bytes_written` is measured on the committed step
directory. Each run saves every `checkpoint_every` steps and is stopped with SIGKILL once its
measured saves are committed, so the trainer's final save (always synchronous) and its
evaluation are not waited for. `gcs` is a gcp-storage-emulator on this machine (in memory,
about 45 MB/s for uploads), reached through gcsfs exactly as gs:// on Google Cloud. The
whole run takes about 7 minutes on a 2-core machine, most of it the emulator's uploads and
the FSDP steps; `--targets local` about 3.

Per save: `stall_s` is the time the training loop was blocked by the save, the largest over
the ranks (the ranks wait for each other at the next gradient reduction anyway); it is the
trainer's own `checkpoint` record. For an async save that is the RNG gather, the hand-off
and whatever was left of the copy of the state when the next optimizer step needed it (the
copy runs while the next step's forward and backward compute). `write_s` is rank 0's
`checkpoint_written` record: from the start of the save to the commit. The first async save
of a run also allocates the staging buffers (on the copy thread), so it can stall longer
(`async_first_save_stall_s`). Each summary figure is the median over the measured saves;
`ratio` is async over synchronous stall (goal: <= 0.10 on local disk). `steady_step_time_s` is the median step time of the run's log windows without a
save, for the cost of writing in the background: on this 2-core machine the writer thread
competes with the 2 training ranks for the cores.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from trainstack.trainers.common.signals import descendants
from trainstack.trainers.local import torchrun_command

REPO = Path(__file__).resolve().parents[1]
BUCKET = "trainstack-bench"
# Saves measured per run, and steps between saves: on local disk enough for an async write
# to finish before the next save and for step times without a save; on the emulator, whose
# uploads take about 15 s per save, one save per run.
PLAN = {"local": (3, 3), "gcs": (1, 1)}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--targets", default="local,gcs")
    p.add_argument("--strategies", default="ddp,fsdp")
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--vocab", type=int, default=256)
    return p.parse_args(argv)


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"PYTHONUNBUFFERED": "1", "TRAINSTACK_PROGRESS": "0", "OMP_NUM_THREADS": "1"})
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    env.update(extra)
    return env


def _records(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        if line.startswith("{"):
            with contextlib.suppress(json.JSONDecodeError):
                out.append(json.loads(line))
    return out


def _measured(records: list[dict[str, Any]], saves: int) -> bool:
    periodic = [r for r in records if r["event"] == "checkpoint" and r.get("reason") is None]
    written = [r for r in records if r["event"] == "checkpoint_written"]
    return len(periodic) >= 2 * saves and len(written) >= saves


def run_trainer(
    args: argparse.Namespace,
    *,
    strategy: str,
    async_save: bool,
    url: str,
    saves: int,
    every: int,
    env: dict[str, str],
    log: Path,
) -> list[dict[str, Any]]:
    """Train until `saves` periodic saves are committed, then SIGKILL the run."""
    cmd = torchrun_command(
        2,
        "-m",
        "trainstack.trainers.torch_ddp",
        "--model=gpt",
        "--dataset=synthetic",
        "--synthetic_samples=64",
        f"--gpt_dim={args.dim}",
        f"--gpt_layers={args.layers}",
        f"--gpt_heads={args.heads}",
        f"--seq_len={args.seq}",
        f"--vocab_size={args.vocab}",
        "--global_batch_size=2",
        f"--steps={every * (saves + 2)}",
        f"--checkpoint_every={every}",
        "--keep_checkpoints=1",
        "--log_every=1",
        f"--strategy={strategy}",
        f"--async_checkpoint={async_save}",
        f"--checkpoint_dir={url}",
    )
    with log.open("w") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_env(env),
            cwd=REPO,
            start_new_session=True,
        )
        try:
            while not _measured(_records(log), saves):
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"{' '.join(cmd)} exited {proc.returncode}:\n{log.read_text()[-3000:]}"
                    )
                time.sleep(0.2)
        finally:
            for pid in [*descendants(proc.pid), proc.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            proc.wait()
    return _records(log)


def _bytes_written(url: str) -> int:
    from trainstack.trainers.common.checkpoint import CheckpointStore, step_name

    store = CheckpointStore(url, keep=1)
    latest = store.latest()
    if latest is None:
        raise RuntimeError(f"{url} holds no complete checkpoint")
    return int(store.fs.du(store.path(step_name(latest))))


def summarize(records: list[dict[str, Any]], saves: int) -> dict[str, Any]:
    periodic = [r for r in records if r["event"] == "checkpoint" and r.get("reason") is None]
    written = {r["step"]: r["write_s"] for r in records if r["event"] == "checkpoint_written"}
    steps = sorted({r["step"] for r in periodic})[:saves]
    per_save = [
        {
            "step": step,
            "stall_s": max(r["stall_s"] for r in periodic if r["step"] == step),
            "stall_s_per_rank": [
                r["stall_s"] for r in sorted(periodic, key=lambda r: r["rank"]) if r["step"] == step
            ],
            "write_s": written.get(step),
        }
        for step in steps
    ]
    # Windows of one step each (log_every=1) that neither hold a save nor follow one.
    busy = {s for step in steps for s in (step, step + 1)}
    windows = [
        r["step_time_s"]
        for r in records
        if r["event"] == "train" and r["rank"] == 0 and r["step"] > 2 and r["step"] not in busy
    ]
    return {
        "saves": per_save,
        "stall_s": statistics.median(s["stall_s"] for s in per_save),
        "write_s": statistics.median(s["write_s"] for s in per_save),
        "steady_step_time_s": statistics.median(windows) if windows else None,
    }


@contextlib.contextmanager
def gcs_emulator() -> Any:
    """The GCS emulator with BUCKET, as the environment the trainers' gcsfs reads."""
    from tests.fakes.gcs_emulator import running_gcs_emulator

    with running_gcs_emulator(BUCKET) as host:
        saved = {
            k: os.environ.get(k)
            for k in ("STORAGE_EMULATOR_HOST", "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT")
        }
        os.environ["STORAGE_EMULATOR_HOST"] = host
        os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
        try:
            yield {"STORAGE_EMULATOR_HOST": host, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def model_state(args: argparse.Namespace) -> dict[str, Any]:
    from trainstack.trainers.torch_ddp.models import GPT

    model = GPT(args.vocab, args.seq, args.dim, args.layers, args.heads)
    params = sum(p.numel() for p in model.parameters())
    return {
        "model": "gpt",
        "vocab_size": args.vocab,
        "seq_len": args.seq,
        "gpt_dim": args.dim,
        "gpt_layers": args.layers,
        "gpt_heads": args.heads,
        "params": params,
        "param_bytes": 4 * params,
        "state_bytes": 12 * params,
        "state": "fp32 parameters + AdamW exp_avg + exp_avg_sq (what a resume needs)",
    }


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    started = time.perf_counter()
    results: dict[str, Any] = {}
    summary: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="trainstack-ckpt-bench-") as tmp:
        for target in args.targets.split(","):
            saves, every = PLAN[target]
            ctx = gcs_emulator() if target == "gcs" else contextlib.nullcontext({})
            with ctx as env:
                for strategy in args.strategies.split(","):
                    modes: dict[str, Any] = {}
                    for mode in ("sync", "async"):
                        name = f"{target}-{strategy}-{mode}"
                        url = f"gs://{BUCKET}/{name}" if target == "gcs" else f"{tmp}/{name}"
                        records = run_trainer(
                            args,
                            strategy=strategy,
                            async_save=mode == "async",
                            url=url,
                            saves=saves,
                            every=every,
                            env=env,
                            log=Path(tmp) / f"{name}.log",
                        )
                        modes[mode] = {
                            **summarize(records, saves),
                            "bytes_written": _bytes_written(url),
                        }
                    results.setdefault(target, {})[strategy] = modes
                    summary.setdefault(target, {})[strategy] = {
                        "sync_stall_s": modes["sync"]["stall_s"],
                        "async_stall_s": modes["async"]["stall_s"],
                        "ratio": modes["async"]["stall_s"] / modes["sync"]["stall_s"],
                        "async_first_save_stall_s": modes["async"]["saves"][0]["stall_s"],
                        "sync_write_s": modes["sync"]["write_s"],
                        "async_write_s": modes["async"]["write_s"],
                        "bytes_written": modes["sync"]["bytes_written"],
                    }
    local = summary.get("local", {})
    print(
        json.dumps(
            {
                "summary": summary,
                "goal_async_stall_le_10pct_local": (
                    {s: v["ratio"] <= 0.10 for s, v in local.items()} if local else None
                ),
                "runs": results,
                "model_state": model_state(args),
                "config": {
                    "ranks": 2,
                    "backend": "gloo",
                    "device": "cpu",
                    "threads_per_rank": 1,
                    "global_batch_size": 2,
                    "saves_and_steps_between": PLAN,
                    "cpus": os.cpu_count(),
                },
                "tensorflow": TENSORFLOW_NOTE,
                "wall_s": time.perf_counter() - started,
            }
        )
    )


TENSORFLOW_NOTE = (
    "not measured here; see trainers/tf_multiworker/checkpoint.py for what async_checkpoint "
    "does in the TensorFlow trainer"
)


if __name__ == "__main__":
    main()
