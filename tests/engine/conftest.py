"""Fixtures of the engine tier."""

from __future__ import annotations

import pytest

from tests.engine.double import PluginLaunch, plugin_launch
from tests.engine.programs import REPO_ROOT


@pytest.fixture(scope="session")
def launch() -> PluginLaunch:
    """How the engine starts the dynamic-provider plugin for this repository's project."""
    return plugin_launch(REPO_ROOT)
