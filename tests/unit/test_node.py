"""The node launcher: what each platform's machine runs, and its exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainstack.trainers.node import (
    Request,
    check_trainer_args,
    exit_code,
    node_command,
    parse_args,
)

REPO = Path(__file__).resolve().parents[2]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
ELASTIC = [sys.executable, "-m", "trainstack.trainers.elastic"]
# Vertex's documented CLUSTER_SPEC (gcp-facts 3.3): a chief and two workers on port 2222.
CLUSTER = {
    "workerpool0": ["cmle-training-workerpool0-ab-0:2222"],
    "workerpool1": ["cmle-training-workerpool1-ab-0:2222", "cmle-training-workerpool1-ab-1:2222"],
}


def _vertex(pool: str, index: int, **extra: str) -> dict[str, str]:
    node = index + (1 if pool == "workerpool1" else 0)
    return {
        "CLUSTER_SPEC": json.dumps(
            {"cluster": CLUSTER, "environment": "cloud", "task": {"type": pool, "index": index}}
        ),
        # What Vertex reportedly sets per node (facts-13 section 2): torchrun must win.
        "MASTER_ADDR": "cmle-training-workerpool0-ab-0",
        "MASTER_PORT": "2222",
        "WORLD_SIZE": "3",
        "RANK": str(node),
        **extra,
    }


def test_a_vertex_worker_runs_torchrun_with_one_process_per_gpu() -> None:
    env = _vertex("workerpool1", 1, TRAINSTACK_SIMULATED_ACCELERATORS="8")
    command = node_command(parse_args(["trainstack.trainers.torch_ddp", "--steps=10"]), env)
    assert command.launcher == "torchrun"
    assert command.argv == [
        *ELASTIC,
        "--nnodes=3",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=cmle-training-workerpool0-ab-0:2222",
        "--rdzv-id=trainstack",
        "--rdzv-conf=is_host=0,join_timeout=1800,read_timeout=1800",
        "--max-restarts=0",
        "--nproc-per-node=8",
        "-m",
        "trainstack.trainers.elastic",
        "--worker",
        "trainstack.trainers.torch_ddp",
        "--steps=10",
    ]
    assert (command.accelerators, command.processes) == (8, 8)
    added = {k: v for k, v in command.env.items() if env.get(k) != v}
    assert added == {
        "TRAINSTACK_NODE_RANK": "2",
        "TRAINSTACK_NUM_NODES": "3",
        "TRAINSTACK_ACCELERATORS_PER_NODE": "8",
        "TRAINSTACK_COORDINATOR": "cmle-training-workerpool0-ab-0:2222",
        "PYTHONUNBUFFERED": "1",
        "CUDA_VISIBLE_DEVICES": "",
        "TRAINSTACK_TF_CPU_REPLICAS": "8",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "2",
    }


def test_tensorflow_runs_once_per_machine_with_the_platform_env() -> None:
    env = _vertex("workerpool0", 0, TRAINSTACK_SIMULATED_ACCELERATORS="2", TF_CONFIG="{}")
    command = node_command(parse_args(["trainstack.trainers.tf_multiworker", "--steps=3"]), env)
    assert command.launcher == "node"
    assert command.argv == [sys.executable, "-m", "trainstack.trainers.tf_multiworker", "--steps=3"]
    assert (command.accelerators, command.processes) == (2, 1)
    assert command.env["TF_CONFIG"] == "{}"
    assert command.env["TRAINSTACK_NODE_RANK"] == "0"


def test_users_argv_under_torchrun_and_node() -> None:
    env = {
        "JOB_COMPLETION_INDEX": "1",
        "TRAINSTACK_NUM_NODES": "2",
        "JOB_NAME": "train",
        "TRAINSTACK_HEADLESS_SERVICE": "train-svc",
        "TRAINSTACK_SIMULATED_ACCELERATORS": "4",
    }
    torchrun = node_command(
        parse_args(["--launcher=torchrun", "--", "python", "train.py", "--lr=1"]), env
    )
    assert torchrun.argv == [
        *ELASTIC,
        "--nnodes=2",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=train-0.train-svc:29500",
        "--rdzv-id=trainstack",
        "--rdzv-conf=is_host=0,join_timeout=1800,read_timeout=1800",
        "--max-restarts=0",
        "--nproc-per-node=4",
        "--no-python",
        *USER_CODE,
        "python",
        "train.py",
        "--lr=1",
    ]
    node = node_command(parse_args(["--launcher=node", "--", "python", "train.py"]), env)
    assert (node.launcher, node.argv, node.processes) == (
        "node",
        [*USER_CODE, "python", "train.py"],
        1,
    )
    assert node.env["TRAINSTACK_COORDINATOR"] == "train-0.train-svc:29500"


USER_CODE = [sys.executable, "-m", "trainstack.trainers.user_code", "--"]


def test_a_machine_outside_any_cluster_runs_torchrun_standalone() -> None:
    request = parse_args(["--procs-per-node=3", "trainstack.trainers.torch_ddp"])
    command = node_command(request, {"TRAINSTACK_SIMULATED_ACCELERATORS": "2"})
    assert command.argv == [
        *TORCHRUN,
        "--standalone",
        "--nnodes=1",
        "--nproc-per-node=3",
        "-m",
        "trainstack.trainers.torch_ddp",
    ]
    assert command.env["TRAINSTACK_COORDINATOR"] == "127.0.0.1:29500"


def test_servers_outside_the_training_group_run_the_target_once() -> None:
    spec = {
        "cluster": {**CLUSTER, "workerpool2": ["cmle-training-workerpool2-ab-0:2222"]},
        "task": {"type": "workerpool2", "index": 0},
    }
    env = {"CLUSTER_SPEC": json.dumps(spec), "TRAINSTACK_SIMULATED_ACCELERATORS": "1"}
    command = node_command(parse_args(["trainstack.trainers.torch_ddp"]), env)
    assert (command.launcher, command.argv) == (
        "node",
        [sys.executable, "-m", "trainstack.trainers.torch_ddp"],
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "nothing to run; usage: python -m trainstack.trainers.node"),
        (["--launcher=mpi", "m"], "--launcher: 'mpi' is not allowed; valid: auto, torchrun, node"),
        (["--procs-per-node=0", "m"], "--procs-per-node: '0' is not allowed; valid: an integer"),
        (["--gpus=2", "m"], "unknown option '--gpus'; usage: python -m trainstack.trainers.node"),
        (["--"], "nothing to run after '--'; usage:"),
        (["--", "python"], "--launcher: 'auto' needs a MODULE; valid with '--': torchrun, node"),
    ],
)
def test_usage_errors(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError) as error:
        parse_args(argv)
    assert str(error.value).startswith(message)


def test_trainer_args_are_checked_against_the_world_before_anything_starts() -> None:
    env = _vertex("workerpool0", 0, TRAINSTACK_SIMULATED_ACCELERATORS="2")
    request = parse_args(["trainstack.trainers.torch_ddp", "--global_batch_size=32"])
    with pytest.raises(ValueError) as error:
        check_trainer_args(request, node_command(request, env))
    assert str(error.value) == (
        "global_batch_size (32) must be divisible by world size (6) x grad_accum_steps (1)"
    )
    bad = parse_args(["trainstack.trainers.tf_multiworker", "--stepz=3"])
    with pytest.raises(ValueError, match=r"^unknown trainer key 'stepz'; valid keys: "):
        check_trainer_args(bad, node_command(bad, env))
    # Users' code has its own flags: nothing is checked.
    own = Request("torchrun", None, "my_pkg.train", ["--whatever"])
    check_trainer_args(own, node_command(own, env))


@pytest.mark.parametrize(
    ("status", "terminated", "started", "preempted", "expected"),
    [
        (0, False, True, False, 0),
        (0, True, True, True, 0),  # finished before the signal mattered
        (1, False, True, False, 1),  # torchrun: a worker failed after training started
        (1, False, False, False, 3),  # nothing started: rendezvous or startup, retryable
        (2, False, False, False, 2),  # invalid config
        (1, False, True, True, 1),  # torchrun tore the others down after one rank failed
        (143, False, True, True, 143),  # the target itself saved and stopped after SIGTERM
        (-15, True, True, False, 143),  # SIGTERM reached this machine
        (-9, False, True, False, 137),
        (4, False, False, False, 4),  # a peer or pod 0's store lost before training started
        (4, False, True, True, 4),  # ... or after a peer was preempted and this one saved
        (5, False, False, False, 5),  # fewer usable accelerators than the plan bought
        (6, False, True, False, 6),  # saved and stopped: the machine's capacity ends
        (6, False, False, False, 6),  # ... a resumed run stopped before its first step
    ],
)
def test_exit_codes(
    status: int, terminated: bool, started: bool, preempted: bool, expected: int
) -> None:
    assert exit_code(status, terminated=terminated, started=started, preempted=preempted) == (
        expected
    )


def test_the_elastic_agents_code_error_before_training_stays_a_code_error() -> None:
    # trainstack.trainers.elastic already told a worker that raised (1) from a lost peer (4).
    assert exit_code(1, terminated=False, started=False, preempted=False, classified=True) == 1
    assert exit_code(3, terminated=False, started=False, preempted=False, classified=True) == 3


def _launch(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainstack.trainers.node", *argv],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), **(env or {})},
        timeout=60,
    )


def test_the_launcher_maps_its_targets_exit_status() -> None:
    sim = {"TRAINSTACK_SIMULATED_ACCELERATORS": "1"}
    code = 'import sys; print(\'{"event": "train"}\'); sys.exit(5)'
    failed = _launch("--launcher=node", "--", sys.executable, "-c", code, env=sim)
    assert failed.returncode == 5
    # Your code's failure is its own exit code, with its last lines (never "setup failed").
    assert [json.loads(line) for line in failed.stdout.splitlines()] == [
        {"event": "launch", "rank": 0, "argv": [Path(sys.executable).name, "-c", code]},
        {"event": "train"},
        {"event": "failed", "rank": 0, "exit_code": 5, "last_lines": ['{"event": "train"}']},
    ]
    early = _launch("--launcher=node", "--", sys.executable, "-c", "raise SystemExit(5)", env=sim)
    assert early.returncode == 5
    assert early.stderr.splitlines()[-1] == "trainstack-node: exit 5 (target exit 5)"
    missing = _launch("--launcher=node", "--", "/nonexistent/python", env=sim)
    assert missing.returncode == 3
    preempted = _launch("--launcher=node", "--", sys.executable, "-c", "exit(143)", env=sim)
    assert preempted.returncode == 143
    assert preempted.stdout.splitlines()[-1] == '{"event": "preempted", "rank": 0, "step": null}'
    # Code that says itself where it stopped gets no second, step-less line from us.
    saved = 'print(\'{"event": "preempted", "rank": 0, "step": 7}\'); exit(143)'
    said = _launch("--launcher=node", "--", sys.executable, "-c", saved, env=sim)
    assert said.returncode == 143
    assert said.stdout.splitlines()[1:] == ['{"event": "preempted", "rank": 0, "step": 7}']
    bad = _launch("trainstack.trainers.torch_ddp", "--steps=x", env=sim)
    assert bad.returncode == 2
    assert bad.stderr.startswith("trainstack-node: invalid trainer config: steps: ")
    unset = _launch(
        "trainstack.trainers.torch_ddp", env={"TRAINSTACK_SIMULATED_ACCELERATORS": "zero"}
    )
    assert (unset.returncode, unset.stderr) == (
        2,
        "trainstack-node: TRAINSTACK_SIMULATED_ACCELERATORS: 'zero' is not an integer >= 1\n",
    )


def test_the_launcher_imports_the_standard_library_only() -> None:
    script = (
        "import json, sys, trainstack.trainers.node\n"
        "heavy = ('pydantic', 'yaml', 'numpy', 'fsspec', 'torch', 'tensorflow')\n"
        "print(json.dumps(sorted(m for m in heavy if m in sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == []


def test_multi_node_torchrun_is_elastic_with_the_store_on_node_0() -> None:
    env = {
        "TRAINSTACK_NODE_RANK": "0",
        "TRAINSTACK_NUM_NODES": "2",
        "TRAINSTACK_COORDINATOR": "exp-42-a100-0:29500",
        "TRAINSTACK_SIMULATED_ACCELERATORS": "2",
    }
    command = node_command(parse_args(["trainstack.trainers.torch_ddp", "--steps=10"]), env)
    assert command.argv == [
        *ELASTIC,
        "--nnodes=2",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=exp-42-a100-0:29500",
        "--rdzv-id=trainstack",
        "--rdzv-conf=is_host=1,join_timeout=1800,read_timeout=1800",
        "--max-restarts=0",
        "--nproc-per-node=2",
        "-m",
        "trainstack.trainers.elastic",
        "--worker",
        "trainstack.trainers.torch_ddp",
        "--steps=10",
    ]


def test_one_node_of_a_cluster_keeps_the_static_rendezvous() -> None:
    env = {"TRAINSTACK_NODE_RANK": "0", "TRAINSTACK_NUM_NODES": "1"}
    command = node_command(parse_args(["--procs-per-node=2", "trainstack.trainers.torch_ddp"]), env)
    assert command.argv == [
        *TORCHRUN,
        "--nnodes=1",
        "--node-rank=0",
        "--master-addr=127.0.0.1",
        "--master-port=29500",
        "--nproc-per-node=2",
        "-m",
        "trainstack.trainers.torch_ddp",
    ]
