"""The words a transcript is read for: the shipped ones, and what a clinic's own look like.

A clinic gives each of its request types the words that suggest it, per language, and may
start from a shipped set (`PRESETS`: prescription renewal, appointment, cancellation,
results, sick note, advice); it lists the words that may mean urgency per language, or keeps
the shipped ones (`URGENCY`). The shipped words are general Czech and English medical-office
language (what callers say to a GP's reception), not words picked from any set of
recordings: how well they do is measured (bench/triage_bench.py), never fitted.

A line is a word ("recept"), a phrase whose words come in this order with at most
`GAP` other words between them ("zrušit termín"), or parts joined by " + " that must all
be somewhere in the message ("horečka + dítě": a fever, said about a child). Words are
matched with their inflections (Hunspell's stems, the ending of a word) and, for words the
dictionary does not know (a transcript's misspellings), by their letters
(`triage/matching.py`).

`CALM` phrases take urgency back ("nothing urgent"): a word of urgency inside one does not
count. They are the service's, not a clinic's.
"""

from __future__ import annotations

import re
from typing import Any

GAP = 2  # other words allowed between two words of a phrase
MAX_WORDS = 300  # per language of one list
MAX_LENGTH = 80  # characters of one line
LANGUAGE = re.compile(r"^[a-z]{2,3}$")

# key: (Czech name, English name), then the words per language.
PRESET_NAMES: dict[str, tuple[str, str]] = {
    "prescription": ("Recept", "Prescription renewal"),
    "appointment": ("Objednání", "Appointment"),
    "cancellation": ("Zrušení termínu", "Cancellation"),
    "results": ("Výsledky", "Results"),
    "sick_note": ("Neschopenka", "Sick note"),
    "advice": ("Dotaz", "Advice"),
}

PRESETS: dict[str, dict[str, list[str]]] = {
    "prescription": {
        "cs": [
            "recept",
            "erecept",
            "e-recept",
            "předepsat",
            "předepsání",
            "předpis",
            "lék",
            "léky",
            "prášky",
            "tablety",
            "medikace",
            "inhalátor",
            "inzulín",
            "mast",
            "kapky",
            "lékárna",
            "došly léky",
            "dochází léky",
            "kód receptu",
        ],
        "en": [
            "prescription",
            "repeat prescription",
            "refill",
            "medication",
            "medicine",
            "tablets",
            "pills",
            "inhaler",
            "insulin",
            "pharmacy",
            "run out",
            "dose",
        ],
    },
    "appointment": {
        "cs": [
            "objednat",
            "objednání",
            "objednávka",
            "přeobjednat",
            "termín",
            "volný termín",
            "přeložit termín",
            "přeložit",
            "prohlídka",
            "preventivní prohlídka",
            "kontrola",
            "vyšetření",
            "návštěva",
            "můžu přijít",
            "můžeme přijít",
            "očkování",
            "odběr",
        ],
        "en": [
            "appointment",
            "book",
            "booking",
            "check up",
            "checkup",
            "visit",
            "come in",
            "reschedule",
            "move my appointment",
            "examination",
            "vaccination",
            "see the doctor",
        ],
    },
    "cancellation": {
        "cs": [
            "zrušit",
            "zrušení",
            "rušit",
            "zrušit termín",
            "rušit termín",
            "zrušit objednání",
            "nepřijdu",
            "nemůžu přijít",
            "nemohu přijít",
            "omluvit z termínu",
            "odhlásit",
        ],
        "en": [
            "cancel",
            "cancellation",
            "cancel my appointment",
            "cancel the appointment",
            "can't make it",
            "cannot come",
            "won't be able to come",
        ],
    },
    "results": {
        "cs": [
            "výsledky",
            "výsledek",
            "výsledky krve",
            "výsledky z laboratoře",
            "laboratoř",
            "rozbor",
            "rozbory",
            "nález",
        ],
        "en": [
            "results",
            "result",
            "test results",
            "blood results",
            "lab",
            "laboratory",
        ],
    },
    "sick_note": {
        "cs": [
            "neschopenka",
            "neschopenku",
            "eneschopenka",
            "pracovní neschopnost",
            "prodloužit neschopenku",
            "nemocenská",
            "ošetřovné",
            "potvrzení pro zaměstnavatele",
            "zaměstnavatel",
        ],
        "en": [
            "sick note",
            "fit note",
            "doctor's note",
            "sick leave",
            "off work",
            "employer",
        ],
    },
    "advice": {
        "cs": [
            "poradit",
            "poradit se",
            "rada",
            "dotaz",
            "otázka",
            "zeptat",
            "konzultace",
            "co mám dělat",
            "mám přijít",
            "mluvit s lékařem",
            "mluvit se sestrou",
        ],
        "en": [
            "advice",
            "question",
            "ask",
            "should i",
            "what should i do",
            "talk to the doctor",
            "speak to the nurse",
        ],
    },
}

# Words that may mean a message cannot wait: symptoms a reception is taught to pass on at
# once (pain, bleeding, breathing, the chest, fainting, an allergic reaction, a fall, a
# fever or vomiting in a child, pregnancy) and callers' own words for haste.
_CHILD_CS = ("dítě", "dítěti", "syn", "syna", "synek", "synovi", "dcera", "dceři", "miminko", "malý", "malá")
_CHILD_EN = ("child", "son", "daughter", "baby", "kid", "toddler")
URGENCY: dict[str, list[str]] = {
    "cs": [
        "bolest",
        "bolí",
        "bolesti",
        "krvácí",
        "krvácení",
        "dýchat",
        "dýchá",
        "dušnost",
        "dusí",
        "hrudník",
        "na hrudi",
        "bezvědomí",
        "omdlel",
        "omdlela",
        "mdloba",
        "křeče",
        "alergická reakce",
        "otok",
        "oteklý",
        "otekly",
        "těhotná",
        "těhotenství",
        "upadl",
        "upadla",
        "spadl",
        "spadla",
        "pád",
        "zlomenina",
        "mrtvice",
        "infarkt",
        "záchranka",
        "pohotovost",
        "co nejdřív",
        "co nejdříve",
        "co nejrychleji",
        "hned",
        "ihned",
        "okamžitě",
        "naléhavé",
        "naléhavě",
        "urgentní",
        "spěchá",
        "akutní",
        *(f"horečka + {child}" for child in _CHILD_CS),
        *(f"teplota + {child}" for child in _CHILD_CS),
        *(f"zvrací + {child}" for child in _CHILD_CS),
    ],
    "en": [
        "pain",
        "painful",
        "hurts",
        "bleeding",
        "breathe",
        "breathing",
        "short of breath",
        "chest",
        "unconscious",
        "fainted",
        "faint",
        "seizure",
        "allergic reaction",
        "swollen",
        "swelling",
        "pregnant",
        "pregnancy",
        "fall",
        "fell",
        "stroke",
        "heart attack",
        "ambulance",
        "emergency",
        "as soon as possible",
        "right away",
        "immediately",
        "urgent",
        "urgently",
        *(f"fever + {child}" for child in _CHILD_EN),
        *(f"temperature + {child}" for child in _CHILD_EN),
        *(f"vomiting + {child}" for child in _CHILD_EN),
    ],
}

# A request said not to be needed, or already settled ("recept už mám", "I don't need a
# prescription"): a type's words in the same clause (between two stops or commas, or an
# "ale"/"but") do not count for it. The service's, not a clinic's.
SETTLED: dict[str, list[str]] = {
    "cs": [
        "nepotřebuji",
        "nepotřebuju",
        "nepotřebujeme",
        "už mám",
        "už máme",
        "už jsem dostal",
        "už jsem dostala",
        "jsem už dostal",
        "jsem už dostala",
        "dostal jsem",
        "dostala jsem",
        "už jsem měl",
        "už jsem měla",
        "už nemusím",
        "nemusím",
        "už není potřeba",
        "není potřeba",
    ],
    "en": [
        "don't need",
        "do not need",
        "no longer need",
        "not need",
        "no need",
        "already got",
        "already have",
        "already had",
        "already received",
        "got it already",
    ],
}

# Words most messages hold (greetings, "please", "call me", numbers, "I would like"): a
# transcript's word that the dictionary does not know and that is as near to one of them as
# to a list's word is that everyday word misheard, never a type's or urgency's word found by
# its letters. Chosen on the labelled set's scripts (the words in at least a tenth of its
# messages, five letters or more, as the letter-level match needs), not on its transcripts.
EVERYDAY: dict[str, list[str]] = {
    "cs": [
        "dobrý",
        "dobrej",
        "prosím",
        "prosil",
        "prosila",
        "zavolejte",
        "zavolat",
        "zavoláte",
        "číslo",
        "čísle",
        "jedna",
        "čtyři",
        "dvacet",
        "třicet",
        "čtyřicet",
        "padesát",
        "šedesát",
        "sedmdesát",
        "osmdesát",
        "devadesát",
        "devět",
        "deset",
        "děkuji",
        "děkuju",
        "chtěla",
        "chtěl",
        "chtěli",
        "potřeboval",
        "potřebovala",
        "potřebuji",
        "potřebuju",
        "kvůli",
        "zítra",
        "shledanou",
        "volám",
        "volala",
        "volal",
        "haló",
        "jmenuji",
        "jmenuju",
        "prosím vás",
        "zpátky",
        "telefon",
        "ráno",
        "odpoledne",
        "pondělí",
        "úterý",
        "středa",
        "čtvrtek",
        "pátek",
        "týden",
    ],
    "en": [
        "hello",
        "please",
        "number",
        "calling",
        "morning",
        "afternoon",
        "thank",
        "thanks",
        "could",
        "would",
        "about",
        "three",
        "seven",
        "eight",
        "doctor",
        "again",
        "today",
        "tomorrow",
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
    ],
}

# A type whose words, when found, take over the words of the types it outranks: a
# cancellation always names the appointment it cancels ("zrušit termín na kontrolu"), and
# its own verb, often misheard, must not lose to them. By preset (a clinic's types take
# their preset's place).
OUTRANKS: dict[str, tuple[str, ...]] = {"cancellation": ("appointment",)}

CALM: dict[str, list[str]] = {
    "cs": [
        "nic naléhavého",
        "není to naléhavé",
        "nespěchá",
        "není to akutní",
        "nic akutního",
        "nic vážného",
        "bez bolesti",
    ],
    "en": [
        "nothing urgent",
        "not urgent",
        "no rush",
        "no hurry",
        "not an emergency",
        "nothing serious",
        "no pain",
    ],
}


def preset_words(preset: str | None) -> dict[str, list[str]]:
    return {language: list(words) for language, words in PRESETS.get(preset or "", {}).items()}


def type_words(setting: dict[str, Any] | None) -> dict[str, list[str]]:
    """A request type's words per language: its shipped set's (`preset`), then its own."""
    if not setting:
        return {}
    out = preset_words(setting.get("preset"))
    for language, words in (setting.get("words") or {}).items():
        out[language] = list(dict.fromkeys([*out.get(language, []), *words]))
    return out


def outranks(presets: dict[str, list[str]]) -> dict[str, list[str]]:
    """Which types outrank which (`OUTRANKS`), from the types of each preset (type ids by
    preset name)."""
    out: dict[str, list[str]] = {}
    for higher, lower in OUTRANKS.items():
        for type_id in presets.get(higher, []):
            others = [t for name in lower for t in presets.get(name, [])]
            if others:
                out[type_id] = others
    return out


def urgency_words(setting: dict[str, list[str]] | None) -> dict[str, list[str]]:
    """A clinic's urgency words per language: its own list, or the shipped ones (None)."""
    return {language: list(words) for language, words in (URGENCY if setting is None else setting).items()}


def problem(line: str) -> str | None:
    """Why a line cannot be a word list's line (None: it can)."""
    if not line.strip():
        return "is empty"
    if len(line) > MAX_LENGTH:
        return f"is longer than {MAX_LENGTH} characters"
    for part in line.split("+"):
        if not re.search(r"\w", part):
            return "has a part without a letter (write parts as 'fever + child')"
    return None


def clean(lines: list[str]) -> list[str]:
    """The lines as stored: trimmed, single-spaced, lower case, each once, in their order."""
    return list(dict.fromkeys(" + ".join(" ".join(p.split()) for p in line.lower().split("+")) for line in lines))


def from_text(text: str) -> list[str]:
    """A console textarea's lines (or commas) as a list."""
    return [line.strip() for line in re.split(r"[\n,;]", text.replace("\r", "")) if line.strip()]
