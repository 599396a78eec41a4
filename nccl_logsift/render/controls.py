"""Control characters of log text made visible, for output a terminal interprets.

A log line is text its writer chose, and a terminal obeys what it is sent: ``ESC[2J`` clears the screen,
``ESC]0;…BEL`` sets the window title, ``ESC]8;;URL`` makes a hyperlink, ``ESC[8m`` hides what follows, and
the bidi overrides (U+202A–U+202E, U+2066–U+2069) draw text in another order than it is stored. rich, which
draws the terminal report, passes all of them through. Like ``less`` and ripgrep, the terminal report and the
live view show them instead: C0 controls and DEL in caret notation (``^[``, ``^G``, ``^?``), C1 controls and
the bidi controls as ``<U+202E>``. Tab and newline are kept. The HTML pages show log text the same way (on
top of escaping it: render/html.py); the JSON escapes for its own format and keeps the text as it was.
"""

from __future__ import annotations

_KEPT = {"\t", "\n"}
_BIDI = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_TABLE = {
    **{c: f"^{chr(c + 0x40)}" for c in range(0x20) if chr(c) not in _KEPT},
    0x7F: "^?",
    **{c: f"<U+{c:04X}>" for c in [*range(0x80, 0xA0), *_BIDI]},
}


def visible(text: str) -> str:
    """``text`` with every control character a terminal would act on replaced by a visible stand-in."""
    return text.translate(_TABLE)
