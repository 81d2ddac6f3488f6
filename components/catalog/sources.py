"""Where the catalog's facts come from: the team's fact sheet, cited by every table."""

from __future__ import annotations

from typing import Final

FACT_SHEET: Final = "the trainstack team's GCP fact sheet (compiled 2026-11)"
"""The team's checked facts about Google Cloud; each table names its sections. The sheet is
kept with the team's notes, not in this repository, so it is named rather than given as a
path: every table also cites the Google page or repository the fact came from."""
