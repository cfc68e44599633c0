"""Transcription settings: decoding, VAD and languages. Every value is a measured choice
(docs/transcription.md; bench/transcription_bench.py measures them); the operator-facing
ones are in config.py."""

from __future__ import annotations

from dataclasses import dataclass

SAMPLE_RATE = 16000
BACKENDS = ("pywhispercpp", "whisper-cpp-python")
DEFAULT_BACKEND = "pywhispercpp"


@dataclass(frozen=True)
class Decoding:
    """whisper.cpp decoding settings. Defaults are the measured choice (docs/transcription.md)."""

    beam_size: int = 5  # beam search; 1 = greedy
    # Candidates sampled at each fallback temperature. One: on 29 clips of the labelled set,
    # 3 candidates gave Czech WER 0.85 at RTF 0.79, one 0.82 at RTF 0.60 (docs/transcription.md).
    best_of: int = 1
    # Temperature fallback: a window whose decode has too little entropy (a loop) or too
    # low a mean log-probability is decoded again at +temperature_inc (0.4, 0.8): two
    # fallbacks, not whisper's five, since each costs a full decode (measured: 55 s for
    # 10 s of reversed speech with 0.2 and 5 candidates).
    temperature_inc: float = 0.4
    entropy_thold: float = 2.4
    logprob_thold: float = -1.0
    no_speech_thold: float = 0.6
    # A decode window may emit at most this many tokens per second of audio it holds
    # (fast Czech speech is about 6), so a loop cannot run to whisper.cpp's 220.
    max_tokens_per_second: float = 12.0
    # An initial prompt in the call's language with the words clinics hear. Off: on noise,
    # babble and unclear speech whisper repeats the prompt as if the caller had said it
    # ("I'm calling about an appointment, a prescription, ..."; measured: docs/transcription.md).
    prompt: bool = False
    # Encoder context scaled to the audio length (faster on short clips, less accurate).
    # Off everywhere, the second looks at a number included: whisper.cpp keeps a call's
    # audio_ctx in its state, and the next language detection (an encoder pass of its own)
    # then runs with that short context. Measured on the labelled set with the looks at a
    # fitted context: 2 of 84 messages taken for reversed speech, 7 confirmed
    # callback numbers of 68 against 12 (docs/transcription.md).
    audio_ctx: bool = False


DEFAULT_DECODING = Decoding()

# Silero VAD: silero-vad's own hysteresis (start at THRESHOLD, end below it minus 0.15),
# runs shorter than MIN_SPEECH dropped, gaps shorter than MIN_SILENCE bridged.
VAD_FRAME = 512  # samples per probability (32 ms)
VAD_THRESHOLD = 0.5
VAD_MIN_SPEECH = 0.25
VAD_MIN_SILENCE = 0.3
# Padding of the decoded span: Silero's onset lags the first phoneme by up to ~150 ms,
# and whisper needs some lead-in to decode a word said right after the beep.
SPEECH_PAD_BEFORE = 0.6
SPEECH_PAD_AFTER = 0.5
# Pauses inside the message longer than this are shortened to it (a caller who waits
# 20 s between two sentences costs no 20 s of decoding).
MAX_PAUSE = 2.0

# Detection among a clinic's languages keeps the first one unless another is at least
# OTHER_LANGUAGE_MIN probable and twice as probable as the first, or OTHER_LANGUAGE_ODDS
# times as probable as the first. Measured on the labelled set (docs/transcription.md): on
# the Czech messages English was at most 0.15, at most 13 times Czech; on the English ones
# at least 0.25 and at least 136 times Czech (accented espeak-ng voices under 0.5, which the
# first rule alone left in Czech). The odds sit in the middle of that gap, on a log scale.
OTHER_LANGUAGE_MIN = 0.5
OTHER_LANGUAGE_ODDS = 40.0

# Words of the initial prompt: what clinics hear (appointment, prescription, results,
# sick note, call back), in the call's language. Plain sentences, no names or numbers,
# so a prompt word cannot surface as a caller's name or callback number.
PROMPTS = {
    "cs": "Dobrý den, volám kvůli objednání, receptu, výsledkům krve a neschopence. Zavolejte mi prosím zpět.",
    "sk": "Dobrý deň, volám kvôli objednaniu, receptu, výsledkom krvi a PN-ke. Zavolajte mi prosím späť.",
    "en": "Hello, I'm calling about an appointment, a prescription, my test results and a sick note. Please call me back.",  # noqa: E501
    "uk": "Добрий день, я телефоную щодо запису до лікаря, рецепта, результатів аналізів і лікарняного. "
    "Передзвоніть мені, будь ласка.",
    "de": "Guten Tag, ich rufe wegen eines Termins, eines Rezepts, meiner Laborergebnisse und einer "
    "Krankschreibung an. Bitte rufen Sie mich zurück.",
    "pl": "Dzień dobry, dzwonię w sprawie wizyty, recepty, wyników badań i zwolnienia lekarskiego. "
    "Proszę o telefon zwrotny.",
}
