"""Token files: folders of flat uint16 token shards, memory-mapped (nanoGPT's layout).

Layout under `data_path` (local or gs://): `train.bin` and `val.bin`, the files nanoGPT's
`prepare.py` scripts write, or several shards whose names start with `train` / `val` and end
in `.bin` (`train-00000.bin`, ...), read in name order. Each file is a flat array of uint16
token ids with no header. An optional `meta.json` with `vocab_size` (written by
`examples/tokens/make_shards.py`) is checked against the trainer's `vocab_size` up front;
without it every batch is checked as it is read.

Samples: a shard of n tokens holds `(n - 1) // seq_len` samples; sample i is the
`seq_len + 1` tokens at offset `i * seq_len` (inputs are its first `seq_len` tokens, targets
its last `seq_len`), so windows never straddle two shards. Samples are numbered shard after
shard, and the trainer's `StepSampler` maps a global step to sample indices exactly as for
in-memory data: the data position is the step, a resumed run reads the samples the
uninterrupted run would have read, and each rank reads only its slice of each global batch.
The shards are memory-mapped (`numpy.memmap`), so a rank touches only the pages of its own
samples and nothing is loaded up front.

gs://: a memory map needs a local file, so each shard is downloaded once per machine into
`TRAINSTACK_DATA_CACHE` (default `<tmp>/trainstack-data`), under a name derived from its URL
and the object's generation, size and checksum (a changed object is fetched again). A lock
file makes the ranks of one machine share one download; it is written under a temporary
name and renamed, so a killed download leaves nothing that is trusted later.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np

TOKEN_DTYPE = np.uint16
CACHE_ENV = "TRAINSTACK_DATA_CACHE"
META_FILE = "meta.json"


class TokenWindows:
    """Read-only array-like of shape (samples, seq_len): the int64 inputs (`shift` 0) or
    targets (`shift` 1) of every sample of a list of memory-mapped shards."""

    def __init__(
        self,
        shards: Sequence[np.ndarray],
        names: Sequence[str],
        *,
        seq_len: int,
        shift: int,
        vocab_size: int,
    ) -> None:
        self.shards = list(shards)
        self.names = list(names)
        self.seq_len = seq_len
        self.shift = shift
        self.vocab_size = vocab_size
        counts = [max((len(s) - 1) // seq_len, 0) for s in self.shards]
        # starts[k] is the first sample number of shard k.
        self.starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.shape = (int(self.starts[-1]), seq_len)
        self.ndim = 2
        self.dtype = np.dtype(np.int64)

    def __len__(self) -> int:
        return self.shape[0]

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """Every sample at once (reads the whole split; for small data and tools)."""
        return self[:] if dtype is None else self[:].astype(dtype)

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, slice):
            idx = np.arange(*key.indices(len(self)), dtype=np.int64)
        else:
            idx = np.asarray(key, dtype=np.int64)
        flat = idx.reshape(-1)
        if flat.size and (flat.min() < 0 or flat.max() >= len(self)):
            raise IndexError(f"sample index out of range [0, {len(self)})")
        out = np.empty((flat.size, self.seq_len), dtype=np.int64)
        shard_of = np.searchsorted(self.starts, flat, side="right") - 1
        columns = np.arange(self.seq_len, dtype=np.int64) + self.shift
        for k in np.unique(shard_of):
            sel = shard_of == k
            offsets = (flat[sel] - self.starts[k]) * self.seq_len
            out[sel] = self.shards[k][offsets[:, None] + columns[None, :]]
        if out.size and int(out.max()) >= self.vocab_size:
            raise ValueError(
                f"vocab_size: the token files hold id {int(out.max())} "
                f"({', '.join(self.names)}); valid: vocab_size > {int(out.max())}"
            )
        return out.reshape(*idx.shape, self.seq_len)


def _names(fs: Any, root: str) -> list[str]:
    return sorted(str(p).rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(root, detail=False))


def _split_files(names: Sequence[str], split: str) -> list[str]:
    return [n for n in names if n.startswith(split) and n.endswith(".bin")]


def is_token_layout(data_path: str) -> bool:
    """Whether `data_path` holds token shards (a `train*.bin` file)."""
    from trainstack.trainers.common.storage import url_to_fs

    fs, root = url_to_fs(data_path)
    try:
        return bool(_split_files(_names(fs, root), "train"))
    except FileNotFoundError:
        return False


def cache_dir() -> str:
    return os.environ.get(CACHE_ENV) or os.path.join(tempfile.gettempdir(), "trainstack-data")


def local_copy(fs: Any, path: str) -> str:
    """A local file with the content of `path`: the path itself on a local filesystem, a
    cached download otherwise (see the module docstring)."""
    if "file" in fs.protocol or "local" in fs.protocol:
        return str(path)
    info = fs.info(path)
    version = [str(info.get(k)) for k in ("generation", "size", "md5Hash", "crc32c", "etag")]
    key = hashlib.sha256("\n".join([fs.unstrip_protocol(path), *version]).encode()).hexdigest()
    folder = cache_dir()
    os.makedirs(folder, exist_ok=True)
    target = os.path.join(folder, f"{key[:32]}-{path.rsplit('/', 1)[-1]}")
    with open(f"{target}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(target):
            partial = f"{target}.partial-{os.getpid()}"
            try:
                fs.get_file(path, partial)
                os.replace(partial, target)
            finally:
                if os.path.exists(partial):
                    os.remove(partial)
    return target


def _memmap(path: str) -> np.ndarray:
    if os.path.getsize(path) < 2 * TOKEN_DTYPE().itemsize:
        return np.zeros(0, dtype=TOKEN_DTYPE)
    return np.memmap(path, dtype=TOKEN_DTYPE, mode="r")


def _check_meta(fs: Any, root: str, names: Sequence[str], vocab_size: int) -> None:
    if META_FILE not in names:
        return
    with fs.open(f"{root}/{META_FILE}", "rb") as f:
        meta = json.loads(f.read())
    needed = int(meta.get("vocab_size", 0))
    if needed > vocab_size:
        raise ValueError(
            f"vocab_size: the token files under {root} use {needed} token ids ({META_FILE}) "
            f"but vocab_size is {vocab_size}; valid: vocab_size >= {needed}"
        )


def load_token_windows(
    data_path: str, *, seq_len: int, vocab_size: int
) -> tuple[tuple[TokenWindows, TokenWindows], tuple[TokenWindows, TokenWindows]]:
    """((train inputs, train targets), (val inputs, val targets)) over the token shards."""
    from trainstack.trainers.common.storage import url_to_fs

    fs, root = url_to_fs(data_path)
    root = root.rstrip("/")
    names = _names(fs, root)
    _check_meta(fs, root, names, vocab_size)
    splits = []
    for split in ("train", "val"):
        files = _split_files(names, split)
        if not files:
            raise ValueError(
                f"data_path: {data_path} has token shards but no {split} file; valid: "
                f"{split}.bin or {split}-*.bin beside the train files"
            )
        shards = [_memmap(local_copy(fs, f"{root}/{name}")) for name in files]
        windows = [
            TokenWindows(shards, files, seq_len=seq_len, shift=s, vocab_size=vocab_size)
            for s in (0, 1)
        ]
        if not len(windows[0]):
            raise ValueError(
                f"data_path: the {split} files of {data_path} hold no sample of "
                f"seq_len + 1 = {seq_len + 1} tokens; valid: longer files or a smaller seq_len"
            )
        splits.append((windows[0], windows[1]))
    return splits[0], splits[1]
