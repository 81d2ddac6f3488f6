"""Local paths and `gs://` through fsspec/gcsfs, emulator-aware, framework-free.

GCS emulator: gcsfs honours `STORAGE_EMULATOR_HOST`; with it set this module asks gcsfs for
anonymous access and turns off gcsfs's experimental bucket-type probe
(`GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false`), which otherwise waits on gRPC timeouts against
an emulator. Both must happen before gcsfs is imported.
"""

from __future__ import annotations

import os
from typing import Any


def storage_options(url: str) -> dict[str, Any]:
    """fsspec options for `url`; anonymous access when talking to a GCS emulator."""
    if url.startswith("gs://") and os.environ.get("STORAGE_EMULATOR_HOST"):
        os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
        return {"token": "anon"}
    return {}


def url_to_fs(url: str) -> tuple[Any, str]:
    """The fsspec filesystem and path for a local path or `gs://` URL (emulator-aware)."""
    import fsspec

    return fsspec.core.url_to_fs(url, **storage_options(url))
