"""Checkpoint atomicity, integrity and retention, in process (no torch.distributed)."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path

import google_crc32c
import numpy as np
import pytest
import torch

from trainstack.trainers.common.checkpoint import (
    MARKER,
    CheckpointStore,
    Cleared,
    Skipped,
    step_name,
)
from trainstack.trainers.torch_ddp.checkpoint import Checkpointer

pytestmark = pytest.mark.trainer


def _model() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    return model, opt


def test_incomplete_directories_are_never_loaded(tmp_path: Path) -> None:
    store = CheckpointStore(str(tmp_path), keep=3)
    ckpt = Checkpointer(str(tmp_path), keep=3, rank=0, world_size=1, sharded=False)
    model, opt = _model()
    ckpt.save(model, opt, step=5)
    # A folder without a marker (not one trainstack wrote: a local save appears with its
    # marker in one rename), and a save killed mid-write.
    (tmp_path / step_name(9)).mkdir()
    (tmp_path / step_name(9) / "state.pt").write_bytes(b"torn")
    (tmp_path / f"{step_name(12)}.tmp-0123abcd").mkdir()
    assert store.complete_steps() == [5]
    assert ckpt.latest_step() == 5
    # The next save clears trainstack's leftover and leaves the other folder.
    ckpt.save(model, opt, step=6)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        step_name(5),
        step_name(6),
        step_name(9),
    ]


def _two_saves(tmp_path: Path) -> tuple[Checkpointer, torch.nn.Module, torch.optim.Optimizer]:
    ckpt = Checkpointer(str(tmp_path), keep=3, rank=0, world_size=1, sharded=False)
    model, opt = _model()
    ckpt.save(model, opt, step=5)
    ckpt.save(model, opt, step=10)
    return ckpt, model, opt


def test_the_marker_records_every_payload_file_and_its_size(tmp_path: Path) -> None:
    _two_saves(tmp_path)
    folder = tmp_path / step_name(10)
    marker = json.loads((folder / MARKER).read_text())
    assert marker["files"] == {"state.pt": (folder / "state.pt").stat().st_size}
    crc = google_crc32c.Checksum((folder / "state.pt").read_bytes()).digest()
    assert marker["crc32c"] == {"state.pt": base64.b64encode(crc).decode()}
    assert sorted(p.name for p in folder.iterdir()) == [MARKER, "state.pt"]


def test_an_empty_marker_is_passed_over_and_the_run_resumes_the_step_before(
    tmp_path: Path,
) -> None:
    """What a full disk left before: the marker opened (created) and its write refused. The
    step is not complete; resuming goes to step 5 and says which step it passed over and
    why. The next save leaves the broken folder: an empty marker does not show that
    trainstack wrote it (a marker any other program left reads the same)."""
    ckpt, model, opt = _two_saves(tmp_path)
    (tmp_path / step_name(10) / MARKER).write_bytes(b"")
    assert ckpt.store.resume_point() == (
        5,
        [
            Skipped(
                10,
                step_name(10),
                "its COMPLETE marker is empty (a write cut short, e.g. by a full disk)",
            )
        ],
    )
    assert ckpt.latest_step() == 5
    assert ckpt.load(5, model, opt) == 5
    skipped = ckpt.store.resume_point()[1][0]
    assert skipped.line(str(tmp_path), 5) == (
        f"checkpoint {tmp_path}/step-00000010 skipped: its COMPLETE marker is empty (a write "
        "cut short, e.g. by a full disk); resuming from step 5"
    )
    ckpt.save(model, opt, step=6)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        step_name(5),
        step_name(6),
        step_name(10),
    ]


def test_a_truncated_state_file_under_an_intact_marker_is_passed_over(tmp_path: Path) -> None:
    """Told from the sizes the marker records, without loading the file: every retry
    resumes step 5 instead of crashing on step 10."""
    ckpt, model, opt = _two_saves(tmp_path)
    state = tmp_path / step_name(10) / "state.pt"
    size = state.stat().st_size
    state.write_bytes(state.read_bytes()[:100])
    assert ckpt.store.resume_point() == (
        5,
        [
            Skipped(
                10,
                step_name(10),
                f"state.pt holds 100 bytes where its COMPLETE marker records {size}",
            )
        ],
    )
    assert ckpt.latest_step() == 5
    assert ckpt.load(5, model, opt) == 5
    state.unlink()
    assert ckpt.store.resume_point()[1] == [
        Skipped(
            10, step_name(10), f"state.pt is missing (its COMPLETE marker records {size} bytes)"
        )
    ]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (
            b'{"step": 10, "committed',
            "its COMPLETE marker is not JSON (a write cut short, e.g. by a full disk)",
        ),
        (
            b"\xff\xfe\x00",
            "its COMPLETE marker is not JSON (a write cut short, e.g. by a full disk)",
        ),
        (b"[10]", "its COMPLETE marker holds no JSON object"),
    ],
)
def test_a_torn_marker_is_not_a_checkpoint(tmp_path: Path, text: bytes, reason: str) -> None:
    ckpt, _, _ = _two_saves(tmp_path)
    (tmp_path / step_name(10) / MARKER).write_bytes(text)
    assert ckpt.store.resume_point() == (5, [Skipped(10, step_name(10), reason)])


def test_a_marker_written_before_sizes_were_recorded_still_counts(tmp_path: Path) -> None:
    ckpt, _, _ = _two_saves(tmp_path)
    (tmp_path / step_name(10) / MARKER).write_text(json.dumps({"step": 10, "committed_at": 1.0}))
    assert ckpt.store.resume_point() == (10, [])


def test_clear_deletes_only_what_trainstack_wrote_and_names_the_rest(tmp_path: Path) -> None:
    ckpt, _, _ = _two_saves(tmp_path)
    state = tmp_path / step_name(10) / "state.pt"
    state.write_bytes(state.read_bytes()[:100])  # broken, but trainstack's
    (tmp_path / f"{step_name(15)}.tmp-0123abcd").mkdir()
    (tmp_path / step_name(20)).mkdir()  # no marker: someone else's
    (tmp_path / "notes.txt").write_text("mine")
    cleared = ckpt.store.clear()
    assert cleared == Cleared(
        [step_name(5), step_name(10), f"{step_name(15)}.tmp-0123abcd"], [step_name(20)]
    )
    assert cleared.left_line("/ck") == (
        "--fresh left step-00000020 in /ck: no COMPLETE marker, so not a checkpoint trainstack "
        "wrote; delete it yourself if it is not wanted"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", step_name(20)]
    assert ckpt.store.clear().left_line("/ck") == cleared.left_line("/ck")
    (tmp_path / step_name(20)).rmdir()
    assert ckpt.store.clear() == Cleared([], [])
    assert Cleared([], []).left_line("/ck") is None


def test_marker_is_what_makes_a_step_loadable(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), keep=3, rank=0, world_size=1, sharded=False)
    model, opt = _model()
    ckpt.save(model, opt, step=3)
    (tmp_path / step_name(3) / MARKER).unlink()
    assert ckpt.latest_step() is None


def test_keeps_newest_k(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), keep=2, rank=0, world_size=1, sharded=False)
    model, opt = _model()
    for step in (10, 20, 30, 40):
        ckpt.save(model, opt, step=step)
    assert ckpt.store.complete_steps() == [30, 40]


@pytest.mark.parametrize("async_save", [False, True])
def test_round_trip_restores_model_optimizer_and_rng(tmp_path: Path, async_save: bool) -> None:
    ckpt = Checkpointer(
        str(tmp_path), keep=2, rank=0, world_size=1, sharded=False, async_save=async_save
    )
    model, opt = _model()
    torch.manual_seed(7)
    np.random.seed(7)
    random.seed(7)
    ckpt.save(model, opt, step=1)
    ckpt.wait()
    expected = (torch.rand(3), np.random.rand(3), random.random())
    saved_params = {k: v.clone() for k, v in model.state_dict().items()}
    saved_opt = opt.state_dict()["state"][0]["exp_avg"].clone()

    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    opt.state[next(iter(model.parameters()))]["exp_avg"].zero_()
    assert ckpt.load(1, model, opt) == 1
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, saved_params[k])
    torch.testing.assert_close(opt.state_dict()["state"][0]["exp_avg"], saved_opt)
    assert torch.equal(torch.rand(3), expected[0])
    assert np.array_equal(np.random.rand(3), expected[1])
    assert random.random() == expected[2]


def test_async_save_does_not_see_later_updates(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), keep=2, rank=0, world_size=1, sharded=False, async_save=True)
    model, opt = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ckpt.save(model, opt, step=1)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.0)
    ckpt.wait()
    ckpt.load(1, model, opt)
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, before[k])


def test_keep_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="keep must be >= 1"):
        CheckpointStore(str(tmp_path), keep=0)


def test_overlapped_copy_is_taken_before_the_next_update(tmp_path: Path) -> None:
    # The trainer's protocol: save, compute the next gradients, before_update(), step.
    ckpt = Checkpointer(
        str(tmp_path),
        keep=2,
        rank=0,
        world_size=1,
        sharded=False,
        async_save=True,
        overlap_copy=True,
    )
    model, opt = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    for step in (1, 2):
        ckpt.save(model, opt, step=step)
        assert ckpt.before_update() >= 0.0
        assert ckpt.before_update() == 0.0
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
    ckpt.wait()
    ckpt.load(1, model, opt)
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, before[k])
    ckpt.load(2, model, opt)
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, before[k] + 1.0)


def _damage(state: Path) -> None:
    """The attack's damage: 100 kB zeroed in the middle and the last 500 bytes overwritten,
    the size unchanged."""
    data = bytearray(state.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 100] = b"\0" * 100
    data[-500:] = b"\xff" * 500
    state.write_bytes(bytes(data))


def test_a_state_file_damaged_at_the_same_size_is_passed_over(tmp_path: Path) -> None:
    """The marker's CRC32C tells it before torch reads the file (which failed on every
    start with "PytorchStreamReader failed reading zip archive")."""
    ckpt, model, opt = _two_saves(tmp_path)
    marker = json.loads((tmp_path / step_name(10) / MARKER).read_text())
    state = tmp_path / step_name(10) / "state.pt"
    _damage(state)
    found = base64.b64encode(google_crc32c.Checksum(state.read_bytes()).digest()).decode()
    assert state.stat().st_size == marker["files"]["state.pt"]
    reason = (
        f"state.pt's content changed since it was saved (CRC32C {found} where its COMPLETE "
        f"marker records {marker['crc32c']['state.pt']})"
    )
    assert ckpt.store.resume_point() == (5, [Skipped(10, step_name(10), reason)])
    assert ckpt.load(5, model, opt) == 5
    # A marker written before checksums were recorded: sizes only, as before.
    del marker["crc32c"]
    (tmp_path / step_name(10) / MARKER).write_text(json.dumps(marker))
    assert ckpt.store.resume_point() == (10, [])


@pytest.mark.parametrize(
    ("marker", "extra", "reason"),
    [
        (
            "{}",
            "user.bin",
            "its COMPLETE marker lacks step and committed_at (not one trainstack wrote)",
        ),
        (
            '{"step": 20}',
            "other.bin",
            "its COMPLETE marker lacks committed_at (not one trainstack wrote)",
        ),
        (
            '{"step": 999, "committed_at": 1.0}',
            None,
            "its COMPLETE marker says step 999, not 20",
        ),
        (None, None, "its COMPLETE marker is a folder, not a file"),
    ],
)
def test_a_marker_trainstack_did_not_write_is_skipped_and_never_deleted(
    tmp_path: Path, marker: str | None, extra: str | None, reason: str
) -> None:
    """Before, any folder holding a file named COMPLETE was trainstack's: `--fresh` and
    pruning deleted a folder with a `{}` marker and someone's `user.bin`; a marker that is a
    folder refused the whole run; a marker saying step 999 in step-20 was resumed."""
    ckpt, model, opt = _two_saves(tmp_path)
    folder = tmp_path / step_name(20)
    folder.mkdir()
    if marker is None:
        (folder / MARKER).mkdir()
    else:
        (folder / MARKER).write_text(marker)
    if extra is not None:
        (folder / extra).write_bytes(b"mine")
    assert ckpt.store.resume_point() == (10, [Skipped(20, step_name(20), reason)])
    ckpt.save(model, opt, step=15)  # prunes to keep=3 of trainstack's own
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        step_name(5),
        step_name(10),
        step_name(15),
        step_name(20),
    ]
    cleared = ckpt.store.clear()
    assert cleared == Cleared(
        [step_name(5), step_name(10), step_name(15)], [step_name(20)], {step_name(20): reason}
    )
    assert cleared.left_line("/ck") == (
        f"--fresh left step-00000020 ({reason}) in /ck: not checkpoints trainstack wrote; "
        "delete them yourself if they are not wanted"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [step_name(20)]


def test_a_folder_with_files_its_marker_does_not_list_is_left(tmp_path: Path) -> None:
    """A valid marker of trainstack's, but the folder holds a file it never wrote: the
    checkpoint is resumed (its payload is whole) and never deleted."""
    ckpt, _, _ = _two_saves(tmp_path)
    (tmp_path / step_name(5) / "other.bin").write_bytes(b"mine")
    (tmp_path / step_name(10) / f"{MARKER}.tmp-0123abcdef01").write_bytes(b"")
    assert ckpt.store.resume_point() == (10, [])
    cleared = ckpt.store.clear()
    assert cleared == Cleared(
        [step_name(10)],
        [step_name(5)],
        {step_name(5): "it holds files its COMPLETE marker does not list: other.bin"},
    )


def test_in_a_bucket_the_listings_crc32c_tells_damage_without_a_read(
    gcs_emulator: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The marker records the CRC32C Cloud Storage computed on upload (the object resource's
    `crc32c`, base64 of the big-endian checksum); a same-size overwrite changes it."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator)
    monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    store = CheckpointStore("gs://trainstack-test/crc/run", keep=3)
    for step in (5, 10):
        tmp = store.new_tmp(step, "0123abcd")
        store.write_bytes(f"{tmp}/state.pt", bytes([step]) * 1000)
        store.commit(tmp, step)
    marker = json.loads(store.read_bytes(store.path(f"{step_name(10)}/{MARKER}")))
    crc = base64.b64encode(google_crc32c.Checksum(bytes([10]) * 1000).digest()).decode()
    assert marker["crc32c"] == {"state.pt": crc}
    store.write_bytes(store.path(f"{step_name(10)}/state.pt"), b"\0" * 1000)
    found = base64.b64encode(google_crc32c.Checksum(b"\0" * 1000).digest()).decode()
    assert store.resume_point() == (
        5,
        [
            Skipped(
                10,
                step_name(10),
                f"state.pt's content changed since it was saved (CRC32C {found} where its "
                f"COMPLETE marker records {crc})",
            )
        ],
    )
