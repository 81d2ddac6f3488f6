"""The test suite. `REPO_ROOT` is this checkout: the tests read its files (stacks, examples,
README) directly, while trainstack itself finds them through `trainstack.infra.project`."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
