"""The labelled voicemail set is consistent: files, labels, counts, long_voicemail."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import phonenumbers
import pytest
import soundfile as sf

from tests import voicemail_set

LABELS = voicemail_set.load_labels()
KINDS = ("speech", "empty", "unintelligible")
CHANNELS = ("ulaw8k", "mp3_8k", "noisy_mp3_8k")


@pytest.mark.parametrize("label", LABELS, ids=[x["file"] for x in LABELS])
def test_every_clip_decodes_as_labelled(label: dict) -> None:
    path = voicemail_set.clip_path(label)
    audio, rate = sf.read(path, dtype="float32")
    assert rate == 8000 and audio.ndim == 1
    assert abs(audio.size / rate - label["duration"]) < 0.01
    assert label["kind"] in KINDS and label["channel"] in CHANNELS
    assert path.suffix == (".wav" if label["channel"] == "ulaw8k" else ".mp3")
    if label["channel"] == "ulaw8k":
        assert sf.info(str(path)).subtype == "ULAW"
    assert label["message"] == (label["kind"] == "speech")
    if label["kind"] == "speech":
        assert label["language"] in ("cs", "en") and label["text"] and label["voice"]
        assert 0.3 < label["onset"] < label["speech_end"] < label["duration"]
        assert 8 <= label["duration"] <= 30
    else:
        assert label["text"] is None and label["callback"] is None
    if label["kind"] == "empty":
        assert 3 <= label["duration"] <= 20 and label["onset"] is None
    if label["callback"] is not None:
        number = phonenumbers.parse(label["callback"])
        assert phonenumbers.is_valid_number(number) and phonenumbers.region_code_for_number(number) == "CZ"
        assert phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164) == label["callback"]


def test_the_set_has_what_it_promises() -> None:
    assert len({x["file"] for x in LABELS}) == len(LABELS)
    speech = [x for x in LABELS if x["kind"] == "speech"]
    kinds = Counter(x["kind"] for x in LABELS)
    languages = Counter(x["language"] for x in speech)
    assert languages["cs"] >= 78 and languages["en"] >= 66  # 39 and 33 messages, each on two channels
    assert kinds["empty"] >= 6 and kinds["unintelligible"] >= 12
    assert sum(1 for x in speech if x["callback"]) >= 110
    assert len({x["voice"] for x in speech if x["language"] == "cs"}) >= 12
    assert len({x["voice"] for x in speech if x["language"] == "en"}) >= 11
    channels: dict[str, set[str]] = {}
    for x in speech:
        channels.setdefault(x["text"], set()).add(x["channel"])
    assert all(len(c) >= 2 for c in channels.values()), channels
    assert {x["channel"] for x in LABELS} == set(CHANNELS)
    assert {x["language"] for x in LABELS if x["kind"] == "unintelligible" and "reversed" in x["file"]} == {"cs", "en"}
    size = sum(voicemail_set.clip_path(x).stat().st_size for x in LABELS)
    assert size < 20 * 2**20


def test_long_voicemail_is_as_long_as_asked(tmp_path: Path) -> None:
    label = voicemail_set.long_voicemail(tmp_path / "long.wav", 95.5)
    audio, rate = sf.read(tmp_path / "long.wav", dtype="float32")
    assert rate == 8000 and sf.info(str(tmp_path / "long.wav")).subtype == "ULAW"
    assert audio.size == 95.5 * 8000 and label["duration"] == 95.5
    assert label["message"] and label["language"] == "cs" and len(label["parts"]) >= 4
    texts = {x["file"]: x["text"] for x in LABELS}
    assert label["text"] == " ".join(texts[f] for f in label["parts"])
    english = voicemail_set.long_voicemail(tmp_path / "long_en.wav", 40, language="en")
    assert english["language"] == "en" and sf.info(str(tmp_path / "long_en.wav")).duration == 40
