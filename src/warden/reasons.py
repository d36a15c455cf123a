"""Whether a human's reason says anything: one rule for every reason Warden requires
(a budget request's reason, a deny on the approval desk, REST or web; decisions 926,
942, 973).

A reason needs a visible character: a Unicode letter, number, punctuation or symbol
(categories L*, N*, P*, S*). Whitespace, controls (``\\u0000``) and format characters
(``\\u200b`` zero-width space, ``\\u2060`` word joiner) alone say nothing, nor do the
few letters and symbols that render blank: the Hangul fillers (default-ignorable code
points of category Lo) and the braille blank.
"""

from __future__ import annotations

import unicodedata

#: Why a reason was refused, for every caller's own error format.
NO_REASON = (
    "a reason needs a visible character (whitespace, control and invisible characters "
    "are no reason)"
)


#: Letters and symbols that render as nothing: the Hangul fillers (Unicode marks them
#: Default_Ignorable_Code_Point) and U+2800 BRAILLE PATTERN BLANK.
_BLANK = frozenset("\u115f\u1160\u3164\uffa0\u2800")


def says_something(text: str) -> bool:
    """True if ``text`` has a visible character (module docstring)."""
    return any(unicodedata.category(c)[0] in "LNPS" and c not in _BLANK for c in text)
