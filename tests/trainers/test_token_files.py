"""The GPT on token shards made by examples/tokens/make_shards.py: memory-mapped windows,
the gs:// cache, and a SIGKILLed two-process run that resumes to the uninterrupted digest."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.trainers.conftest import REPO, Record, Run, run_to_end, trainer_env
from trainstack.trainers.common.checkpoint import CheckpointStore
from trainstack.trainers.common.cli import load_config
from trainstack.trainers.common.data import load_dataset, shard_sampler
from trainstack.trainers.common.tokens import CACHE_ENV

pytestmark = pytest.mark.trainer

SCRIPT = REPO / "examples" / "tokens" / "make_shards.py"
WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "seven",
    "tired",
    "owls",
    "sing",
]
STEPS = 24
SEQ_LEN = 32


def _text(path: Path, words: int = 12_000) -> bytes:
    rng = random.Random(16)
    data = " ".join(rng.choice(WORDS) for _ in range(words)).encode()
    path.write_bytes(data)
    return data


def make_shards(tmp: Path, *args: str) -> tuple[Path, bytes]:
    text = _text(tmp / "corpus.txt")
    out = tmp / "tokens"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp / "corpus.txt"), "--out", str(out), *args],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(proc.stdout)["out"] == str(out)
    return out, text


def _cfg(data_path: str, *extra: str) -> list[str]:
    return [
        "--model=gpt",
        "--dataset=files",
        f"--data_path={data_path}",
        f"--seq_len={SEQ_LEN}",
        *extra,
    ]


def test_script_writes_byte_tokens_and_meta(tmp_path: Path) -> None:
    out, text = make_shards(tmp_path, "--shards", "3", "--val-fraction", "0.1")
    meta = json.loads((out / "meta.json").read_text())
    n_val = int(len(text) * 0.1)
    assert meta == {
        "vocab_size": 256,
        "tokenizer": "bytes",
        "dtype": "uint16",
        "train_tokens": len(text) - n_val,
        "val_tokens": n_val,
        "files": ["train-00000.bin", "train-00001.bin", "train-00002.bin", "val.bin"],
    }
    train = np.concatenate([np.fromfile(out / f, dtype=np.uint16) for f in meta["files"][:3]])
    assert train.tobytes() == np.frombuffer(text[:-n_val], np.uint8).astype(np.uint16).tobytes()
    assert (
        np.fromfile(out / "val.bin", dtype=np.uint16).astype(np.uint8).tobytes() == (text[-n_val:])
    )


def test_windows_are_the_shards_bytes_and_ranks_split_the_global_batch(tmp_path: Path) -> None:
    out, _ = make_shards(tmp_path, "--shards", "3")
    cfg = load_config(_cfg(str(out), "--global_batch_size=8"))
    ds = load_dataset(cfg, rank=0, world_size=2)
    shards = [np.fromfile(out / f"train-{k:05d}.bin", dtype=np.uint16) for k in range(3)]
    counts = [(len(s) - 1) // SEQ_LEN for s in shards]
    assert len(ds.train) == sum(counts) and ds.input_shape == (SEQ_LEN,)
    assert not ds.per_rank_shards
    # The first sample of the second shard starts at that shard's first token.
    first = counts[0]
    x, y = ds.train.x[np.array([first, first - 1])], ds.train.y[np.array([first])]
    assert x.dtype == np.int64 and x.shape == (2, SEQ_LEN)
    assert np.array_equal(x[0], shards[1][:SEQ_LEN])
    assert np.array_equal(y[0], shards[1][1 : SEQ_LEN + 1])
    last = shards[0][(first - 1) * SEQ_LEN :][:SEQ_LEN]
    assert np.array_equal(x[1], last)
    assert np.array_equal(ds.test.x[0:2], ds.test.x[np.array([0, 1])])
    # Rank samplers walk the global order: their slices make the one-process batch.
    one = shard_sampler(cfg, load_dataset(cfg, rank=0, world_size=1), rank=0, world_size=1)
    ranks = [shard_sampler(cfg, ds, rank=r, world_size=2) for r in (0, 1)]
    for step in (0, 3, 250):
        both = np.concatenate([ds.train.x[s.indices(step)] for s in ranks])
        assert np.array_equal(both, ds.train.x[one.indices(step)])


def test_vocab_size_smaller_than_the_files_vocabulary(tmp_path: Path) -> None:
    out, _ = make_shards(tmp_path)
    cfg = load_config(_cfg(str(out), "--vocab_size=100"))
    with pytest.raises(ValueError) as info:
        load_dataset(cfg, rank=0, world_size=1)
    assert str(info.value) == (
        f"vocab_size: the token files under {out} use 256 token ids (meta.json) but "
        "vocab_size is 100; valid: vocab_size >= 256"
    )
    # Without meta.json the ids are checked as they are read.
    (out / "meta.json").unlink()
    ds = load_dataset(cfg, rank=0, world_size=1)
    with pytest.raises(ValueError) as read:
        ds.train.x[np.arange(4)]
    top = int(np.fromfile(out / "train.bin", dtype=np.uint16)[: 4 * SEQ_LEN].max())
    assert str(read.value) == (
        f"vocab_size: the token files hold id {top} (train.bin); valid: vocab_size > {top}"
    )


def test_token_shards_on_gcs_are_cached_once(
    tmp_path: Path, gcs_emulator: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator)
    monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    out, _ = make_shards(tmp_path, "--shards", "2")
    url = "gs://trainstack-test/datasets/bytes"
    store = CheckpointStore(url, keep=1)
    store.upload_dir(str(out), store.root)
    remote = load_dataset(load_config(_cfg(url)), rank=1, world_size=2)
    local = load_dataset(load_config(_cfg(str(out))), rank=1, world_size=2)
    idx = np.arange(0, len(local.train), 7)
    assert np.array_equal(remote.train.x[idx], local.train.x[idx])
    assert np.array_equal(remote.test.y[0:5], local.test.y[0:5])
    cached = sorted(p.name.split("-", 1)[1] for p in (tmp_path / "cache").glob("*.bin"))
    assert cached == ["train-00000.bin", "train-00001.bin", "val.bin"]
    mtimes = {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").glob("*.bin")}
    load_dataset(load_config(_cfg(url)), rank=0, world_size=2)
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").glob("*.bin")} == mtimes


def test_tensorflow_refuses_token_shards(tmp_path: Path) -> None:
    out, _ = make_shards(tmp_path)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainstack.trainers.tf_multiworker",
            "--framework=tensorflow",
            *_cfg(str(out)),
            "--steps=1",
        ],
        capture_output=True,
        text=True,
        env=trainer_env(),
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        f"trainstack trainer: data_path: {out} holds token shards (.bin), which the torch "
        "trainer reads; valid: framework torch, or .npz shards for tensorflow"
    )


def _train_args(data: Path, ckpt: Path) -> list[str]:
    return _cfg(
        str(data),
        "--gpt_dim=32",
        "--gpt_layers=1",
        "--gpt_heads=2",
        "--global_batch_size=16",
        f"--steps={STEPS}",
        "--learning_rate=0.01",
        "--log_every=1",
        "--checkpoint_every=4",
        "--keep_checkpoints=2",
        "--seed=5",
        f"--checkpoint_dir={ckpt}",
    )


@pytest.mark.slow  # about 36 s here; SIGKILL resume of the gpt model on token shards
def test_sigkilled_gpt_resumes_to_the_uninterrupted_digest(tmp_path: Path) -> None:
    data, _ = make_shards(tmp_path, "--shards", "3")
    clean = run_to_end(_train_args(data, tmp_path / "clean"), workers=2, out=tmp_path / "a.log")
    assert clean["step"] == STEPS and clean["resumed_from"] == 0
    ckpt = tmp_path / "ckpt"
    run = Run(
        _train_args(data, ckpt),
        workers=2,
        out=tmp_path / "kill.log",
        env={"TRAINSTACK_TEST_STEP_DELAY_S": "0.1"},
    )

    def past_a_checkpoint(rec: Record) -> bool:
        return rec.get("event") == "train" and rec.get("rank") == 0 and rec["step"] >= 10

    run.wait_for(past_a_checkpoint)
    run.kill(signal.SIGKILL)
    run.wait()
    assert run.done() is None
    latest = CheckpointStore(str(ckpt), keep=2).latest()
    assert latest is not None and 8 <= latest < STEPS
    done = run_to_end(_train_args(data, ckpt), workers=2, out=tmp_path / "resume.log")
    assert done["resumed_from"] == latest
    assert done["params_sha256"] == clean["params_sha256"]
