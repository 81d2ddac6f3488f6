"""The `params_sha256` of the `done` record: one rule for both trainers.

Parameters sorted by name, each as float32 contiguous little-endian bytes preceded by
`"{name}:{shape}\\n"`. Each trainer hands over its framework's named parameters and how to
turn one into a float32 numpy array (gathering a shard first); this module never imports a
framework.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")


def params_sha256(named: Iterable[tuple[str, T]], to_array: Callable[[T], Any] = np.asarray) -> str:
    """Digest of `(name, value)` pairs in name order, whatever order they come in.

    `to_array` runs on one value at a time, in name order, so only one converted parameter
    is held at once (and collectives inside it run in the same order on every rank).
    """
    digest = hashlib.sha256()
    for name, value in sorted(named, key=lambda kv: kv[0]):
        array = np.asarray(to_array(value)).astype("<f4", copy=False)
        digest.update(f"{name}:{tuple(array.shape)}\n".encode())
        # tobytes() is C order whatever the array's layout.
        digest.update(array.tobytes())
    return digest.hexdigest()
