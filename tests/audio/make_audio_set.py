"""Generate the labelled voicemail audio set in this folder (committed output).

Needs Debian's ``espeak-ng``, ``sox`` and ``lame`` plus numpy and soundfile; run from the
repository root with ``.venv/bin/python tests/audio/make_audio_set.py``. Rewrites every
audio file and ``labels.json``. Noise is drawn from a fixed seed and espeak-ng, sox and
lame are deterministic, so a rerun on the same tool versions gives the same set.

Labels: ``intelligible`` is True for a message a clinic should read as a voice message
request, False for what should become a missed call: silence, line hiss, noise, tones,
reversed speech and a bare "Hello?". ``text`` is what was spoken (numbers as words),
the reference for word error rate.

Most clips are telephone quality, like switchboard voicemail: band-limited to
300-3400 Hz, resampled to 8 kHz, light line noise, MP3 at 24 kbit/s. A few are 16 kHz
or 8 kHz WAV so both decoders paths are covered.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf

HERE = Path(__file__).resolve().parent
SEED = 20240611

# (id, text, language, espeak voice, words per minute, format)
SPEECH: list[tuple[str, str, str, str, int, str]] = [
    (
        "msg_appointment",
        "Hello, this is Maria Jones. I would like to book an appointment with doctor Smith next "
        "Tuesday. Please call me back on five five five, one two three, four five six seven.",
        "en",
        "en-us",
        150,
        "tel",
    ),
    (
        "msg_refill",
        "Hi, this is Peter Brown. I need a refill of my blood pressure medication. My number is "
        "zero seven seven zero, nine zero zero, one two three.",
        "en",
        "en-gb",
        165,
        "tel",
    ),
    (
        "msg_fever",
        "Good morning. I have had a fever and a sore throat since yesterday. Can the doctor see me today?",
        "en",
        "en-us+f3",
        140,
        "tel",
    ),
    (
        "msg_cancel",
        "This is Anna calling to cancel my appointment on Friday morning. Thank you.",
        "en",
        "en-gb-x-rp",
        175,
        "tel",
    ),
    (
        "msg_results",
        "Hello, I received a letter about my blood test results. Please call me back at two zero one, "
        "five five five, zero one nine eight.",
        "en",
        "en-us+m3",
        160,
        "tel",
    ),
    (
        "msg_earache",
        "My daughter has an ear infection. We would like an appointment this afternoon if possible.",
        "en",
        "en-029",
        155,
        "tel",
    ),
    (
        "msg_callback_short",
        "Call me back please. My number is four four one, six two three, eight eight seven.",
        "en",
        "en-gb-scotland",
        150,
        "tel",
    ),
    (
        "msg_fast",
        "Hi, it's John. Please call me at nine one seven, five five five, two six three one.",
        "en",
        "en-us",
        210,
        "tel",
    ),
    (
        "msg_vaccine",
        "Hello, I would like to ask whether my flu vaccine is ready. You can reach me at "
        "three one two, four four four, seven seven eight eight.",
        "en",
        "en-us+f4",
        170,
        "tel",
    ),
    ("msg_slow", "Hello. This is Robert Miller. Please call me back about my knee pain.", "en", "en-gb", 120, "tel"),
    (
        "msg_wav16",
        "Hello, this is Laura White. I need to move my appointment to next week. My phone number "
        "is six zero two, five five five, one four one four.",
        "en",
        "en-us+f2",
        160,
        "wav16",
    ),
    (
        "msg_wav8",
        "Good afternoon, this is David Clark. Please send my prescription to the pharmacy on Main Street.",
        "en",
        "en-gb",
        150,
        "wav8",
    ),
    (
        "msg_de",
        "Guten Tag, hier spricht Klaus Müller. Ich möchte einen Termin bei Doktor Schmidt vereinbaren. "
        "Bitte rufen Sie mich zurück.",
        "de",
        "de",
        150,
        "tel",
    ),
]

# Speech clips reversed in time: speech-like sound with no words in it.
REVERSED = ["msg_appointment", "msg_refill", "msg_earache"]

# Short non-messages spoken by espeak (too short to be a message).
SHORT = [("short_hello", "Hello?", "en", "en-us", 150, "tel")]


def run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def speak(text: str, voice: str, wpm: int, out: Path) -> None:
    run("espeak-ng", "-v", voice, "-s", str(wpm), "-w", str(out), text)


def telephone(audio: np.ndarray, rate: int, rng: np.random.Generator, tmp: Path) -> tuple[np.ndarray, int]:
    """Band-limit to 300-3400 Hz at 8 kHz and add line noise at about 35 dB SNR."""
    src, dst = tmp / "tel_in.wav", tmp / "tel_out.wav"
    sf.write(src, audio, rate, subtype="PCM_16")
    run("sox", str(src), "-r", "8000", str(dst), "sinc", "300-3400")
    band, rate8 = sf.read(dst, dtype="float32")
    rms = float(np.sqrt(np.mean(band**2))) or 1e-4
    band = band + rng.normal(0.0, rms * 10 ** (-35 / 20), band.size).astype(np.float32)
    return np.clip(band, -1, 1).astype(np.float32), rate8


def write(audio: np.ndarray, rate: int, fmt: str, stem: str, tmp: Path) -> str:
    """Write as telephone mp3 (``tel``), 16 kHz wav or 8 kHz wav; return the file name."""
    if fmt == "tel":
        wav = tmp / f"{stem}.wav"
        sf.write(wav, audio, rate, subtype="PCM_16")
        name = f"{stem}.mp3"
        run("lame", "--quiet", "-b", "24", "-m", "m", "--noreplaygain", "--resample", "8", str(wav), str(HERE / name))
        return name
    target = {"wav16": 16000, "wav8": 8000}[fmt]
    if rate != target:
        src, dst = tmp / f"{stem}_src.wav", tmp / f"{stem}_dst.wav"
        sf.write(src, audio, rate, subtype="PCM_16")
        run("sox", str(src), "-r", str(target), str(dst))
        audio, rate = sf.read(dst, dtype="float32")
    name = f"{stem}.wav"
    sf.write(HERE / name, audio, rate, subtype="PCM_16")
    return name


def pink(rng: np.random.Generator, n: int) -> np.ndarray:
    spectrum = np.fft.rfft(rng.normal(size=n))
    f = np.arange(spectrum.size, dtype=np.float64)
    f[0] = 1.0
    x = np.fft.irfft(spectrum / np.sqrt(f), n)
    return (x / np.max(np.abs(x))).astype(np.float32)


def main() -> int:
    for tool in ("espeak-ng", "sox", "lame"):
        if shutil.which(tool) is None:
            print(f"missing {tool}: apt-get install espeak-ng sox lame", file=sys.stderr)
            return 1
    rng = np.random.default_rng(SEED)
    for old in HERE.glob("*.mp3"):
        old.unlink()
    for old in HERE.glob("*.wav"):
        old.unlink()
    labels: list[dict[str, object]] = []
    spoken: dict[str, tuple[np.ndarray, int]] = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for stem, text, lang, voice, wpm, fmt in SPEECH + SHORT:
            raw = tmp / f"{stem}_tts.wav"
            speak(text, voice, wpm, raw)
            audio, rate = sf.read(raw, dtype="float32")
            audio = np.concatenate(
                [np.zeros(int(0.4 * rate), np.float32), audio, np.zeros(int(0.6 * rate), np.float32)]
            )
            spoken[stem] = (audio, rate)
            if fmt == "tel":
                audio, rate = telephone(audio, rate, rng, tmp)
            name = write(audio, rate, fmt, stem, tmp)
            labels.append(
                {
                    "file": name,
                    "intelligible": stem.startswith("msg"),
                    "kind": "speech" if stem.startswith("msg") else "short",
                    "text": text,
                    "language": lang,
                    "voice": voice,
                    "wpm": wpm,
                    "format": fmt,
                }
            )
        for stem in REVERSED:
            audio, rate = spoken[stem]
            audio, rate = telephone(audio[::-1].copy(), rate, rng, tmp)
            name = write(audio, rate, "tel", f"reversed_{stem[4:]}", tmp)
            labels.append(
                {"file": name, "intelligible": False, "kind": "reversed", "text": "", "language": None, "format": "tel"}
            )
        r = 8000
        others: list[tuple[str, np.ndarray, str, str]] = [
            ("silence_digital", np.zeros(6 * r, np.float32), "silence", "wav8"),
            ("silence_line", rng.normal(0, 10 ** (-60 / 20), 8 * r).astype(np.float32), "silence", "tel"),
            ("noise_white", (0.3 * rng.normal(0, 1, 8 * r)).clip(-1, 1).astype(np.float32), "noise", "tel"),
            ("noise_pink", 0.5 * pink(rng, 8 * r), "noise", "tel"),
            (
                "noise_hum",
                (0.2 * np.sin(2 * np.pi * 50 * np.arange(8 * r) / r) + 0.02 * rng.normal(0, 1, 8 * r)).astype(
                    np.float32
                ),
                "noise",
                "tel",
            ),
            (
                "tone_dial",
                (0.3 * np.sin(2 * np.pi * 425 * np.arange(6 * r) / r) * (np.arange(6 * r) % r < 0.4 * r)).astype(
                    np.float32
                ),
                "tone",
                "tel",
            ),
        ]
        for stem, audio, kind, fmt in others:
            name = write(audio, r, fmt, stem, tmp)
            labels.append(
                {"file": name, "intelligible": False, "kind": kind, "text": "", "language": None, "format": fmt}
            )
    (HERE / "labels.json").write_text(json.dumps(labels, indent=1, ensure_ascii=False) + "\n")
    total = sum((HERE / str(x["file"])).stat().st_size for x in labels)
    print(f"{len(labels)} clips, {total / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
