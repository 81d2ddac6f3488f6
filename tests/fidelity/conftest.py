"""A GCS emulator for the fidelity tests: the plan's own buckets, on localhost."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Iterator

import pytest

from tests.fakes.gcs_emulator import running_gcs_emulator


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[str]:
    """A gcp-storage-emulator on a free local port; its URL (STORAGE_EMULATOR_HOST)."""
    with running_gcs_emulator() as host:
        yield host


@pytest.fixture
def make_bucket(gcs_emulator: str) -> Callable[[str], None]:
    """Create a bucket (by the name the plan gives it) in the emulator."""

    def create(name: str) -> None:
        request = urllib.request.Request(
            f"{gcs_emulator}/storage/v1/b?project=fidelity-project",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200

    return create
