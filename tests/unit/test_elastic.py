"""`python -m trainers.elastic`: torchrun whose lost rendezvous is a retryable exit."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from trainers.common.exit_codes import SETUP_FAILED_EXIT_CODE

pytest.importorskip("torch")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_store_that_is_gone_exits_3_not_1() -> None:
    # Node 0 (the store host) is gone: what a surviving node's torchrun meets on restart.
    argv = [
        sys.executable,
        "-m",
        "trainers.elastic",
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
    assert done.returncode == SETUP_FAILED_EXIT_CODE, done.stderr[-2000:]
    assert "trainstack-elastic: rendezvous lost (RendezvousConnectionError: " in done.stderr
    assert "so the platform starts this node again" in done.stderr


def test_a_worker_that_fails_still_exits_1() -> None:
    argv = [
        sys.executable,
        "-m",
        "trainers.elastic",
        "--standalone",
        "--nnodes=1",
        "--nproc-per-node=1",
        "--max-restarts=0",
        "-m",
        "trainers_no_such_module",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "trainstack-elastic" not in done.stderr
