"""Text from a run (its log lines, what its processes printed) made safe to print on a
terminal: one rule for `trainstack logs` and `trainstack local-run`. Standard library only."""

from __future__ import annotations

import re
from typing import Final

CONTROLS: Final = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)
"""C0 controls but tab and newline, DEL, the C1 controls (U+0080-U+009F, which some
terminals obey as ESC sequences), and the bidirectional formatting characters, which make a
terminal show text in another order than it is ("Trojan Source", CVE-2021-42574): ALM,
LRM, RLM, LRE, RLE, PDF, LRO, RLO, LRI, RLI, FSI, PDI (Unicode UAX #9, section 2,
https://www.unicode.org/reports/tr9/#Directional_Formatting_Characters)."""


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` with every control character a terminal could act on (`CONTROLS`: ESC and its
    sequences, BEL, carriage return, C1's CSI..., the bidi overrides) shown as its `\\xNN`
    (`\\uNNNN`) escape, so a line cannot move the cursor, recolour or retitle the terminal
    or reorder what it shows. Tab stays, and the newline of a Cloud Logging entry that spans
    lines."""
    return CONTROLS.sub(lambda m: _escape(m.group()), text)
