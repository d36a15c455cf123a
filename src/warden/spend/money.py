"""Money: ``decimal.Decimal`` amounts in one ISO 4217 currency, never floats.

Amounts arrive as decimal strings (``"12.50"``) or JSON integers; a binary
float is refused because it cannot say which decimal it meant. Currencies are
three uppercase letters and are never mixed: adding two currencies is an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from warden.errors import InputRejected

_CURRENCY = re.compile(r"^[A-Z]{3}$")
_PLAIN_DECIMAL = re.compile(r"^[0-9]{1,16}(\.[0-9]{1,18})?$", re.ASCII)
#: Plain digits of any length: what the bounded pattern refuses only for its length.
_LONG_DECIMAL = re.compile(r"^([0-9]+)(?:\.([0-9]+))?$", re.ASCII)
#: Amounts are kept to this many fractional digits (sub-cent prices exist; 6 is ample).
MAX_SCALE = 6
MAX_AMOUNT = Decimal("1e15")
#: The most integer digits an amount below MAX_AMOUNT has.
MAX_DIGITS = 15


class MoneyError(InputRejected):
    """An amount or currency that Warden will not use."""

    reason = "invalid_amount"


def parse_amount(value: Any, *, field: str = "amount", allow_zero: bool = True) -> Decimal:
    """A non-negative Decimal from a decimal string, an int or a Decimal.

    Raises :class:`MoneyError` for floats, booleans, non-numbers, NaN/Infinity,
    negatives, more than 6 fractional digits, or amounts ≥ 10^15.
    """
    if isinstance(value, bool | float):
        raise MoneyError(
            f"{field} must be a decimal string or an integer, not {value!r}", field=field
        )
    if isinstance(value, int | Decimal):
        amount = Decimal(value)
    elif isinstance(value, str):
        # Plain ASCII digits only: Decimal() alone would also read "1_0", "+1", " 1 ",
        # "1e0" or non-ASCII digits, turning a malformed amount into a different one.
        if value.startswith("-") and _PLAIN_DECIMAL.match(value[1:]):
            raise MoneyError(
                f"{field} must be {'≥' if allow_zero else '>'} 0, got {value}", field=field
            )
        if not _PLAIN_DECIMAL.match(value):
            long = _LONG_DECIMAL.match(value)
            if long is None:
                raise MoneyError(
                    f"{field} {value!r} is not a decimal string (plain ASCII digits, optionally "
                    'a point and more digits, e.g. "12.50")',
                    field=field,
                )
            # Plain digits, only longer: the specific refusal, read off the text before
            # Decimal() sees it (decision 924): its scale, then its size.
            if len((long.group(2) or "").rstrip("0")) > MAX_SCALE:
                raise MoneyError(
                    f"{field} has more than {MAX_SCALE} fractional digits", field=field
                )
            if len(long.group(1).lstrip("0")) > MAX_DIGITS:
                raise MoneyError(f"{field} is too large", field=field)
        try:
            amount = Decimal(value)
        except InvalidOperation as exc:  # pragma: no cover - the pattern admits only decimals
            raise MoneyError(f"{field} {value!r} is not a decimal number", field=field) from exc
    else:
        raise MoneyError(f"{field} must be a decimal string or an integer", field=field)
    if not amount.is_finite():
        raise MoneyError(f"{field} must be finite", field=field)
    if amount < 0 or (amount == 0 and not allow_zero):
        raise MoneyError(
            f"{field} must be {'≥' if allow_zero else '>'} 0, got {value}", field=field
        )
    exponent = amount.as_tuple().exponent
    if isinstance(exponent, int) and exponent < -MAX_SCALE:
        # More fractional digits than kept: only zeros may be past the 6th, and they
        # count for nothing (decision 924), so the amount is stored and echoed as its
        # shortest spelling, as "12.5" is (decision 941). Ordinary amounts skip this.
        amount = _within_scale(amount, field)
    if amount >= MAX_AMOUNT:
        raise MoneyError(f"{field} is too large", field=field)
    return amount


def _within_scale(amount: Decimal, field: str) -> Decimal:
    """``amount`` (more than 6 fractional digits written) without its trailing
    fractional zeros and never with a positive exponent (``100.0000000`` is ``100``, not
    ``1E+2``). Raises :class:`MoneyError` when a digit past the 6th is not zero.
    ``quantize`` is exact here (``normalize`` alone rounds to the context's 28 digits,
    which could drop a nonzero 30th digit)."""
    try:
        kept = amount.quantize(_SCALE)
    except InvalidOperation as exc:  # more digits than the context holds: ≥ 10^22
        raise MoneyError(f"{field} is too large", field=field) from exc
    if kept != amount:
        raise MoneyError(f"{field} has more than {MAX_SCALE} fractional digits", field=field)
    short = kept.normalize()
    exponent = short.as_tuple().exponent
    return short.quantize(_ONE) if isinstance(exponent, int) and exponent > 0 else short


_SCALE = Decimal(1).scaleb(-MAX_SCALE)
_ONE = Decimal(1)


def parse_currency(value: Any) -> str:
    """An ISO 4217-shaped code (three uppercase letters); raises :class:`MoneyError`."""
    if not isinstance(value, str) or not _CURRENCY.match(value):
        raise MoneyError(
            f"currency must be three uppercase letters, got {value!r}",
            reason="invalid_currency",
            field="currency",
        )
    return value


@dataclass(frozen=True)
class Money:
    """An amount in one currency."""

    amount: Decimal
    currency: str

    def __add__(self, other: Money) -> Money:
        self._same(other)
        return Money(self.amount + other.amount, self.currency)

    def __sub__(self, other: Money) -> Money:
        self._same(other)
        return Money(self.amount - other.amount, self.currency)

    def _same(self, other: Money) -> None:
        if other.currency != self.currency:
            raise MoneyError(
                f"cannot combine {self.currency} with {other.currency}", reason="currency_mismatch"
            )

    def wire(self) -> str:
        """The amount as a plain decimal string (no exponent)."""
        return format(self.amount, "f")


def to_wire(amount: Decimal) -> str:
    """A Decimal as a plain decimal string (``"12.50"``, never ``1.25E+1``)."""
    return format(amount, "f")
