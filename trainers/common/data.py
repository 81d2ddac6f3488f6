"""Input data for the bundled trainers, deterministic per rank and resumable by step.

Three sources (`TrainConfig.dataset`):

- `synthetic`: generated from a seeded numpy generator. Classification for the MLP/CNN (labels
  from a fixed random linear teacher, so it is learnable) and token sequences for the GPT
  (each sequence counts up by a per-sequence stride modulo the vocabulary).
- `digits`: the UCI "Optical Recognition of Handwritten Digits" test set (8x8 images, 1797
  samples, 10 classes; E. Alpaydin and C. Kaynak, UCI Machine Learning Repository,
  https://doi.org/10.24432/C50P49, licensed CC BY 4.0), vendored as `digits.npz` (uint8
  `images` (1797, 8, 8) in 0..16 and `labels`), exported once from the copy that
  scikit-learn ships (`sklearn/datasets/data/digits.csv.gz`). Fixed split: a permutation
  with seed 0, the first 1437 samples train, the last 360 test.
- `files`, token shards: `train*.bin` and `val*.bin` files of uint16 token ids under
  `data_path` (nanoGPT's layout; GPT only), memory-mapped and read by sample
  (`trainstack.trainers.common.tokens`). They follow the global order below, like in-memory data.
- `files`, array shards: every `*.npz` under `data_path` (local or gs://), each holding `x`
  and `y` arrays with the same first dimension. Shards are sorted by name and rank r reads
  shards r, r + world, ...; the last shard is the test set when there are more shards than
  ranks.

Order: for in-memory sources every step takes one *global* batch from a stream that walks a
permutation of the training set (seeded by `seed` and the epoch), and rank r takes its slice
of that global batch. The data position is therefore the global step alone: a resumed run
sees exactly the batches it would have seen, and 2 ranks with batch B see the same global
batch as 1 rank with batch 2B. For `.npz` shards, each rank walks its own shards the same way.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.tokens import TokenWindows, is_token_layout, load_token_windows

DIGITS_PATH = Path(__file__).parent / "digits.npz"
DIGITS_TRAIN = 1437
NUM_CLASSES = 10
SYNTHETIC_FEATURES = 32

Task = Literal["classification", "lm"]


Samples = np.ndarray | TokenWindows
"""Indexable by an array of sample indices or a slice; token shards are read lazily."""


@dataclass(frozen=True)
class Split:
    x: Samples
    y: Samples

    def __len__(self) -> int:
        return int(self.x.shape[0])


@dataclass(frozen=True)
class Dataset:
    train: Split
    test: Split
    task: Task
    num_classes: int
    """Classes for classification, vocabulary size for language modelling."""
    input_shape: tuple[int, ...]
    """Shape of one sample (without the batch dimension)."""
    per_rank_shards: bool = False
    """Each rank holds only its own shards (`.npz` files) and walks them with its own
    sampler; otherwise every rank indexes the same samples in the global order."""


def load_digits() -> tuple[Split, Split]:
    with np.load(DIGITS_PATH) as f:
        images, labels = f["images"], f["labels"]
    order = np.random.default_rng(0).permutation(len(labels))
    x = (images[order].astype(np.float32) / 16.0)[:, None, :, :]
    y = labels[order].astype(np.int64)
    return Split(x[:DIGITS_TRAIN], y[:DIGITS_TRAIN]), Split(x[DIGITS_TRAIN:], y[DIGITS_TRAIN:])


def synthetic_classification(samples: int, seed: int) -> tuple[Split, Split]:
    rng = np.random.default_rng([seed, 1])
    test = max(samples // 4, 1)
    x = rng.standard_normal((samples + test, SYNTHETIC_FEATURES), dtype=np.float32)
    teacher = rng.standard_normal((SYNTHETIC_FEATURES, NUM_CLASSES), dtype=np.float32)
    y = np.argmax(x @ teacher, axis=1).astype(np.int64)
    return Split(x[:samples], y[:samples]), Split(x[samples:], y[samples:])


def synthetic_tokens(samples: int, seq_len: int, vocab: int, seed: int) -> tuple[Split, Split]:
    rng = np.random.default_rng([seed, 2])
    test = max(samples // 4, 1)
    n = samples + test
    start = rng.integers(0, vocab, size=(n, 1))
    stride = rng.integers(1, 8, size=(n, 1))
    tokens = (start + stride * np.arange(seq_len + 1)[None, :]) % vocab
    x, y = tokens[:, :-1].astype(np.int64), tokens[:, 1:].astype(np.int64)
    return Split(x[:samples], y[:samples]), Split(x[samples:], y[samples:])


def _read_npz(fs: object, path: str) -> Split:
    with fs.open(path, "rb") as f:  # type: ignore[attr-defined]
        payload = io.BytesIO(f.read())
    with np.load(payload) as data:
        if "x" not in data or "y" not in data:
            raise ValueError(f"{path}: a data shard must hold arrays 'x' and 'y'")
        x, y = data["x"], data["y"]
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"{path}: x and y differ in length ({x.shape[0]} vs {y.shape[0]})")
    return Split(x, y)


def load_shards(data_path: str, *, rank: int, world_size: int) -> tuple[Split, Split]:
    """This rank's training shards and the test shard from a directory of `.npz` files."""
    from trainstack.trainers.common.storage import url_to_fs

    fs, root = url_to_fs(data_path)
    shards = sorted(p for p in fs.ls(root, detail=False) if str(p).endswith(".npz"))
    if not shards:
        raise ValueError(f"data_path {data_path!r} holds no .npz shards")
    train_shards, test_shards = shards, shards[-1:]
    if len(shards) > world_size:
        train_shards = shards[:-1]
    if len(train_shards) < world_size:
        raise ValueError(
            f"data_path {data_path!r} has {len(train_shards)} training shard(s) for "
            f"{world_size} ranks; every rank needs at least one"
        )
    mine = [_read_npz(fs, p) for p in train_shards[rank::world_size]]
    test = _read_npz(fs, test_shards[0])
    return (
        Split(np.concatenate([s.x for s in mine]), np.concatenate([s.y for s in mine])),
        test,
    )


def load_dataset(cfg: TrainConfig, *, rank: int, world_size: int) -> Dataset:
    task: Task = "lm" if cfg.model == "gpt" else "classification"
    per_rank_shards = False
    if cfg.dataset == "files" and cfg.data_path and is_token_layout(cfg.data_path):
        if task != "lm":
            raise ValueError(
                f"data_path: {cfg.data_path} holds token shards (.bin), which only the GPT "
                f"reads; valid: model gpt, or .npz shards for model {cfg.model}"
            )
        (tx, ty), (vx, vy) = load_token_windows(
            cfg.data_path, seq_len=cfg.seq_len, vocab_size=cfg.vocab_size
        )
        train, test = Split(tx, ty), Split(vx, vy)
    elif cfg.dataset == "digits":
        train, test = load_digits()
    elif cfg.dataset == "synthetic" and task == "lm":
        train, test = synthetic_tokens(cfg.synthetic_samples, cfg.seq_len, cfg.vocab_size, cfg.seed)
    elif cfg.dataset == "synthetic":
        train, test = synthetic_classification(cfg.synthetic_samples, cfg.seed)
    else:
        if cfg.data_path is None:
            raise ValueError("data_path is required when dataset is 'files'")
        train, test = load_shards(cfg.data_path, rank=rank, world_size=world_size)
        per_rank_shards = True
    if task == "lm":
        if train.x.ndim != 2 or train.x.shape[1] != cfg.seq_len:
            raise ValueError(
                f"token data must have shape (n, seq_len={cfg.seq_len}), got {train.x.shape}"
            )
        classes = cfg.vocab_size
    else:
        classes = int(max(np.max(train.y), np.max(test.y))) + 1
    return Dataset(train, test, task, classes, tuple(train.x.shape[1:]), per_rank_shards)


class StepSampler:
    """Maps a global step to sample indices; stateless, so the position is just the step.

    `global_batch` samples per step are drawn from an endless stream that visits the
    permutation of epoch e (seeded by `seed` and e) in order; this rank keeps the slice
    `[rank * per_rank, (rank + 1) * per_rank)` of each global batch.
    """

    def __init__(
        self, num_samples: int, *, global_batch: int, rank: int, world_size: int, seed: int
    ) -> None:
        if global_batch % world_size:
            raise ValueError(
                f"global_batch_size ({global_batch}) must be divisible by the world size "
                f"({world_size})"
            )
        self.num_samples = num_samples
        self.global_batch = global_batch
        self.per_rank = global_batch // world_size
        self.rank = rank
        self.seed = seed
        self._perms: dict[int, np.ndarray] = {}

    def _perm(self, epoch: int) -> np.ndarray:
        if epoch not in self._perms:
            if len(self._perms) > 2:
                self._perms.pop(min(self._perms))
            self._perms[epoch] = np.random.default_rng([self.seed, epoch]).permutation(
                self.num_samples
            )
        return self._perms[epoch]

    def indices(self, step: int) -> np.ndarray:
        start = step * self.global_batch + self.rank * self.per_rank
        positions = np.arange(start, start + self.per_rank)
        epochs = positions // self.num_samples
        out = np.empty(self.per_rank, dtype=np.int64)
        for epoch in np.unique(epochs):
            sel = epochs == epoch
            out[sel] = self._perm(int(epoch))[positions[sel] % self.num_samples]
        return out

    def epoch(self, step: int) -> int:
        return step * self.global_batch // self.num_samples


def shard_sampler(cfg: TrainConfig, ds: Dataset, *, rank: int, world_size: int) -> StepSampler:
    """The sampler for this rank; with `.npz` shards every rank walks its own shards."""
    if ds.per_rank_shards:
        per_rank = cfg.global_batch_size // world_size
        return StepSampler(
            len(ds.train),
            global_batch=per_rank,
            rank=0,
            world_size=1,
            seed=cfg.seed * 1_000_003 + rank,
        )
    return StepSampler(
        len(ds.train),
        global_batch=cfg.global_batch_size,
        rank=rank,
        world_size=world_size,
        seed=cfg.seed,
    )
