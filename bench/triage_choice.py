"""The triage's balance between finding more and inventing, chosen on one part of the sets
and reported on another.

Run from the repository root, after ``bench/triage_bench.py`` has transcribed the held-out
and unseen sets (its cache) and ``bench/transcription_bench.py`` the labelled set (its
``--json`` run)::

    .venv/bin/python bench/triage_choice.py --run RUN.json [--source project|steered] [--json out.json]

The knobs (``triage/matching.py``, ``triage/reading.py``): what a word matched only by its
letters counts (``FUZZY``), the letters a word needs for that (``MIN_FUZZY``), from how many
letters two edits are allowed (``LONG_FUZZY``), the score a type or the urgency flag needs
(``SURE``) and a type's lead over the next (``LEAD``). Every combination of the grid below
is scored per language on the **choosing part** (the labelled set and the held-out set, both
read while the words and rules were written) and one is chosen by a rule written before any
figure was seen: among the combinations with at most 5 % wrong types and at most 10 % of calm
messages flagged, the most messages typed right plus urgent messages flagged; a tie keeps the
shipped value. Then the shipped and the chosen settings are scored on the **reporting part**
(``bench/triage_unseen.py``, never read while choosing). Nothing here changes the code:
the chosen values are written into the modules by hand, with these figures.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import triage_bench as tb  # noqa: E402

GRID: dict[str, tuple[float, ...]] = {
    "FUZZY": (0.5, 1.0),
    "MIN_FUZZY": (5, 6, 7),
    "LONG_FUZZY": (8, 9, 11),
    "SURE": (0.5, 1.0),
    "LEAD": (1.5, 2.0),
}
MAX_WRONG = 0.05
MAX_FALSE_URGENT = 0.10


def _apply(knobs: dict[str, float]) -> None:
    from triage import matching, reading

    for name, value in knobs.items():
        setattr(matching if hasattr(matching, name) and name not in ("SURE", "LEAD") else reading, name, value)


def shipped() -> dict[str, float]:
    from triage import matching, reading

    return {name: getattr(matching if hasattr(matching, name) else reading, name) for name in GRID}


def clips_and_texts(run: Path, source: str, caches: list[Path]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every clip of the three sets with its transcript from `source`: the labelled set's
    from a transcription benchmark run (its side of that name), the others' from the
    triage benchmark's cache."""
    side = "project" if source == "project" else "steer"
    data = json.loads(run.read_text(encoding="utf-8"))
    clips: list[dict[str, Any]] = []
    texts: dict[str, Any] = {}
    for x in data["clips"]:
        label = x["label"]
        if label["kind"] != "speech" or side not in x:
            continue
        clips.append(dict(label, set="labelled"))
        texts[label["file"]] = {source: {"text": x[side]["text"], "language": x[side]["language"]}}
    cache = tb._load(caches)
    for name in ("heldout", "unseen"):
        for clip in tb.held_out(None, 1, name):
            got = cache.get(tb._clip_key(source, clip))
            if got:
                clips.append(clip)
                texts[clip["file"]] = {source: got}
    return clips, texts


def figures_for(clips: list[dict[str, Any]], texts: dict[str, Any], language: str) -> dict[str, Any]:
    mine = [c for c in clips if c["language"] == language]
    rows = [r for r in tb.score(mine, texts) if r["reader"] == "triage"]
    f = tb.figures(rows)
    f["right_n"] = sum(r["right"] and r["suggested"] is not None for r in rows)
    f["typed"] = sum(r["suggested"] is not None for r in rows) / len(rows) if rows else None
    f["flagged_n"] = sum(r["flagged"] for r in rows if r["urgent"])
    return f


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="a bench/transcription_bench.py --json run")
    parser.add_argument("--source", choices=("project", "steered"), default="project")
    parser.add_argument("--cache", type=Path, action="append", dest="caches", default=None)
    parser.add_argument("--json", default=None, metavar="OUT")
    args = parser.parse_args(argv)
    clips, texts = clips_and_texts(args.run, args.source, args.caches or [tb.CACHE])
    choosing = [c for c in clips if c["set"] in ("labelled", "heldout")]
    reporting = [c for c in clips if c["set"] == "unseen"]
    base = shipped()
    out: dict[str, Any] = {"shipped": base, "languages": {}}
    for language in ("cs", "en"):
        scored = []
        for values in itertools.product(*GRID.values()):
            knobs = dict(zip(GRID, values))
            _apply(knobs)
            f = figures_for(choosing, texts, language)
            scored.append((knobs, f))
        _apply(base)
        ok = [(k, f) for k, f in scored if f["wrong"] <= MAX_WRONG and (f["false_urgent"] or 0) <= MAX_FALSE_URGENT]
        best = max(
            ok,
            key=lambda kf: (kf[1]["right_n"] + kf[1]["flagged_n"], kf[0] == base),
            default=(base, figures_for(choosing, texts, language)),
        )
        chosen = best[0]
        result: dict[str, Any] = {"chosen": chosen, "admissible": len(ok), "of": len(scored)}
        for part, members in (("choosing", choosing), ("reporting", reporting)):
            for name, knobs in (("shipped", base), ("chosen", chosen)):
                _apply(knobs)
                result[f"{part} {name}"] = figures_for(members, texts, language)
        _apply(base)
        out["languages"][language] = result
        print(f"\n## {language}: chosen {json.dumps(chosen)} ({len(ok)} of {len(scored)} combinations admissible)\n")
        print("| part | settings | messages | typed | right type | wrong type | urgent flagged | calm flagged |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for part in ("choosing", "reporting"):
            for name in ("shipped", "chosen"):
                f = result[f"{part} {name}"]
                calm = f["messages"] - f["urgent"]
                print(
                    f"| {part} | {name} | {f['messages']} | {tb._pct(f['typed'])} | {f['right_n']} | "
                    f"{tb._pct(f['wrong'])} | {f['flagged_n']} of {f['urgent']} | "
                    f"{round((f['false_urgent'] or 0) * calm)} of {calm} |"
                )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
