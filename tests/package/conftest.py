"""The wheel is built and installed once for every test of tests/package."""

from __future__ import annotations

import pytest

from tests.package.wheel import Installed, build_installed


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    return build_installed(tmp_path_factory.mktemp("wheel"))
