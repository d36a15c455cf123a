"""Whether a human's reason says anything: one rule for every reason Warden requires
(a budget request's reason, a deny on the approval desk, REST or web; decisions 926,
942, 973).

A reason needs a visible character: a Unicode letter, number, punctuation or symbol
(categories L*, N*, P*, S*). Whitespace, controls (``\\u0000``) and format characters
(``\\u200b`` zero-width space, ``\\u2060`` word joiner) alone say nothing.
"""

from __future__ import annotations

import unicodedata

#: Why a reason was refused, for every caller's own error format.
NO_REASON = (
    "a reason needs a visible character (whitespace, control and invisible characters "
    "are no reason)"
)


def says_something(text: str) -> bool:
    """True if ``text`` has a visible character (module docstring)."""
    return any(unicodedata.category(c)[0] in "LNPS" for c in text)
