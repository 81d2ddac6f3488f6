"""Checkpoint directories on a local path or `gs://` (fsspec/gcsfs), framework-free.

Layout: `{dir}/step-{N:08d}/` per step, holding the payload and the `COMPLETE` marker. A save
writes the payload into `{dir}/step-N.tmp-<token>/`, then commits it (`CheckpointStore.commit`):

- locally: every payload file and folder is fsynced, the marker is written under a temporary
  name inside the folder, fsynced and renamed to `COMPLETE`, then the folder is renamed to
  `step-N/` and its parent fsynced. The step folder appears with its marker in one rename,
  after everything the marker records is on disk;
- on object stores (no atomic directory rename): the payload is copied to `step-N/`, then the
  marker is written as one object, after every object it records. A Cloud Storage upload is
  atomic and readable once it succeeded, a copy of several objects is not
  (https://cloud.google.com/storage/docs/consistency: "When you write an object to Cloud
  Storage, such as when you upload, compose, or copy an object, the object is immediately
  available for reading ... as soon as you receive a success response"; its "Atomic
  operations" section, read in the stored zh-CN copy: atomicity is guaranteed for most
  operations on one object, such as an upload, and not for operations on several objects at
  once, such as copying several).

The marker (`trainstack.trainers.common.checkpoint_marker`) records the step, the settings
fingerprint of the run that wrote it, every payload file's size and every payload file's
CRC32C. A step folder is a complete checkpoint when its marker reads as that record for its
own step and every file it records is there with that size (`payload_problem`): one listing
of the folder, no payload read. An empty or torn marker (a write cut short by a full disk,
before this layout), a marker naming another step or lacking the fields trainstack writes,
a marker that is a folder, and a truncated or missing payload file make a folder incomplete;
so does a payload file whose content no longer matches its CRC32C, checked only for the
step a run is about to resume or report (`CheckpointStore.checked`: locally the file is
read, in a bucket the listing's `crc32c` is compared). Resuming then goes to the newest
complete step, and the folders passed over come back as `Skipped` with the reason. A marker
without `files` was written before trainstack recorded them and counts as complete; one
without `crc32c` is checked by sizes only.

A `step-N` folder is trainstack's when its marker reads as trainstack's record of that step
and the folder holds only the files the marker lists (and the marker's temporaries), and a
`step-N.tmp-<token>` folder is; `prune` and `clear` (`local-run --fresh`) delete only those
and leave any other `step-N` folder, `clear` naming each with the reason. What goes inside a
step directory is the trainer's business
(`trainstack.trainers.torch_ddp.checkpoint` for torch, `trainstack.trainers.tf_multiworker.
checkpoint` for TensorFlow); this module imports neither framework. GCS and emulator options
come from `trainstack.trainers.common.storage`.

Test hook: `TRAINSTACK_TEST_SLOW_CKPT=<seconds>` (`test_delay`) sleeps between writing the
payload and committing it, so a test can kill a run in the middle of a save.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from trainstack.trainers.common.checkpoint_marker import (
    CRC_FIELD,
    FILES_FIELD,
    MARKER,
    UnreadableMarker,
    file_crc32c,
    foreign_files,
    payload_problem,
    read_marker,
)
from trainstack.trainers.common.cluster import trial_id
from trainstack.trainers.common.fingerprint import (
    FINGERPRINT_FIELD,
    StateMismatch,
    check,
    trainer_fingerprint,
)
from trainstack.trainers.common.storage import storage_options

_STEP_RE = re.compile(r"^step-(\d{8})$")
_TMP_RE = re.compile(r"^step-\d{8}\.tmp-[0-9a-f]+$")


MARKED_STEP_RE = re.compile(r"step-(\d+)")
"""A checkpoint folder's name in the run contract: the bundled trainers pad the step to 8
digits, your own code may not."""

STORAGE_ERRNOS: Final = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM}
)
"""Write failures that retrying cannot fix until someone acts: a full disk or quota, a file
size limit, a read-only or forbidden folder."""


def step_name(step: int) -> str:
    return f"step-{step:08d}"


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written (`STORAGE_ERRNOS`); the message is one line naming
    the step, the folder and the cause."""

    def __init__(self, message: str, step: int) -> None:
        super().__init__(message)
        self.step = step


def _causes(exc: BaseException) -> list[BaseException]:
    """`exc`, what it wraps (`__cause__`, `__context__`) and, for torch's
    `CheckpointException`, every rank's failure, depth first."""
    found: list[BaseException] = []
    stack = [exc]
    while stack:
        seen = stack.pop()
        if seen in found:
            continue
        found.append(seen)
        failures = getattr(seen, "failures", None)
        if isinstance(failures, dict):
            stack += [f[0] for f in failures.values() if isinstance(f, tuple) and f]
        stack += [e for e in (seen.__context__, seen.__cause__) if e is not None]
    return found


def write_failure(exc: BaseException, step: int, where: str) -> CheckpointWriteError | None:
    """`exc` as the one line a failed save of `step` into `where` is reported with, when it
    is (or wraps) a storage refusal (`STORAGE_ERRNOS`); else None."""
    for seen in _causes(exc):
        if isinstance(seen, CheckpointWriteError):
            return seen
        if isinstance(seen, OSError) and seen.errno in STORAGE_ERRNOS:
            cause = seen.strerror or str(seen)
            return CheckpointWriteError(
                f"checkpoint step {step} could not be written to {where}: {cause}", step
            )
    return None


AIP_CHECKPOINT_DIR_ENV = "AIP_CHECKPOINT_DIR"


def run_checkpoint_dir(cfg: Any, env: Mapping[str, str]) -> str | None:
    """A bundled trainer's checkpoint folder (`TrainConfig` `cfg`): `cfg.checkpoint_dir`
    when given (every target but Vertex gets `<bucket>/checkpoints/<run_name>` from
    `trainstack.infra.compose`), else on Vertex `AIP_CHECKPOINT_DIR/<run_name>` (Vertex's folder is one
    per job spec, the same for every run of a stack), else None (no checkpoints).

    A tuning trial's folder (`<base>/<trial id>/checkpoints/`) is named by the trial id
    alone, and a new tuning job numbers its trials from 1 again with other hyperparameters:
    there the run's folder also carries the settings' fingerprint
    (`<run_name>-<sha256[:12]>`), so a trial resumes only state written under its own
    settings and never refuses (or, before fingerprints, silently resumed) another job's."""
    if cfg.checkpoint_dir:
        return str(cfg.checkpoint_dir)
    platform = env.get(AIP_CHECKPOINT_DIR_ENV, "").rstrip("/")
    if not platform:
        return None
    if trial_id(env) is not None:
        return f"{platform}/{cfg.run_name}-{trainer_fingerprint(cfg)['sha256'][:12]}"
    return f"{platform}/{cfg.run_name}"


def check_resume(cfg: Any, env: Mapping[str, str]) -> None:
    """Before a launcher starts the bundled trainer (`TrainConfig` `cfg`): raise
    `StateMismatch` when the run's newest checkpoint was written under other settings, so
    the refusal is an exit 2 of the launcher rather than a worker failure that torchrun
    restarts and reports as 1. A folder that cannot be read here is left to the trainer,
    which checks again before it resumes."""
    url = run_checkpoint_dir(cfg, env)
    if not url:
        return
    try:
        CheckpointStore(url, keep=1, fingerprint=trainer_fingerprint(cfg)).resumable()
    except StateMismatch:
        raise
    except Exception:  # noqa: BLE001, S110 - storage or credentials: the trainer decides
        pass


@dataclass(frozen=True)
class StepFolder:
    """One `step-N` folder of a checkpoint directory, as `CheckpointStore.folders` found it."""

    step: int
    name: str
    marked: bool
    """It holds a marker (readable or not): a folder trainstack wrote."""
    problem: str | None = None
    """Why it is not a complete checkpoint; None for a complete one."""
    record: dict[str, Any] = field(default_factory=dict)
    """Its marker's record (empty when there is none to read)."""
    kept: str | None = None
    """Why it is not trainstack's to delete (see the module doc); None when it is."""

    @property
    def complete(self) -> bool:
        return self.marked and self.problem is None

    @property
    def owned(self) -> bool:
        """trainstack wrote it: `prune` and `clear` may delete it."""
        return self.marked and self.kept is None


@dataclass(frozen=True)
class Skipped:
    """A marked step folder newer than the resumed step that is not a complete checkpoint."""

    step: int
    name: str
    reason: str

    def fields(self, url: str, resumed: int | None) -> dict[str, Any]:
        """The fields of the trainers' `checkpoint_skipped` record (besides the step)."""
        return {"path": f"{url}/{self.name}", "reason": self.reason, "resumed_from": resumed}

    def line(self, url: str, resumed: int | None) -> str:
        """The one line that says so."""
        then = "starting at step 0" if resumed is None else f"resuming from step {resumed}"
        return f"checkpoint {url}/{self.name} skipped: {self.reason}; {then}"


@dataclass(frozen=True)
class Cleared:
    """What `CheckpointStore.clear` deleted and which `step-N` folders it left."""

    removed: list[str]
    left: list[str]
    reasons: dict[str, str] = field(default_factory=dict)
    """Why a folder of `left` holding a marker is not trainstack's, by name."""

    def left_line(self, url: str) -> str | None:
        """The line saying what `--fresh` left, None when it left nothing."""
        if not self.left:
            return None
        if self.reasons:
            names = "; ".join(
                f"{n} ({self.reasons.get(n, f'no {MARKER} marker')})" for n in self.left
            )
            return (
                f"--fresh left {names} in {url}: not checkpoints trainstack wrote; delete "
                "them yourself if they are not wanted"
            )
        names = ", ".join(self.left)
        return (
            f"--fresh left {names} in {url}: no {MARKER} marker, so not a checkpoint "
            "trainstack wrote; delete it yourself if it is not wanted"
        )


def newest_marked(url: str, *, strict: bool = False) -> tuple[int, str] | None:
    """The newest `step-<N>` folder under `url` (a local path or `gs://`) that holds the
    `COMPLETE` marker, as (N, folder name): what `trainstack status` and `local-run` report
    as saved. `strict` (the bundled trainers' folders): only a complete checkpoint
    (`CheckpointStore.folder`); else (your own code's, whose marker is its own) any folder
    holding the marker."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(url.rstrip("/"), **storage_options(url))
    root = root.rstrip("/")
    try:
        names = [str(p).rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(root, detail=False)]
    except FileNotFoundError:
        return None
    steps = sorted((int(m[1]), name) for name in names if (m := MARKED_STEP_RE.fullmatch(name)))
    store = CheckpointStore(url, keep=1) if strict else None
    for step, name in reversed(steps):
        if store is not None:
            found = store.checked(store.folder(name)).complete
        else:
            found = bool(fs.exists(f"{root}/{name}/{MARKER}"))
        if found:
            return step, name
    return None


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_whole(fs: Any, path: str, data: bytes) -> None:
    """Write `data` to `path` of filesystem `fs` so that no reader sees it in part: locally
    a temporary file beside it, fsynced and renamed over it, then its folder fsynced; on an
    object store one object, which is visible whole or not at all."""
    from fsspec.implementations.local import LocalFileSystem

    if not isinstance(fs, LocalFileSystem):
        with fs.open(path, "wb") as f:
            f.write(data)
        return
    part = f"{path}.tmp-{uuid.uuid4().hex[:12]}"
    try:
        with open(part, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(part, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(part)
        raise
    _fsync(os.path.dirname(path) or ".")


def _publish_local(tmp: str, final: str, marker: bytes) -> None:
    """Make `tmp` durable, put `marker` in it, and rename it to `final` (see the module doc)."""
    for folder, _, files in os.walk(tmp, topdown=False):
        for name in files:
            _fsync(os.path.join(folder, name))
        _fsync(folder)
    from fsspec.implementations.local import LocalFileSystem

    write_whole(LocalFileSystem(), os.path.join(tmp, MARKER), marker)
    if os.path.lexists(final):
        # A step folder of the same name (an uncommitted leftover of a save of this step).
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync(os.path.dirname(final))


class CheckpointStore:
    """Directory bookkeeping: listing, committing and pruning step directories."""

    def __init__(
        self, url: str, *, keep: int, fingerprint: Mapping[str, Any] | None = None
    ) -> None:
        import fsspec

        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.url = url.rstrip("/")
        self.options = storage_options(self.url)
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **self.options)
        self.remote = "://" in self.url and not self.url.startswith("file://")
        self.keep = keep
        self.fingerprint = dict(fingerprint) if fingerprint is not None else None
        """Recorded in every marker this store commits; what `verify` compares with."""

    def path(self, name: str) -> str:
        return f"{self.root.rstrip('/')}/{name}"

    def url_of(self, path: str) -> str:
        """A path from `self.fs` as a URL other fsspec users can open."""
        return self.fs.unstrip_protocol(path) if self.remote else path

    def _names(self) -> list[str]:
        # gcsfs caches listings; other ranks and earlier processes change the directory.
        self.fs.invalidate_cache()
        try:
            entries = self.fs.ls(self.root, detail=False)
        except FileNotFoundError:
            return []
        return [str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries]

    def sizes(self, path: str) -> dict[str, int]:
        """Every file under the folder `path`, as {path inside it: size in bytes}."""
        return self.listing(path)[0]

    def listing(self, path: str) -> tuple[dict[str, int], dict[str, str]]:
        """Every file under the folder `path`, as {path inside it: size in bytes}, and the
        CRC32C of those the listing gives one (Cloud Storage's object resource `crc32c`;
        none locally)."""
        prefix = path.rstrip("/") + "/"
        self.fs.invalidate_cache()
        found = {
            str(p)[len(prefix) :]: info
            for p, info in self.fs.find(path, detail=True).items()
            if str(p).startswith(prefix)
        }
        sizes = {name: int(info["size"]) for name, info in found.items()}
        crcs = {n: str(i["crc32c"]) for n, i in found.items() if i.get("crc32c")}
        return sizes, crcs

    def folder(self, name: str) -> StepFolder:
        """The step folder `name` (`step-N`) as it stands: marked, complete or why not."""
        step = int(name.removeprefix("step-"))
        try:
            text = self.read_bytes(self.path(f"{name}/{MARKER}"))
        except FileNotFoundError:
            return StepFolder(step, name, False, f"it has no {MARKER} marker")
        except IsADirectoryError:
            why = f"its {MARKER} marker is a folder, not a file"
            return StepFolder(step, name, True, why, kept=why)
        try:
            record = read_marker(text, step)
        except UnreadableMarker as e:
            return StepFolder(step, name, True, str(e), kept=str(e))
        sizes, crcs = self.listing(self.path(name))
        problem = payload_problem(record, sizes, crcs)
        foreign = foreign_files(record, sizes)
        kept = None
        if foreign:
            kept = f"it holds files its {MARKER} marker does not list: {', '.join(foreign)}"
        return StepFolder(step, name, True, problem, record, kept)

    def checked(self, found: StepFolder) -> StepFolder:
        """`found` with its payload's content compared with the CRC32C its marker records,
        reading each file here (a bucket's listing already gave `folder` them)."""
        recorded = found.record.get(CRC_FIELD)
        if self.remote or not found.complete or not isinstance(recorded, dict):
            return found
        crcs = {n: file_crc32c(self.fs, self.path(f"{found.name}/{n}")) for n in recorded}
        problem = payload_problem(found.record, self.sizes(self.path(found.name)), crcs)
        return replace(found, problem=problem)

    def folders(self) -> list[StepFolder]:
        """Every `step-N` folder, oldest first."""
        found = [self.folder(name) for name in self._names() if _STEP_RE.match(name)]
        return sorted(found, key=lambda f: f.step)

    def is_complete(self, step: int) -> bool:
        return self.folder(step_name(step)).complete

    def complete_steps(self) -> list[int]:
        """Steps with a complete checkpoint, oldest first."""
        return [f.step for f in self.folders() if f.complete]

    def latest(self) -> int | None:
        steps = self.complete_steps()
        return steps[-1] if steps else None

    def new_tmp(self, step: int, token: str) -> str:
        path = self.path(f"{step_name(step)}.tmp-{token}")
        self.fs.makedirs(path, exist_ok=True)
        return path

    def commit(self, tmp: str, step: int) -> str:
        """Commit the payload written into `tmp` as `step` (see the module doc)."""
        final = self.path(step_name(step))
        marker: dict[str, Any] = {"step": step, "committed_at": time.time()}
        if self.fingerprint is not None:
            marker[FINGERPRINT_FIELD] = self.fingerprint
        sizes, crcs = self.listing(tmp)
        marker[FILES_FIELD] = sizes
        if not self.remote:
            crcs = {name: file_crc32c(self.fs, f"{tmp}/{name}") for name in sizes}
        marker[CRC_FIELD] = crcs
        data = json.dumps(marker).encode()
        if not self.remote:
            _publish_local(tmp, final, data)
            return final
        if self.fs.exists(final):
            # An uncommitted leftover of a killed save of this same step.
            self.fs.rm(final, recursive=True)
        # Object stores copy and delete anyway; gcsfs's mv first tries the moveTo API,
        # which emulators lack and answer only after a long retry loop.
        self.fs.copy(tmp + "/", final, recursive=True)
        self.write_bytes(f"{final}/{MARKER}", data)
        self.fs.rm(tmp, recursive=True)
        return final

    def saved_fingerprint(self, step: int) -> dict[str, Any] | None:
        """The fingerprint recorded in `step`'s marker; None when it records none."""
        found = self.folder(step_name(step)).record.get(FINGERPRINT_FIELD)
        return found if isinstance(found, dict) else None

    def verify(self, step: int, record: Mapping[str, Any] | None = None) -> None:
        """Raise `StateMismatch` unless `step` was committed with this store's fingerprint
        (no fingerprint given: nothing to compare, nothing raised). `record`: its marker's,
        when already read."""
        if self.fingerprint is None:
            return
        if record is None:
            record = self.folder(step_name(step)).record
        found = record.get(FINGERPRINT_FIELD)
        saved = found if isinstance(found, dict) else None
        check(saved, self.fingerprint, what=f"checkpoint step {step} in {self.url}", where=self.url)

    def resume_point(self) -> tuple[int | None, list[Skipped]]:
        """The newest complete step (None when there is none), verified against this store's
        fingerprint (raises `StateMismatch`), and the newer marked folders passed over
        because they are not complete, newest first."""
        skipped: list[Skipped] = []
        for found in reversed(self.folders()):
            if not found.marked:
                continue  # not a checkpoint trainstack wrote: never resumed, never reported
            found = self.checked(found)
            if found.problem is not None:
                skipped.append(Skipped(found.step, found.name, found.problem))
                continue
            self.verify(found.step, found.record)
            return found.step, skipped
        return None, skipped

    def resumable(self) -> int | None:
        """`resume_point`'s step."""
        return self.resume_point()[0]

    def prune(self) -> list[str]:
        """Delete stale temporaries and every step folder trainstack wrote but the newest
        `keep` complete ones; any other `step-N` folder stays (`StepFolder.owned`)."""
        folders = self.folders()
        complete = [f.name for f in folders if f.complete]
        keep = set(complete[-self.keep :])
        marked = {f.name for f in folders if f.owned}
        removed = []
        for name in self._names():
            if _TMP_RE.match(name) or (name in marked and name not in keep):
                self.fs.rm(self.path(name), recursive=True)
                removed.append(name)
        return removed

    def clear(self) -> Cleared:
        """Delete every folder trainstack wrote (its step folders, complete or not, and
        temporaries), so the next run starts from step 0; other files and `step-N` folders
        stay (`Cleared.left`, with the reason for those holding a marker)."""
        removed, left, reasons = [], [], {}
        for name in self._names():
            found = self.folder(name) if _STEP_RE.match(name) else None
            if found is not None and not found.owned:
                left.append(name)
                if found.kept is not None:
                    reasons[name] = found.kept
            elif found is not None or _TMP_RE.match(name):
                self.fs.rm(self.path(name), recursive=True)
                removed.append(name)
        return Cleared(sorted(removed), sorted(left), reasons)

    def check_writable(self) -> None:
        """Write and delete a probe file in the folder (created locally when missing), so a
        folder the run cannot write to, or cannot reach, is found before a worker starts;
        raises what the storage raised."""
        if not self.remote:
            self.fs.makedirs(self.root, exist_ok=True)
        # Named by the process: two runs sharing a folder never remove each other's probe.
        probe = self.path(f".trainstack-write-test-{os.getpid()}")
        self.write_bytes(probe, b"")
        self.fs.rm(probe)

    def write_bytes(self, path: str, data: bytes) -> None:
        with self.fs.open(path, "wb") as f:
            f.write(data)

    def read_bytes(self, path: str) -> bytes:
        with self.fs.open(path, "rb") as f:
            return bytes(f.read())

    def upload_dir(self, local_dir: str, path: str) -> None:
        """Copy the files of a local directory into `path` (a directory of this store)."""
        self.fs.makedirs(path, exist_ok=True)
        for name in sorted(os.listdir(local_dir)):
            self.fs.put_file(os.path.join(local_dir, name), f"{path}/{name}")

    def download_dir(self, path: str, local_dir: str) -> None:
        """Copy the files of `path` (a directory of this store) into a local directory."""
        os.makedirs(local_dir, exist_ok=True)
        self.fs.invalidate_cache()
        for entry in self.fs.ls(path, detail=False):
            name = str(entry).rstrip("/").rsplit("/", 1)[-1]
            self.fs.get_file(entry, os.path.join(local_dir, name))


def test_delay() -> None:
    """Sleep `TRAINSTACK_TEST_SLOW_CKPT` seconds (0 when unset) between payload and commit."""
    delay = float(os.environ.get("TRAINSTACK_TEST_SLOW_CKPT", "0") or 0)
    if delay > 0:
        time.sleep(delay)
