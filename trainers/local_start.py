"""What `trainstack local-run` settles before it deletes or starts anything, each failure as
one line (`StartError`, a ValueError: the CLI prints `error: ...` and exits 2):

- the run's folders: `make_folder` names the file standing where a folder must be
  (`.trainstack`, `logs`) or the folder it may not write in;
- the run's lock (`trainstack.trainers.run_lock`): one local-run of a run at a time;
- the checkpoint folder (a local path or `gs://`): `--fresh` deletes only what trainstack
  wrote there and says what it left (`clear_bundled`); the folder must take a write before a
  worker starts (`CheckpointStore.check_writable`), so a read-only, full or unreachable one
  is said at once, not at the first save; the newest complete checkpoint is found, and each
  newer folder passed over is said in one line (`resume_point`).

Storage failures (`OSError`, and the errors of gcsfs and google-auth for `gs://`) become
`StartError` naming the folder, what was being done and the cause (`storage_error`).
Framework-free.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from trainstack.trainers.common.checkpoint import CheckpointStore, Skipped
from trainstack.trainers.common.fingerprint import StateMismatch

T = TypeVar("T")


class StartError(ValueError):
    """Something a local run needs is not there or not usable; the message is one line."""


def make_folder(path: Path, what: str) -> None:
    """Create the folder `path` (and its parents) for `what`; `StartError` naming the file in
    the way or the folder that refused."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        return
    except (FileExistsError, NotADirectoryError):
        blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), path)
        raise StartError(
            f"{what}: {blocker} is a file, not a folder, so the run's folder {path} cannot be "
            "created; valid: move that file away, or set local.root to another folder"
        ) from None
    except OSError as exc:
        raise StartError(f"{what}: cannot create {path}: {exc.strerror or exc}") from None


def cause_of(exc: BaseException) -> str:
    """The first line of what a storage client said, without its traceback: the system's
    words and the path for a refused local file operation, the message of another OSError
    (a connection that failed, gcsfs's HTTP errors), else the error's type and message."""
    text = str(exc).strip().splitlines()
    if isinstance(exc, OSError) and type(exc).__module__ == "builtins" and exc.strerror:
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror}{where}"
    if isinstance(exc, OSError) and text:
        return text[0]
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def storage_error(exc: BaseException, url: str, doing: str) -> StartError:
    """`exc` from the storage under checkpoint folder `url` while `doing`, as one line."""
    hint = ""
    if url.startswith("gs://"):
        hint = (
            "; valid: credentials with access to that bucket (`gcloud auth "
            "application-default login`), or a local trainer.checkpoint_dir"
        )
    return StartError(f"checkpoint folder {url}: cannot {doing}: {cause_of(exc)}{hint}")


def on_storage(url: str, doing: str, call: Callable[[], T]) -> T:
    """`call()`, with a storage failure under `url` raised as `StartError`. Settings that do
    not match (`StateMismatch`) and `StartError` pass as they are."""
    # gcsfs logs each failed request with its traceback: the one line here says it instead.
    logging.getLogger("gcsfs").addHandler(logging.NullHandler())
    logging.getLogger("gcsfs").propagate = False
    try:
        return call()
    except (StateMismatch, StartError):
        raise
    except Exception as exc:  # noqa: BLE001 - OSError, gcsfs HttpError, google-auth errors
        raise storage_error(exc, url, doing) from None


def clear_bundled(store: CheckpointStore) -> str | None:
    """`--fresh` for the bundled trainers: delete what trainstack wrote in the folder; the
    line saying which `step-N` folders it left, or None."""
    cleared = on_storage(store.url, "delete its checkpoints (--fresh)", store.clear)
    return cleared.left_line(store.url)


def checked_resume(store: CheckpointStore) -> tuple[int | None, list[str]]:
    """The step the run resumes from, and one line for each newer folder passed over, after
    the folder took a test write (`StartError` otherwise)."""
    on_storage(store.url, "write to it", store.check_writable)
    step, skipped = on_storage(store.url, "read its checkpoints", store.resume_point)
    return step, [s.line(store.url, step) for s in skipped]


__all__ = [
    "Skipped",
    "StartError",
    "checked_resume",
    "clear_bundled",
    "make_folder",
    "on_storage",
    "storage_error",
]
