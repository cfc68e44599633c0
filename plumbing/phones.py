"""Phone numbers: parse anything a switchboard or an integrator sends, or a caller says,
and store E.164."""

from __future__ import annotations

import re
from functools import lru_cache

import phonenumbers


# A switchboard asks about the same callers again and again (has-active-request on every
# call), and parsing costs about 40 µs; the answer depends on the arguments alone.
@lru_cache(maxsize=8192)
def to_e164(raw: str, region: str, *, any_00: bool = True, valid: bool = False, as_said: bool = False) -> str | None:
    """E.164 form of `raw`, or None when it is not a phone number by these rules.

    National numbers take `region` (the clinic's country) as their region. The defaults
    suit what a switchboard or an integrator sends: a possible number, with `00` read as
    the international prefix (as written in most of Europe) whatever the region's own is.
    A callback number a caller said (`voicemail.spoken_numbers`) asks for more:

    - `any_00=False`: only the region's own international prefix counts as one;
    - `valid=True`: a valid number (assigned ranges), not merely a possible one;
    - `as_said=True`: the digits of `raw` (maybe after '+') are that number with at most
      a prefix in front: the country code ("+420", "00420", "420") and a trunk zero ("0905
      ..." in Slovakia, "+44 (0)7911 ..."). phonenumbers forgives more than that; a
      number to call back must not.
    """
    text = raw.strip()
    if any_00 and text.startswith("00"):
        text = "+" + text[2:]
    try:
        number = phonenumbers.parse(text, region.upper())
    except phonenumbers.NumberParseException:
        return None
    if not (phonenumbers.is_valid_number(number) if valid else phonenumbers.is_possible_number(number)):
        return None
    if as_said and not _only_prefixed(text, number, region):
        return None
    return phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)


def _only_prefixed(said: str, number: phonenumbers.PhoneNumber, region: str) -> bool:
    """Whether the digits `said` are `number` with at most its country code and trunk
    prefix in front (after '+'), or, without '+', the trunk prefix alone or the country
    code after the region's international prefix."""
    national = phonenumbers.national_significant_number(number)
    digits = said.lstrip("+")
    if not digits.endswith(national):
        return False
    head, code = digits[: len(digits) - len(national)], str(number.country_code)
    theirs = phonenumbers.PhoneMetadata.metadata_for_region(phonenumbers.region_code_for_number(number) or "")
    trunk = (theirs.national_prefix or "") if theirs else ""
    international = {code, code + trunk}
    if said.startswith("+"):
        return head in international
    home = phonenumbers.PhoneMetadata.metadata_for_region(region.upper())
    exit_code = home.international_prefix if home else None  # "00" in Europe
    return head in international | {"", trunk} or any(
        bool(exit_code and head.endswith(h) and re.fullmatch(exit_code, head[: -len(h)])) for h in international
    )


@lru_cache(maxsize=4096)
def for_display(raw: str, region: str) -> tuple[str, str | None]:
    """A stored number as people read it, and its E.164 form for a `tel:` link: the
    international format with the country's own grouping (`+420 608 333 444`, the same
    for a clinic's own callers and for foreign ones, so one list never mixes two ways of
    writing). What is not a phone number (a withheld caller's `anonymous`) is shown as it
    is, with no link."""
    e164 = to_e164(raw, region)
    if e164 is None:
        return raw, None
    number = phonenumbers.parse(e164)
    return phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.INTERNATIONAL), e164
