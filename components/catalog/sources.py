"""Where the catalog's facts come from: the team's fact sheet, cited by every table."""

from __future__ import annotations

from typing import Final

FACT_SHEET: Final = "reference/gcp-facts.md (compiled 2026-11)"
"""The team's checked facts about Google Cloud; each table names its sections."""
