"""The `COMPLETE` marker of a checkpoint step folder: what it records, how it is read, and
when a folder is a complete checkpoint and when it is trainstack's own.

The marker is JSON: `step` (the folder's), `committed_at`, the settings fingerprint of the
run that wrote it (`trainstack.trainers.common.fingerprint`), `files` (every payload file's
size in bytes) and `crc32c` (every payload file's CRC32C, base64 of its 4 big-endian bytes:
the form of Cloud Storage's object resource field `crc32c`, "CRC32c checksum, as described
in RFC 4960, Appendix B; encoded using base64 in big-endian byte order", storage.v1
discovery document, schemas.Object.properties.crc32c). Markers written before `files` or
`crc32c` existed are still read: no `files`, no payload check; no `crc32c`, sizes only.

Why CRC32C and not SHA-256: the digest guards against damage (a disk, a copy, an editor),
not forgery (whoever can rewrite `state.pt` can rewrite the marker too), and it is computed
on every save: google-crc32c (already installed with gcsfs's google-cloud-storage) reads
about 5 GB/s where hashlib's SHA-256 reads 0.6 GB/s on the 2-core build machine, 0.12 s
against 1 s for the benchmark's 608 MB state. In a bucket it costs no read at all: the
listing carries every object's `crc32c`, computed by Cloud Storage on upload and kept by a
copy of the same bytes.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

MARKER: Final = "COMPLETE"
FILES_FIELD: Final = "files"
"""The marker's record of the payload: {path inside the step folder: size in bytes}."""
CRC_FIELD: Final = "crc32c"
"""The marker's record of the payload's content: {path inside the step folder: CRC32C}."""
WRITTEN_FIELDS: Final = ("step", "committed_at")
"""The fields every marker trainstack ever wrote holds."""
MARKER_TMP_RE: Final = re.compile(rf"^{MARKER}\.tmp-[0-9a-f]+$")
"""A marker's temporary name while it is written (`checkpoint.write_whole`)."""
_CHUNK: Final = 8 << 20


class UnreadableMarker(ValueError):
    """A `COMPLETE` marker that does not read as trainstack's record; the message says why."""


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_marker(text: bytes, step: int | None = None) -> dict[str, Any]:
    """The record a marker holds; `UnreadableMarker` naming why it holds none. `step`: the
    folder's step, which the record must name."""
    if not text.strip():
        raise UnreadableMarker(
            f"its {MARKER} marker is empty (a write cut short, e.g. by a full disk)"
        )
    try:
        record = json.loads(text)
    except ValueError:  # UnicodeDecodeError is one too
        raise UnreadableMarker(
            f"its {MARKER} marker is not JSON (a write cut short, e.g. by a full disk)"
        ) from None
    if not isinstance(record, dict):
        raise UnreadableMarker(f"its {MARKER} marker holds no JSON object")
    files = record.get(FILES_FIELD)
    if files is not None and not (
        isinstance(files, dict) and all(_is_count(v) for v in files.values())
    ):
        raise UnreadableMarker(f"its {MARKER} marker's {FILES_FIELD} are not file sizes")
    crcs = record.get(CRC_FIELD)
    if crcs is not None and not (
        isinstance(crcs, dict) and all(isinstance(v, str) for v in crcs.values())
    ):
        raise UnreadableMarker(f"its {MARKER} marker's {CRC_FIELD} are not checksums")
    if step is not None:
        missing = [name for name in WRITTEN_FIELDS if name not in record]
        if missing:
            raise UnreadableMarker(
                f"its {MARKER} marker lacks {' and '.join(missing)} (not one trainstack wrote)"
            )
        if record["step"] != step or not _is_count(record["step"]):
            raise UnreadableMarker(
                f"its {MARKER} marker says step {json.dumps(record['step'])[:40]}, not {step}"
            )
    return record


def payload_problem(
    record: Mapping[str, Any],
    sizes: Mapping[str, int],
    crcs: Mapping[str, str] | None = None,
) -> str | None:
    """Why the files of a step folder (`sizes`: path inside the folder -> bytes; `crcs`:
    -> CRC32C, where known without reading, as in a bucket's listing) are not the payload
    its marker `record` records; None when they are, or when it records none."""
    files = record.get(FILES_FIELD)
    if not isinstance(files, dict):
        return None
    for name, size in sorted(files.items()):
        found = sizes.get(name)
        if found is None:
            return f"{name} is missing (its {MARKER} marker records {size} bytes)"
        if found != size:
            return f"{name} holds {found} bytes where its {MARKER} marker records {size}"
    return content_problem(record, crcs or {})


def content_problem(record: Mapping[str, Any], crcs: Mapping[str, str]) -> str | None:
    """Why a payload file's CRC32C (`crcs`, the ones known) is not the one its marker
    `record` records; None when each known one is (a file not in `crcs` is not checked)."""
    recorded = record.get(CRC_FIELD)
    if not isinstance(recorded, dict):
        return None
    for name, crc in sorted(recorded.items()):
        found = crcs.get(name)
        if found is not None and found != crc:
            return (
                f"{name}'s content changed since it was saved (CRC32C {found} where its "
                f"{MARKER} marker records {crc})"
            )
    return None


def crc32c_of(chunks: Iterable[bytes]) -> str:
    """The CRC32C of the concatenated `chunks`, in Cloud Storage's form (see the module doc)."""
    import google_crc32c

    checksum = google_crc32c.Checksum()
    for chunk in chunks:
        checksum.update(chunk)
    return base64.b64encode(checksum.digest()).decode()


def file_crc32c(fs: Any, path: str) -> str:
    """The CRC32C of the file `path` of filesystem `fs`, read in 8 MiB chunks."""
    with fs.open(path, "rb") as f:
        return crc32c_of(iter(lambda: bytes(f.read(_CHUNK)), b""))


def foreign_files(record: Mapping[str, Any], names: Iterable[str]) -> list[str]:
    """The files of a step folder (`names`, paths inside it) that its marker `record` does
    not list and trainstack does not leave there (the marker and its temporaries): empty
    when the record lists none (a marker from before `files`)."""
    files = record.get(FILES_FIELD)
    if not isinstance(files, dict):
        return []
    return sorted(n for n in names if n not in files and n != MARKER and not MARKER_TMP_RE.match(n))
