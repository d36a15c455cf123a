"""ECMAScript's text for an IEEE-754 double, as RFC 8785 (JCS) §3.2.2.3 writes numbers.

RFC 8785 writes a number the way ECMAScript's ``Number::toString`` does (ECMA-262
§7.1.12.1 in the edition the RFC cites; "Number::toString" since). That algorithm takes
the *shortest* digit string ``d`` (``k`` digits) that reads back as the same double,
and a decimal point position ``n`` (the value is ``0.d × 10^n``), then places the point:

=====================  ====================================  ==================
case                   text                                  example
=====================  ====================================  ==================
``k ≤ n ≤ 21``         ``d`` then ``n − k`` zeros            ``1e20`` → ``100000000000000000000``
``0 < n ≤ 21``         ``d[:n] . d[n:]``                     ``1500.5``
``−6 < n ≤ 0``         ``0.`` then ``−n`` zeros then ``d``   ``1e-6`` → ``0.000001``
otherwise              ``d₀[.d₁…]e±(n−1)``                   ``1e+21``, ``1e-7``
=====================  ====================================  ==================

with ``-`` in front of a negative value and ``0`` for both zeros. Python's ``repr`` of
a float yields the same shortest, correctly rounded digits (David Gay's algorithm,
the one ECMAScript's note recommends); only the placement of the point and the
exponent's spelling differ (``1e-07``, ``1e+16``, ``100.0``), and this module
re-places them.
"""

from __future__ import annotations

import math


def ecmascript_number(value: float) -> str:
    """The RFC 8785 / ECMAScript text of the finite double ``value``.

    Raises ValueError for NaN and ±Infinity, which JSON and JCS cannot carry.
    Examples: ``1.0`` → ``"1"``, ``-0.0`` → ``"0"``, ``1e21`` → ``"1e+21"``,
    ``1e-7`` → ``"1e-7"``, ``2.0**60`` → ``"1152921504606847000"``.
    """
    if not math.isfinite(value):
        raise ValueError(f"{value!r} is not a finite number: JCS cannot write it")
    if value == 0:
        return "0"
    text = repr(value)
    sign = ""
    if text[0] == "-":
        sign, text = "-", text[1:]
    mantissa, _, exponent = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    if fraction == "0":  # repr's ".0" on an integral value is not a digit of d
        fraction = ""
    raw = whole + fraction
    digits = raw.lstrip("0")
    # n: where the point goes, counted from the first significant digit.
    point = len(whole) + (int(exponent) if exponent else 0) - (len(raw) - len(digits))
    digits = digits.rstrip("0")
    count = len(digits)
    if count <= point <= 21:
        body = digits + "0" * (point - count)
    elif 0 < point <= 21:
        body = f"{digits[:point]}.{digits[point:]}"
    elif -6 < point <= 0:
        body = "0." + "0" * -point + digits
    else:
        power = point - 1
        lead = digits[0] + ("." + digits[1:] if count > 1 else "")
        body = f"{lead}e{'+' if power >= 0 else '-'}{abs(power)}"
    return sign + body
