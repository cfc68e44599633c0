"""Phone numbers: parse anything a switchboard or an integrator sends, store E.164."""
from __future__ import annotations

from functools import lru_cache

import phonenumbers


# A switchboard asks about the same callers again and again (has-active-request on every
# call), and parsing costs about 40 µs; the answer depends on the two arguments alone.
@lru_cache(maxsize=8192)
def to_e164(raw: str, default_region: str) -> str | None:
    """E.164 form of `raw`, or None when it is not a possible phone number.

    National numbers take the clinic's country as their region; `00` is read as the
    international prefix (as written in most of Europe) whatever the region's own is.
    """
    text = raw.strip()
    if text.startswith("00"):
        text = "+" + text[2:]
    try:
        number = phonenumbers.parse(text, default_region.upper())
    except phonenumbers.NumberParseException:
        return None
    if not phonenumbers.is_possible_number(number):
        return None
    return phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)
