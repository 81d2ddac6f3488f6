"""`python -m trainstack.trainers.elastic`: torchrun whose exit tells a lost peer (4) from a code
error (1), and its `--worker` wrapper that classifies what a worker raised."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from trainstack.trainers.common.exit_codes import CRASH_EXIT_CODE, PEER_LOST_EXIT_CODE
from trainstack.trainers.elastic import exit_code_for, peer_lost

pytest.importorskip("torch")

# What a surviving gloo rank raised here (torch 2.13) when its peer process died.
GLOO_RESET = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
    "[127.0.0.1]:56202: Connection reset by peer. This is typically caused by a remote "
    "worker hanging or bugs in the application."
)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_store_that_is_gone_exits_4_not_1() -> None:
    # Node 0 (the store host) is gone: what a surviving node's torchrun meets on restart.
    argv = [
        sys.executable,
        "-m",
        "trainstack.trainers.elastic",
        "--nnodes=2",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{_closed_port()}",
        "--rdzv-id=trainstack",
        "--rdzv-conf=is_host=0,read_timeout=1",
        "--nproc-per-node=1",
        "-m",
        "json.tool",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == PEER_LOST_EXIT_CODE, done.stderr[-2000:]
    assert "trainstack-elastic: rendezvous lost (RendezvousConnectionError: " in done.stderr
    assert "so the platform starts this node again" in done.stderr


@pytest.mark.parametrize(
    ("codes", "expected"),
    [
        ([4], 4),
        ([4, 143], 4),
        ([143, 143], 4),
        ([4, -signal.SIGTERM], 4),
        ([1, 4], 1),
        ([1], 1),
        ([-signal.SIGKILL], 1),
        ([-signal.SIGABRT, 4], 1),
        ([2, 4], 2),
        ([2, 1], 2),
        ([6, 6], 6),  # every worker saved for the capacity's end
        ([6, -signal.SIGTERM], 6),  # ... and torchrun stopped the slower one
        ([6, 143, 4], 6),
        ([6, 1], 1),  # a worker that raised is still a code error
        ([6, 2], 2),
        ([], 1),
    ],
)
def test_the_agents_exit_code_follows_its_failed_workers(codes: list[int], expected: int) -> None:
    assert exit_code_for(codes) == expected


def test_a_lost_peer_is_told_from_a_code_error() -> None:
    import torch.distributed as dist

    assert peer_lost(RuntimeError(GLOO_RESET))
    assert peer_lost(dist.DistNetworkError("failed to recv, got 0 bytes"))
    assert peer_lost(dist.DistStoreError("Socket Timeout"))
    try:
        try:
            raise RuntimeError(GLOO_RESET)
        except RuntimeError as exc:
            raise ValueError("checkpoint write failed") from exc
    except ValueError as wrapped:
        assert peer_lost(wrapped)
    assert not peer_lost(ValueError("shapes (3,) and (4,) do not match"))
    assert not peer_lost(RuntimeError("CUDA out of memory"))
    assert not peer_lost(ZeroDivisionError("division by zero"))


@pytest.mark.parametrize(
    ("body", "code", "said"),
    [
        ("raise ValueError('bad shapes')", CRASH_EXIT_CODE, "ValueError: bad shapes"),
        (f"raise RuntimeError({GLOO_RESET!r})", PEER_LOST_EXIT_CODE, "a peer is gone"),
        ("import sys; sys.exit(7)", 7, ""),
        ("print('ran', __name__)", 0, ""),
    ],
)
def test_worker_runs_the_module_as_main_and_classifies_what_it_raised(
    tmp_path: Path, body: str, code: int, said: str
) -> None:
    (tmp_path / "fake_trainer.py").write_text(body + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "trainstack.trainers.elastic", "--worker", "fake_trainer", "--x=1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PYTHONPATH": f"{tmp_path}:{Path.cwd()}", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == code, done.stderr[-2000:]
    assert said in done.stderr
    if code == 0:
        assert done.stdout == "ran __main__\n"


def one_worker_argv(module: str) -> list[str]:
    """A standalone one-process torchrun of `module` under the worker wrapper, as the node
    launcher starts the bundled trainers."""
    return [
        sys.executable,
        "-m",
        "trainstack.trainers.elastic",
        "--standalone",
        "--nnodes=1",
        "--nproc-per-node=1",
        "--max-restarts=0",
        "-m",
        "trainstack.trainers.elastic",
        "--worker",
        module,
    ]


def test_a_worker_that_fails_exits_1() -> None:
    argv = one_worker_argv("trainers_no_such_module")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == CRASH_EXIT_CODE, done.stderr[-2000:]
    assert "No module named trainers_no_such_module" in done.stderr
    assert "trainstack-elastic: workers failed (rank: exit code) {0: 1}; exit 1" in done.stderr
