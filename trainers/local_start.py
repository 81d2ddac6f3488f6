"""What `trainstack local-run` settles before it deletes or starts anything, each failure as
one line (`StartError`, a ValueError: the CLI prints `error: ...` and exits 2):

- the run's folders: `make_folder` names the file standing where a folder must be
  (`.trainstack`, `logs`) or the folder it may not write in;
- the run's lock (`trainstack.trainers.run_lock`): one local-run of a run at a time, and
  one run in a local checkpoint folder at a time (`checkpoint_lock`: two stacks may name one
  `trainer.checkpoint_dir`);
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

import contextlib
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final, TypeVar

from trainstack.trainers.common.checkpoint import CheckpointStore, Skipped
from trainstack.trainers.common.fingerprint import StateMismatch
from trainstack.trainers.run_lock import LOCAL_RUN, FolderLock

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


def check_files(*paths: Path) -> None:
    """`StartError` naming the first of the run's files (`paths`: its log, stderr log, config)
    that is a folder, so the run says so before a worker starts, not as a traceback."""
    for path in paths:
        if path.is_dir():
            raise StartError(
                f"local-run: {path} is a folder where the run's file is expected; valid: move "
                "that folder away (local-run writes the file there)"
            )


def local_folder(url: str) -> Path | None:
    """The local folder checkpoint folder `url` names (a path or `file://`), or None for a
    remote store (`gs://`)."""
    if url.startswith("file://"):
        return Path(url.removeprefix("file://"))
    return None if "://" in url else Path(url)


@contextlib.contextmanager
def checkpoint_lock(url: str, run: str) -> Iterator[str | None]:
    """Hold the lock of local checkpoint folder `url` (created here) for run `run`: a
    `RunLocked` line when another live run holds it. Yields the line saying a stale lock was
    taken over, or None. A `gs://` folder has no lock (Cloud Storage has no `flock`)."""
    lock = folder_lock(url, run)
    if lock is None:
        yield None
        return
    try:
        yield lock.took_over_line()
    finally:
        lock.release()


def folder_lock(url: str, run: str, by: str = LOCAL_RUN) -> FolderLock | None:
    """The lock of local checkpoint folder `url` (created here), taken for run `run` by
    `by`; a `RunLocked` line when another live run holds it; None for a `gs://` folder (Cloud
    Storage has no `flock`). The caller releases it (or hands it over)."""
    folder = local_folder(url)
    if folder is None:
        return None
    make_folder(folder.absolute(), "trainer.checkpoint_dir")
    lock = FolderLock(folder.absolute(), run, by)
    lock.acquire()
    return lock


SYSTEM_FOLDERS: Final = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib64",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var",
)
"""The system's own top-level folders (the Filesystem Hierarchy Standard 3.0, chapter 3,
https://refspecs.linuxfoundation.org/FHS_3.0/fhs/ch03.html): the run writes `step-N` folders
in its checkpoint folder and prunes them, so none of these is one (a folder inside them may
be)."""


def checkpoint_dir_problem(
    checkpoint_dir: str | None, base_dir: Path, source: Path | None = None
) -> str | None:
    """The line refusing a local checkpoint folder (a path, relative to `base_dir`, or a
    `file://` URL) that is or holds the stack's base folder, your source folder, the home
    folder or one of the system's own (`SYSTEM_FOLDERS`): the run writes and prunes
    `step-N` folders there and `--fresh` clears them, so it must be a folder of its own.
    None when it is one (or a `gs://` URL, or unset: the default under `local.root`)."""
    folder = None if checkpoint_dir is None else local_folder(checkpoint_dir)
    if folder is None:
        return None
    folder = (base_dir / folder.expanduser()).resolve()
    held = [("the stack's folder", base_dir.resolve()), ("the home folder", Path.home())]
    held += [("trainer.source", source)] if source is not None else []
    held += [("a system folder", Path(f)) for f in SYSTEM_FOLDERS]
    for what, inside in held:
        if inside == folder or inside.is_relative_to(folder):
            return (
                f"trainer.checkpoint_dir: {checkpoint_dir!r} holds {what} ({inside}); the run "
                "writes its checkpoints there and --fresh clears them; valid: a folder of its "
                "own, e.g. ckpts/<run> or the default under .trainstack/local"
            )
    return None


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
    "check_files",
    "checked_resume",
    "checkpoint_dir_problem",
    "checkpoint_lock",
    "clear_bundled",
    "folder_lock",
    "local_folder",
    "make_folder",
    "on_storage",
    "storage_error",
]
