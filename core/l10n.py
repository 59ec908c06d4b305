"""Numbers, money, dates and relative times in the active language (Babel's CLDR data):
`1.234,56` and `R$ 1.234,56` in pt-BR, `1.234,56 €` in es, `$1,234.56` in en. End-user pages
only; the API and the back-office keep their fixed formats."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation

from babel import Locale
from babel import dates as babel_dates
from babel import numbers as babel_numbers
from django.conf import settings
from django.utils import timezone, translation

# The fiat a user most likely thinks in, by page language (Brazil: BRL; Spain: EUR).
FIAT_FOR_LANGUAGE = {"pt-br": "BRL", "es": "EUR", "en": "USD"}
MINUS = "\u2212"  # "UTC−03:00", as CLDR writes an offset


def locale_name() -> str:
    return translation.to_locale(translation.get_language() or settings.LANGUAGE_CODE)


def fiat_currency() -> str:
    language = (translation.get_language() or "en").lower()
    return FIAT_FOR_LANGUAGE.get(language) or FIAT_FOR_LANGUAGE.get(language.split("-")[0], "USD")


def finite_decimal(value) -> Decimal | None:
    """`value` as a finite Decimal, or None for what is not a number (or NaN/Infinity)."""
    try:
        number = Decimal(str(value))
    except (InvalidOperation, ValueError, TypeError):
        return None
    return number if number.is_finite() else None


def format_amount(value) -> str:
    """A token amount with every significant decimal it has ("1.5" → "1,5" in pt-BR)."""
    number = finite_decimal(value)
    if number is None:
        return str(value or "")
    places = max(-number.normalize().as_tuple().exponent, 0)
    pattern = "#,##0" + ("." + "0" * places if places else "")
    return babel_numbers.format_decimal(
        number, format=pattern, locale=locale_name(), decimal_quantization=False
    )


def format_money(value, currency: str) -> str:
    number = finite_decimal(value)
    if number is None:
        return ""
    return babel_numbers.format_currency(number, currency, locale=locale_name())


def format_percent(value) -> str:
    number = finite_decimal(value)
    if number is None:
        return str(value or "")
    return babel_numbers.format_percent(
        number / 100, format="#,##0.##%", locale=locale_name(), decimal_quantization=False
    )


def zone_abbreviation(value: datetime) -> str:
    """The short name of the zone `value` is in, at that moment: the one the page's language
    has for it (CLDR, as the browser's own Intl writes it: "BRT" in pt-BR), else the zone
    database's letters ("CET", "EST"), else its offset from UTC ("UTC−03:00", never the bare
    "-03" the database has for zones without letters). Never the IANA name."""
    for name in (
        babel_dates.get_timezone_name(value, "short", locale=locale_name()),
        value.tzname() or "",
    ):
        if name.isalpha():
            return name
    offset = int((value.utcoffset() or timedelta()).total_seconds()) // 60
    if offset == 0:
        return "UTC"
    hours, minutes = divmod(abs(offset), 60)
    return f"UTC{'+' if offset > 0 else MINUS}{hours:02d}:{minutes:02d}"


def format_datetime(value: datetime | None) -> str:
    """Date and time to the minute in the active time zone (the user's on end-user pages and
    in their e-mails), with that zone's short name: "6 de dez. de 2026 09:32 BRT",
    "6 dic 2026, 13:32 CET", "Dec 6, 2026, 7:32 AM EST". The language's medium date and
    short time, joined as the language joins them."""
    if value is None:
        return ""
    if timezone.is_naive(value):
        value = timezone.make_aware(value, UTC)
    local = timezone.localtime(value)
    locale = locale_name()
    joined = (
        str(Locale.parse(locale).datetime_formats["medium"])
        .replace("{1}", babel_dates.format_date(local, "medium", locale=locale))
        .replace("{0}", babel_dates.format_time(local, "short", tzinfo=local.tzinfo, locale=locale))
    )
    return f"{joined} {zone_abbreviation(local)}"


def format_relative(value: datetime | None, *, now: datetime | None = None) -> str:
    """ "3 hours ago", "em 14 minutos", "dentro de 2 días"."""
    if value is None:
        return ""
    delta: timedelta = value - (now or timezone.now())
    return babel_dates.format_timedelta(
        delta, add_direction=True, threshold=1.0, locale=locale_name()
    )


def format_duration(seconds: int) -> str:
    return babel_dates.format_timedelta(
        timedelta(seconds=seconds), threshold=1.0, locale=locale_name()
    )
