"""Builds the staff password check's Czech and Slovak word lists (staff/password_words/),
each a frequency list, most common first, one word a line, from well-kept packages:

- `cs_words`, `cs_first_names`, `cs_last_names`: the Czech language pack of zxcvbn-ts
  (`@zxcvbn-ts/language-cs` on the npm registry: common words from subtitles, first names
  and surnames, each with and without diacritics);
- `sk_words`: Slovak words by frequency (the `wordfreq` package, its Slovak list), the most
  common `SLOVAK_WORDS`, each also without diacritics;
- `cs_passwords`: the common passwords of zxcvbn-ts (`@zxcvbn-ts/language-common`, ranked
  by how often they leaked) that are a Czech or Slovak word or name, and no common English
  one (wordfreq's English list, zxcvbn's), with digits or signs around it, in their order:
  the passwords Czech and Slovak speakers choose first.

The lists are committed: the service reads them at run time and fetches nothing. Run this
after moving a package's pin (tests/clients/package.json, requirements-dev.in);
tests/test_staff_passwords.py checks the committed lists are what it builds.

    .venv/bin/python tools/password_words.py [--check]
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import unicodedata
from pathlib import Path

import msgpack
from zxcvbn.frequency_lists import FREQUENCY_LISTS

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ROOT / "tests" / "clients" / "node_modules" / "@zxcvbn-ts"
OUT = ROOT / "staff" / "password_words"
SLOVAK_WORDS = 30_000
ENGLISH_WORDS = 50_000
ENGLISH = ("english_wikipedia", "us_tv_and_film", "female_names", "male_names", "surnames")
_LETTERS = re.compile(r"^[^\W\d_]+$")


def ascii_form(word: str) -> str:
    return unicodedata.normalize("NFKD", word).encode("ascii", "ignore").decode("ascii")


def _npm(package: str, name: str) -> list[str]:
    words = json.loads((PACKAGES / package / "src" / f"{name}.json").read_text("utf-8"))
    return [str(word).lower() for word in words]


def _frequency_list(language: str, size: int) -> list[str]:
    """wordfreq's words of `language`, the `size` most common (letters only), in order."""
    import wordfreq

    data = Path(wordfreq.__file__).parent / "data" / f"small_{language}.msgpack.gz"
    with gzip.open(data) as fh:
        buckets = msgpack.load(fh, raw=False)[1:]  # the first item is the format's header
    words: list[str] = []
    for bucket in buckets:
        for word in sorted(bucket):  # one frequency: in a fixed order
            if _LETTERS.match(word) and len(word) >= 2:
                words.append(word)
        if len(words) >= size:
            break
    return words[:size]


def _slovak() -> list[str]:
    return _with_ascii(_frequency_list("sk", SLOVAK_WORDS))


def _with_ascii(words: list[str]) -> list[str]:
    """Each word, then its form without diacritics where it differs (people type both)."""
    out: list[str] = []
    for word in words:
        out.append(word)
        plain = ascii_form(word)
        if plain != word and plain:
            out.append(plain)
    return list(dict.fromkeys(out))


def build() -> dict[str, list[str]]:
    cs_words = _npm("language-cs", "commonWords")
    first, last = _npm("language-cs", "firstnames"), _npm("language-cs", "lastnames")
    sk_words = _slovak()
    ours = set(cs_words) | set(first) | set(last) | set(sk_words)
    # Not the English words and names (the subtitles lend Czech many): zxcvbn's own lists
    # have those, and the point here is what Czech and Slovak speakers choose.
    english = set(_frequency_list("en", ENGLISH_WORDS)) | {w for name in ENGLISH for w in FREQUENCY_LISTS[name]}
    passwords = []
    for password in _npm("language-common", "passwords"):
        stem = re.sub(r"[\d\W_]+$", "", re.sub(r"^[\d\W_]+", "", password))
        if len(stem) >= 3 and stem in ours and stem not in english:
            passwords.append(password)
    return {
        "cs_passwords": list(dict.fromkeys(passwords)),
        "cs_words": list(dict.fromkeys(cs_words)),
        "cs_first_names": list(dict.fromkeys(first)),
        "cs_last_names": list(dict.fromkeys(last)),
        "sk_words": sk_words,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether the committed lists are current")
    args = parser.parse_args()
    lists = build()
    stale = [name for name, words in lists.items() if _read(name) != words]
    if args.check:
        print("stale: " + ", ".join(stale) if stale else "current")
        return 1 if stale else 0
    OUT.mkdir(exist_ok=True)
    for name, words in lists.items():
        (OUT / f"{name}.txt").write_text("\n".join(words) + "\n", "utf-8")
        print(f"{name}: {len(words)} words", file=sys.stderr)
    return 0


def _read(name: str) -> list[str] | None:
    path = OUT / f"{name}.txt"
    return path.read_text("utf-8").splitlines() if path.exists() else None


if __name__ == "__main__":
    sys.exit(main())
