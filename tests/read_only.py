"""A folder this process cannot write to, as root too.

`chmod a-w` stops every user but root, who writes through it with the capability
CAP_DAC_OVERRIDE (capabilities(7): "Bypass file read, write, and execute permission
checks"). As root the context also drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the
calling thread's effective set (capset(2); capabilities are per thread, and fsspec's local
filesystem and CliRunner work in the calling thread) and raises them again after: the kernel
then checks root against the folder's mode bits like anyone else. Linux only.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import stat
from collections.abc import Iterator
from pathlib import Path

_VERSION_3 = 0x20080522
"""_LINUX_CAPABILITY_VERSION_3 (linux/capability.h): two 32-bit sets of each kind."""
_DAC_CAPS = (1 << 1) | (1 << 2)
"""CAP_DAC_OVERRIDE (1) and CAP_DAC_READ_SEARCH (2), in the first 32-bit word."""


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _set_effective(word: int | None) -> int:
    """Set the first effective capability word of this thread (None: leave it); returns
    the word it had."""
    libc = ctypes.CDLL(None, use_errno=True)
    header, data = _Header(_VERSION_3, 0), (_Data * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    before = int(data[0].effective)
    if word is not None:
        data[0].effective = word
        if libc.capset(ctypes.byref(header), data) != 0:
            raise OSError(ctypes.get_errno(), "capset")
    return before


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """`folder` (which must exist) cannot be written to by this thread inside the block."""
    mode = folder.stat().st_mode
    folder.chmod(stat.S_IMODE(mode) & ~0o222)
    saved = _set_effective(None) if os.geteuid() == 0 else None
    try:
        if saved is not None:
            _set_effective(saved & ~_DAC_CAPS)
        yield
    finally:
        if saved is not None:
            _set_effective(saved)
        folder.chmod(stat.S_IMODE(mode))
