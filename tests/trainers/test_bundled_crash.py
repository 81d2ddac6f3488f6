"""The bundled torch trainer failing in a local run shows each failing rank's last lines,
as your own code's failure does (`tests/trainers/test_own_code.py`), not only torchrun's
summary. One real two-worker run, about 15 s (torch's import in each process)."""

from __future__ import annotations

from pathlib import Path

from tests.trainers.local_cli import finish, local_run


def test_a_bundled_trainer_crash_shows_the_failing_ranks_last_lines(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    shards.mkdir()
    config = tmp_path / "Pulumi.crash.yaml"
    config.write_text(
        "config:\n"
        f"  trainstack:local: {{workers: 2, root: {tmp_path / 'root'}}}\n"
        "  trainstack:trainer: {framework: torch, model: gpt, dataset: files, "
        f"data_path: {shards}, steps: 20, global_batch_size: 8}}\n"
    )
    code, _, err = finish(local_run(config), timeout=180)
    assert code == 1, err
    lines = err.splitlines()
    assert "trainstack local-run crash: failed with exit code 1 at step 0" in lines
    error = f"  ValueError: data_path {str(shards)!r} holds no .npz shards"
    # Both ranks fail alike; torchrun may stop the second with SIGTERM before it says so.
    headers = [i for i, line in enumerate(lines) if line.endswith(" its last output lines:")]
    assert headers
    assert {lines[i] for i in headers} <= {
        f"rank {rank} exited 1; its last output lines:" for rank in (0, 1)
    }
    for start in headers:
        # The traceback's last line ends the rank's block.
        end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("  "))
        assert lines[end - 1] == error
        assert end - start - 1 <= 20
