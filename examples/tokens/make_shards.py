"""Turn text files into uint16 token shards for `dataset: files` (byte-level, no downloads).

    python examples/tokens/make_shards.py INPUT.txt [MORE.txt ...] --out data/tokens \
        [--shards 4] [--val-fraction 0.1]

The vocabulary is the 256 byte values: token id = byte, so any file works and nothing has to
be downloaded or trained (the bundled GPT's default `vocab_size: 256` matches). The inputs
are concatenated; the first `1 - val_fraction` of the bytes are the training split, the rest
the validation split, as nanoGPT's `shakespeare_char/prepare.py` splits. Written: `train.bin`
(or `train-00000.bin` ... with `--shards N`), `val.bin`, and `meta.json` with the vocabulary
size and token counts. Then train on them:

    python -m trainstack.trainers.torch_ddp --model=gpt --dataset=files --data_path=data/tokens
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

VOCAB_SIZE = 256


def tokens_of(paths: list[Path]) -> np.ndarray:
    return np.frombuffer(b"".join(p.read_bytes() for p in paths), dtype=np.uint8)


def write_shards(tokens: np.ndarray, out: Path, *, shards: int, val_fraction: float) -> dict:
    """Write the splits of `tokens` under `out`; returns the meta record."""
    out.mkdir(parents=True, exist_ok=True)
    n_val = max(int(len(tokens) * val_fraction), 1)
    train, val = tokens[:-n_val], tokens[-n_val:]
    if shards == 1:
        parts = [("train.bin", train)]
    else:
        parts = [
            (f"train-{i:05d}.bin", part) for i, part in enumerate(np.array_split(train, shards))
        ]
    parts.append(("val.bin", val))
    for name, part in parts:
        part.astype(np.uint16).tofile(out / name)
    meta = {
        "vocab_size": VOCAB_SIZE,
        "tokenizer": "bytes",
        "dtype": "uint16",
        "train_tokens": len(train),
        "val_tokens": len(val),
        "files": [name for name, _ in parts],
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("inputs", nargs="+", type=Path, help="text (or any) files")
    p.add_argument("--out", type=Path, required=True, help="folder for the shards")
    p.add_argument("--shards", type=int, default=1, help="training shards (default 1)")
    p.add_argument("--val-fraction", type=float, default=0.1)
    args = p.parse_args(argv)
    if args.shards < 1:
        p.error("--shards must be >= 1")
    if not 0 < args.val_fraction < 1:
        p.error("--val-fraction must be between 0 and 1")
    tokens = tokens_of(args.inputs)
    if len(tokens) < 2 * (args.shards + 1):
        p.error(f"the inputs hold {len(tokens)} bytes; too few for {args.shards} shard(s)")
    meta = write_shards(tokens, args.out, shards=args.shards, val_fraction=args.val_fraction)
    print(json.dumps({"out": str(args.out), **meta}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
