"""The inbox's reading of voice messages: how often the suggested request type is right or
wrong, and how many urgent messages are flagged, against plain keyword matching.

Run from the repository root (faster-whisper, the reference engine, is a benchmark-only
dependency: ``.venv/bin/pip install -r bench/requirements.txt``)::

    .venv/bin/python bench/triage_bench.py [--set labelled|heldout|unseen|both|all] [--only SUBSTRING]
        [--every N] [--start N] [--steer] [--threads 1] [--model var/models/ggml-base.bin]
        [--no-reference] [--no-project]
        [--cache FILE ...] [--cached-only] [--json out.json]

The sets:

* **labelled**: the speech clips of ``tests/audio/voicemails`` (``tests/voicemail_set.py``),
  each message on two of three telephone channels, with the intent and urgency its script
  means (``tests/audio/make_voicemails.py`` ``INTENTS``);
* **heldout**: ``HELD_OUT`` below, messages written for this check and for nothing else
  (the shipped words were chosen before any of them was read back), synthesized with the
  set's voices and rendered on the set's channels by ``make_voicemails.py``'s own functions
  into ``var/bench/triage-heldout/`` (made once, kept). Needs the Debian packages that
  script names (festival and its Czech voices, espeak-ng, sox, lame).
* **unseen**: ``bench/triage_unseen.py``, messages written for reporting alone, each in two
  voices on two channels, into ``var/bench/triage-unseen/``. The labelled and held-out sets
  have both been read while choosing words and rules; this one has not, so its figures are
  the ones to quote (docs/transcription.md).

Each clip is transcribed by the project's engine (``transcription.get_transcriber``, the
languages ``--languages`` to detect among, as a clinic with those caller languages) and by
the reference (faster-whisper on the same Whisper base weights, language given, as
``bench/transcription_bench.py`` runs it). Transcripts are kept in
``var/bench/triage-transcripts.json`` by engine, clip and the clip's size and time, so
scoring again after a change to the reading transcribes nothing (``--fresh`` forgets them).

Each transcript, and the script itself (what a perfect transcript would say), is read two
ways with the shipped words (``triage/vocabulary.py``: the six shipped request types, the
shipped urgency words):

* **triage**: ``triage.reading.read``, what the service does;
* **keywords** (the baseline): every line of the same lists looked for as written, whole
  words, case and diacritics ignored, no stems, no misspellings, no negation, no calm
  phrases; the type with the most lines found (a tie: none), urgent when any urgency line is
  found.

Reported per language and channel, for each side (transcript source x reader): messages,
suggestion accuracy (the suggestion is the message's intent, or a type it could fairly be
filed under, "other" being no suggestion), wrong-type rate (a type was suggested and it is
neither), urgent recall (flagged among the urgent), false-urgent rate (flagged among the
rest), and for Czech urgent messages how many keep an urgency word in the transcript (the
keyword baseline finds one) and how many of those the triage leaves unflagged.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import unicodedata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.triage_unseen import UNSEEN  # noqa: E402

CACHE = ROOT / "var" / "bench" / "triage-transcripts.json"
SET_DIRS = {"heldout": ROOT / "var" / "bench" / "triage-heldout", "unseen": ROOT / "var" / "bench" / "triage-unseen"}
LANGUAGES = ("cs", "en")
CHANNELS = ("ulaw8k", "mp3_8k", "noisy_mp3_8k")

# Messages written for the held-out check: (key, text, intent, also, urgent). Callers as a
# GP's reception hears them, none taken from the labelled set's scripts.
HELD_OUT: dict[str, list[tuple[str, str, str, tuple[str, ...], bool]]] = {
    "cs": [
        (
            "tehotna_bolest",
            "Dobrý den, tady Klára Dvořáková. Jsem těhotná a od rána mám silné bolesti břicha. "
            "Zavolejte mi prosím co nejdřív.",
            "advice",
            ("other",),
            True,
        ),
        (
            "prasky_dosly",
            "Dobrý den, tady Josef Beneš. Došly mi prášky na cholesterol, potřeboval bych nový "
            "recept, stačí elektronicky. Děkuji.",
            "prescription",
            (),
            False,
        ),
        (
            "syn_horecka",
            "Dobrý den, volá Marie Kovářová. Můj syn má od noci vysokou horečku a je hodně "
            "unavený. Můžeme dnes přijít?",
            "appointment",
            ("advice",),
            True,
        ),
        (
            "nemuzu_prijit",
            "Dobrý den, tady Petr Novák. Zítra v osm na kontrolu nemůžu přijít, jsem nemocný. "
            "Prosím zrušte mi ten termín.",
            "cancellation",
            (),
            False,
        ),
        (
            "vysledky_moc",
            "Dobrý den, Alena Marková. Chtěla bych se zeptat na výsledky moči, co jsem nesla v pondělí.",
            "results",
            ("advice",),
            False,
        ),
        (
            "neschopenka_chripka",
            "Dobrý den, tady Tomáš Král. Mám chřipku a potřebuji neschopenku, do práce nemůžu. Děkuji.",
            "sick_note",
            (),
            False,
        ),
        (
            "upadla_babicka",
            "Dobrý den, tady Jana Šimková. Babička dnes upadla v koupelně, bolí ji kyčel a "
            "nemůže vstát. Co máme dělat?",
            "advice",
            ("other",),
            True,
        ),
        (
            "dotaz_davkovani",
            "Dobrý den, tady Lenka Horáková. Mám dotaz k dávkování antibiotik, nevím, jestli "
            "je mám brát před jídlem. Nic naléhavého.",
            "advice",
            ("prescription",),
            False,
        ),
        (
            "prohlidka_ridic",
            "Dobrý den, tady Karel Svoboda. Potřeboval bych se objednat na prohlídku kvůli "
            "řidičskému průkazu. Hodí se mi odpoledne.",
            "appointment",
            (),
            False,
        ),
        (
            "dusnost",
            "Haló, tady Věra Malá. Manžel se špatně dýchá a má modré rty. Prosím, zavolejte hned.",
            "other",
            ("advice",),
            True,
        ),
        (
            "krvaceni_nos",
            "Dobrý den, tady Ondřej Pokorný. Synovi už půl hodiny krvácí nos a nepřestává to. Co mám dělat?",
            "advice",
            ("other",),
            True,
        ),
        (
            "prelozit_odber",
            "Dobrý den, tady Eva Procházková. Potřebovala bych přeložit odběr krve z úterý na čtvrtek, jestli to jde.",
            "appointment",
            (),
            False,
        ),
        (
            "zprava_specialista",
            "Dobrý den, tady Pavel Černý. Posílám zprávu od kardiologa, chtěl bych vědět, jestli jste ji dostali.",
            "other",
            ("results",),
            False,
        ),
        (
            "recept_mast",
            "Dobrý den, tady Hana Veselá. Prosím o předepsání masti na ekzém, ta stará mi došla.",
            "prescription",
            (),
            False,
        ),
        (
            "omdlela",
            "Dobrý den, volám za maminku, dnes ráno omdlela v kuchyni, teď už je při vědomí. Prosím o radu.",
            "advice",
            ("other",),
            True,
        ),
        (
            "zaneschopnost_prodlouzit",
            "Dobrý den, tady Martin Dušek. Prosím o prodloužení pracovní neschopnosti, záda pořád bolí.",
            "sick_note",
            (),
            False,
        ),
        ("zavolejte", "Dobrý den, tady Zdena Kolářová, prosím o zavolání, děkuji.", "other", (), False),
        (
            "ockovani_chripka",
            "Dobrý den, chtěl bych se objednat na očkování proti chřipce, nejlépe příští týden.",
            "appointment",
            (),
            False,
        ),
    ],
    "en": [
        (
            "pregnant_bleeding",
            "Hello, this is Emma Lewis. I'm twelve weeks pregnant and I've started bleeding "
            "this morning. Please call me back as soon as possible.",
            "advice",
            ("other",),
            True,
        ),
        (
            "repeat_inhaler",
            "Hi, it's Tom Harris. Could I get a repeat prescription for my inhaler please? Thanks.",
            "prescription",
            (),
            False,
        ),
        (
            "cancel_friday",
            "Hello, Sarah Jones here. I need to cancel my appointment on Friday, I'm away. Sorry.",
            "cancellation",
            (),
            False,
        ),
        (
            "blood_results",
            "Hi, this is Peter Moore. I'm calling to ask whether my blood test results have come back.",
            "results",
            (),
            False,
        ),
        (
            "fit_note",
            "Hello, this is Dan Clarke. I need a fit note for work, I've had a bad back for two weeks.",
            "sick_note",
            (),
            False,
        ),
        (
            "daughter_fever",
            "Hi, my daughter is two and she has had a fever since last night and won't eat. Can someone call me?",
            "advice",
            ("appointment",),
            True,
        ),
        (
            "chest_pain",
            "Hello, my name is Robert King. I have chest pain and I feel short of breath. Please ring me.",
            "advice",
            ("other",),
            True,
        ),
        (
            "book_checkup",
            "Good morning, I'd like to book a check up for my son before he starts school.",
            "appointment",
            (),
            False,
        ),
        (
            "question_diet",
            "Hi, I have a question about the diet the doctor gave me, nothing urgent, call me when you can.",
            "advice",
            (),
            False,
        ),
        (
            "fell_stairs",
            "Hello, my father fell down the stairs an hour ago and his wrist is swollen. What should we do?",
            "advice",
            ("other",),
            True,
        ),
    ],
}


# ------------------------------------------------------------------ the sets


def labelled(only: str | None, every: int, start: int = 0) -> list[dict[str, Any]]:
    from tests import voicemail_set as vs

    clips = [
        dict(x, path=str(vs.clip_path(x)), set="labelled")
        for x in vs.load_labels()
        if x["kind"] == "speech" and (not only or only in x["file"])
    ]
    return clips[start :: max(every, 1)]


def held_out(only: str | None, every: int, name: str = "heldout") -> list[dict[str, Any]]:
    """The held-out (or unseen) messages as clips: made once into their folder with the
    labelled set's own functions (voices, levels, line, beep, channels), then read from there."""
    folder = SET_DIRS[name]
    labels_file = folder / "labels.json"
    if not labels_file.is_file():
        _render(name)
    clips = [
        dict(x, path=str(folder / x["file"]), set=name)
        for x in json.loads(labels_file.read_text(encoding="utf-8"))
        if not only or only in x["file"]
    ]
    return clips[:: max(every, 1)]


def _takes(name: str, language: str, i: int, mv: Any) -> list[tuple[str, str]]:
    """(voice, channel) of each rendering of a set's i-th message in `language`."""
    if name == "heldout":  # one take: another voice than the labelled message at i
        voices = mv.CZECH_MORE_VOICES if language == "cs" else mv.ENGLISH_MORE_VOICES
        return [(voices[(i + 3) % len(voices)], CHANNELS[i % len(CHANNELS)])]
    # unseen: two takes, a Festival voice and an espeak-ng one (the lists alternate), on two channels
    if language == "cs":
        first, second = mv.CZECH_MORE_VOICES[(i + 5) % 8], mv.CZECH_VOICES[(i + 2) % 8]
    else:
        first, second = mv.ENGLISH_MORE_VOICES[(i + 1) % 8], mv.ENGLISH_VOICES[(i + 2) % 5]
    pair = mv.CHANNEL_PAIRS[i % len(mv.CHANNEL_PAIRS)]
    return [(first, pair[0]), (second, pair[1])]


def _render(name: str) -> None:
    import importlib.util
    import tempfile

    spec = importlib.util.spec_from_file_location("make_voicemails", ROOT / "tests" / "audio" / "make_voicemails.py")
    assert spec and spec.loader
    mv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mv)
    folder = SET_DIRS[name]
    messages = HELD_OUT if name == "heldout" else UNSEEN
    folder.mkdir(parents=True, exist_ok=True)
    mv.OUT = folder  # write() renders into OUT
    labels = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        crowd = [
            mv.synthesize(text, voice, tmp, 0.9)
            for (_, text, *_), voice in zip(
                messages["cs"][:4], ["espeak:cs+m1", "espeak:cs+f3", "festival:czech_machac", "espeak:cs+m5"]
            )
        ]
        beds = mv.noise_beds(mv.seeded(f"{name}-beds"), crowd)
        for language in ("cs", "en"):
            for i, (key, text, intent, also, urgent) in enumerate(messages[language]):
                for voice, channel in _takes(name, language, i, mv):
                    prefix = "heldout" if name == "heldout" else f"{name}_{mv.voice_tag(voice)}"
                    rng = mv.seeded(f"{prefix}_{language}_{key}")
                    rate = float(rng.choice([0.9, 1.0, 1.0, 1.1]))
                    level = float(rng.choice([-29.0, -25.0, -22.0, -20.0, -17.0]))
                    sound = mv.at_level(mv.synthesize(text, voice, tmp, rate), level)
                    rec = mv.voicemail(sound, rng)
                    if rec["audio"].size < 8 * mv.RATE:
                        rec = mv.voicemail(sound, rng, tail=6.0)
                    stem = f"{language}_{key}_{mv.voice_tag(voice)}_{channel}"
                    out = mv.write(rec, channel, stem, tmp, mv.seeded(stem), beds, 10 ** (level / 20))
                    labels.append(
                        {
                            "file": out["file"],
                            "kind": "speech",
                            "language": language,
                            "text": text,
                            "key": key,
                            "intent": intent,
                            "also": list(also),
                            "urgent": urgent,
                            "voice": voice,
                            "channel": channel,
                            "duration": out["duration"],
                        }
                    )
    (folder / "labels.json").write_text(json.dumps(labels, ensure_ascii=False, indent=1), encoding="utf-8")


# ------------------------------------------------------------------ transcripts (cached)


def _clip_key(engine: str, clip: dict[str, Any]) -> str:
    path = Path(clip["path"])
    stat = path.stat()
    return f"{engine}|{clip['set']}|{path.name}|{stat.st_size}|{int(stat.st_mtime)}"


def transcribe(clips: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, dict[str, str]]:
    """{clip file: {"project": text, "reference": text}}, from the cache or transcribed now."""
    cache: dict[str, Any] = {} if args.fresh else _load(args.caches)
    engines = _engines(args)
    todo = {e: [c for c in clips if _clip_key(e, c) not in cache] for e in engines}
    for side in ("project", "steered"):
        if not todo.get(side):
            continue
        from bench.transcription_bench import steering_prompts
        from voicemail import transcription as tx

        engine = tx.get_transcriber("pywhispercpp", args.model, args.threads)
        engine.warm_up()
        steer = steering_prompts() if side == "steered" else None
        for n, clip in enumerate(todo[side], 1):
            began = time.perf_counter()
            t = engine.transcribe(clip["path"], args.languages.split(","), country="CZ", steer=steer)
            cache[_clip_key(side, clip)] = {"text": t.text, "language": t.language}
            print(
                f"{side} {n}/{len(todo[side])} {clip['file']} {time.perf_counter() - began:.1f} s",
                file=sys.stderr,
            )
            _save(cache, args.caches[0])
    if todo.get("reference"):
        import faster_whisper

        from bench.transcription_bench import REFERENCE_OPTIONS, ct2_model_dir

        model = faster_whisper.WhisperModel(
            str(ct2_model_dir()), device="cpu", compute_type="int8", cpu_threads=args.threads
        )
        for n, clip in enumerate(todo["reference"], 1):
            began = time.perf_counter()
            segments, _ = model.transcribe(clip["path"], language=clip["language"], **REFERENCE_OPTIONS)
            text = " ".join(s.text.strip() for s in segments).strip()
            cache[_clip_key("reference", clip)] = {"text": text, "language": clip["language"]}
            print(
                f"reference {n}/{len(todo['reference'])} {clip['file']} {time.perf_counter() - began:.1f} s",
                file=sys.stderr,
            )
            _save(cache, args.caches[0])
    out: dict[str, dict[str, str]] = {}
    for clip in clips:
        row = {"script": {"text": clip["text"], "language": clip["language"]}}
        for e in engines:
            row[e] = cache[_clip_key(e, clip)]
        out[clip["file"]] = row  # type: ignore[assignment]
    return out  # type: ignore[return-value]


def _engines(args: argparse.Namespace) -> list[str]:
    """The transcript sources asked for: the project's engine, the same with the clinic's
    words as a prompt on a second decoding (``--steer``), the reference."""
    return (
        ([] if args.no_project else ["project"])
        + (["steered"] if args.steer else [])
        + ([] if args.no_reference else ["reference"])
    )


def _load(paths: list[Path]) -> dict[str, Any]:
    """The transcripts of every cache given (several runs at once each keep their own)."""
    cache: dict[str, Any] = {}
    for path in paths:
        if path.is_file():
            cache.update(json.loads(path.read_text()))
    return cache


def _save(cache: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(cache, ensure_ascii=False, indent=0))
    partial.replace(path)


# ------------------------------------------------------------------ the two readers


def _fold(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def _words(text: str) -> str:
    return " " + " ".join(re.findall(r"[^\W_]+(?:['’][^\W_]+)*", _fold(text))) + " "


def keywords(
    text: str, language: str | None, types: dict[str, dict[str, list[str]]], urgency: dict[str, list[str]]
) -> tuple[str | None, bool]:
    """The baseline: lines found as written (whole words, case and diacritics ignored)."""
    hay = _words(text)

    def found(line: str) -> bool:
        return all(_words(part) in hay for part in line.split("+") if part.strip())

    def lines(words: dict[str, list[str]]) -> list[str]:
        return words.get(language or "", []) if language in words else [w for ws in words.values() for w in ws]

    hits = {t: sum(found(line) for line in lines(words)) for t, words in types.items()}
    ranked = sorted(hits.values(), reverse=True)
    best = [t for t, n in hits.items() if n == ranked[0] and n > 0]
    return (best[0] if len(best) == 1 else None), any(found(line) for line in lines(urgency))


def readers() -> dict[str, Any]:
    from triage.reading import Vocabulary, read
    from triage.vocabulary import PRESETS, URGENCY, outranks

    # As a clinic that kept the presets has them (triage/clinic_words.py): each preset a
    # type, a cancellation outranking the appointment words it names.
    words = Vocabulary(
        types={k: dict(v) for k, v in PRESETS.items()},
        urgency=dict(URGENCY),
        outranks=outranks({k: [k] for k in PRESETS}),
    )

    def triage(text: str, language: str | None) -> tuple[str | None, bool]:
        r = read(text, language, words)
        return r.type_id, r.urgent

    def baseline(text: str, language: str | None) -> tuple[str | None, bool]:
        return keywords(text, language, words.types, words.urgency)

    return {"triage": triage, "keywords": baseline}


# ------------------------------------------------------------------ scoring


def score(clips: list[dict[str, Any]], texts: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per clip, source and reader."""
    rows = []
    for reader_name, reader in readers().items():
        for clip in clips:
            for source, t in texts[clip["file"]].items():
                suggested, urgent = reader(t["text"], t["language"])
                right = {clip["intent"], *clip.get("also", [])}
                rows.append(
                    {
                        "set": clip["set"],
                        "file": clip["file"],
                        "language": clip["language"],
                        "channel": clip["channel"],
                        "source": source,
                        "reader": reader_name,
                        "suggested": suggested,
                        "intent": clip["intent"],
                        "right": (suggested or "other") in right,
                        "wrong": suggested is not None and suggested not in right,
                        "voice": clip.get("voice") or "",
                        "urgent": clip["urgent"],
                        "flagged": urgent,
                        "kept": keywords(t["text"], t["language"], {}, readers_words()[1])[1],
                    }
                )
    return rows


_WORDS: list[Any] = []


def readers_words() -> tuple[dict[str, Any], dict[str, list[str]]]:
    if not _WORDS:
        from triage.vocabulary import PRESETS, URGENCY

        _WORDS.append((PRESETS, URGENCY))
    return _WORDS[0]  # type: ignore[no-any-return]


def figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    urgent = [r for r in rows if r["urgent"]]
    calm = [r for r in rows if not r["urgent"]]
    kept = [r for r in urgent if r["kept"]]
    return {
        "messages": n,
        "accuracy": sum(r["right"] for r in rows) / n if n else None,
        "wrong": sum(r["wrong"] for r in rows) / n if n else None,
        "urgent": len(urgent),
        "recall": sum(r["flagged"] for r in urgent) / len(urgent) if urgent else None,
        "false_urgent": sum(r["flagged"] for r in calm) / len(calm) if calm else None,
        "kept": len(kept),
        "kept_unflagged": sum(not r["flagged"] for r in kept),
    }


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.0f} %"


def report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for set_name in sorted({r["set"] for r in rows}):
        print(f"\n## {set_name}\n")
        print(
            "| language, channel | source | reader | messages | accuracy | wrong type | urgent recall | "
            "false urgent | urgent keeping a word: unflagged |"
        )
        print("|---|---|---|---:|---:|---:|---:|---:|---:|")
        mine = [r for r in rows if r["set"] == set_name]
        groups = [
            (f"{lang} {ch}", lambda r, lang=lang, ch=ch: r["language"] == lang and r["channel"] == ch)
            for lang in LANGUAGES
            for ch in CHANNELS
        ]
        groups += [(f"{lang} all", lambda r, lang=lang: r["language"] == lang) for lang in LANGUAGES]
        groups += [("all", lambda r: True)]
        for name, member in groups:
            for source in ("project", "steered", "reference", "script"):
                for reader in ("triage", "keywords"):
                    some = [r for r in mine if member(r) and r["source"] == source and r["reader"] == reader]
                    if not some:
                        continue
                    f = figures(some)
                    out.setdefault(set_name, {}).setdefault(name, {}).setdefault(source, {})[reader] = f
                    print(
                        f"| {name} | {source} | {reader} | {f['messages']} | {_pct(f['accuracy'])} | "
                        f"{_pct(f['wrong'])} | {_pct(f['recall'])} ({f['urgent']}) | {_pct(f['false_urgent'])} | "
                        f"{f['kept_unflagged']} of {f['kept']} |"
                    )
    return out


def counts(rows: list[dict[str, Any]]) -> str:
    """right / WRONG / no type, urgent flagged, calm flagged: as counts."""
    urgent = [r for r in rows if r["urgent"]]
    calm = [r for r in rows if not r["urgent"]]
    right = sum(r["right"] and r["suggested"] is not None for r in rows)
    none = sum(r["suggested"] is None for r in rows)
    return (
        f"{len(rows)} | {right} | {sum(r['wrong'] for r in rows)} | {none} | "
        f"{sum(r['flagged'] for r in urgent)} of {len(urgent)} | {sum(r['flagged'] for r in calm)} of {len(calm)}"
    )


def breakdown(rows: list[dict[str, Any]], source: str) -> None:
    """Per set, language, and then channel, voice and intent: the triage's counts on one
    source's transcripts (a type counted right only when one was suggested)."""
    mine = [r for r in rows if r["reader"] == "triage" and r["source"] == source]
    for set_name in sorted({r["set"] for r in mine}):
        for lang in LANGUAGES:
            some = [r for r in mine if r["set"] == set_name and r["language"] == lang]
            if not some:
                continue
            print(f"\n### {set_name}, {lang}, {source}'s transcripts, triage\n")
            print("| by | value | messages | right type | WRONG type | no type | urgent flagged | calm flagged |")
            print("|---|---|---:|---:|---:|---:|---:|---:|")
            print(f"| all | | {counts(some)} |")
            for by in ("channel", "voice", "intent"):
                for value in sorted({r[by] for r in some}):
                    print(f"| {by} | {value} | {counts([r for r in some if r[by] == value])} |")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=["labelled", "heldout", "unseen", "both", "all"], default="both")
    parser.add_argument("--only", default=None, help="clips whose file name contains this")
    parser.add_argument("--every", type=int, default=1, help="every Nth clip")
    parser.add_argument("--start", type=int, default=0, help="with --every: from the Nth labelled clip (0-based)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--model", default=str(ROOT / "var" / "models" / "ggml-base.bin"))
    parser.add_argument("--languages", default="cs,en", help="the project engine detects among these")
    parser.add_argument("--no-reference", action="store_true", help="the project's engine only")
    parser.add_argument(
        "--no-project",
        action="store_true",
        help="the reference engine only (the readers compared "
        "on the same transcripts; the project's engine takes minutes a clip on a loaded machine)",
    )
    parser.add_argument(
        "--steer",
        action="store_true",
        help="also the project's engine with the shipped words as a prompt on a second decoding of each message",
    )
    parser.add_argument("--fresh", action="store_true", help="transcribe again, the cache forgotten")
    parser.add_argument(
        "--cache",
        type=Path,
        action="append",
        dest="caches",
        default=None,
        help="the transcripts' cache: new ones are kept in the first, all are read (runs at "
        "once each keep their own, as each rewrites it)",
    )
    parser.add_argument(
        "--cached-only",
        action="store_true",
        help="score only the clips whose transcripts are cached (transcribe nothing)",
    )
    parser.add_argument("--json", default=None, metavar="OUT")
    args = parser.parse_args(argv)
    args.caches = args.caches or [CACHE]
    clips = (
        (held_out(args.only, args.every) if args.set in ("heldout", "both", "all") else [])
        + (held_out(args.only, args.every, "unseen") if args.set in ("unseen", "all") else [])
        + (labelled(args.only, args.every, args.start) if args.set in ("labelled", "both", "all") else [])
    )
    if args.cached_only:
        cache = _load(args.caches)
        engines = _engines(args)
        clips = [c for c in clips if all(_clip_key(e, c) in cache for e in engines)]
    texts = transcribe(clips, args)
    rows = score(clips, texts)
    summary = report(rows)
    for source in ("project", "steered", "reference", "script"):
        if any(r["source"] == source for r in rows):
            breakdown(rows, source)
    wrongs = [
        r
        for r in rows
        if r["reader"] == "triage"
        and r["source"] == "project"
        and (r["wrong"] or (r["urgent"] and r["kept"] and not r["flagged"]))
    ]
    if wrongs:
        print(
            "\nThe project's transcripts read wrong by the triage (a wrong type, or urgent words kept but not flagged):"
        )
        for r in wrongs:
            print(
                f"- {r['set']} {r['file']}: suggested {r['suggested']}, meant {r['intent']}"
                + (", urgent not flagged" if r["urgent"] and r["kept"] and not r["flagged"] else "")
            )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"rows": rows, "summary": summary, "texts": texts}, ensure_ascii=False, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
