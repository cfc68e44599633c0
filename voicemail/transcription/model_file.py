"""The whisper.cpp ggml model file: its layout, and the check run before whisper.cpp opens one.

The legacy ggml file that whisper.cpp's `models/convert-pt-to-ggml.py` writes (and
`tools/whisper_convert.py` converts the registry models into)::

    i32 magic 0x67676d6c, 11 x i32 hparams (n_vocab, n_audio_ctx, n_audio_state,
    n_audio_head, n_audio_layer, n_text_ctx, n_text_state, n_text_head, n_text_layer,
    n_mels, ftype), i32 n_mel, i32 n_fft, f32[n_mel x n_fft] mel filters,
    i32 n_tokens, n_tokens x (i32 len, bytes), then tensors until EOF:
    i32 n_dims, i32 name_len, i32 ttype, i32[n_dims] dims (innermost first), name, data

A quantized file (`tools/whisper_quantize.py`, as whisper.cpp's `examples/quantize`
writes it) has the header `ftype` `ggml_ftype + 1000 * GGML_QNT_VERSION` and its
2-D weights in blocks of the quantized type. `verify` accepts those files, and
the ones operators download, by the rule whisper.cpp's loader applies: 2-D weights in
the header's type, conv weights f16 (f32 in an f32 model), the rest f32. The worker runs
it before loading a model (`transcription.transcriber`): whisper.cpp crashes the
process on some bad files instead of failing.

A built model carries its sha256 beside it in `<file>.sha256` (`sha256sum`
format), which `verify` checks when it is there.
"""

from __future__ import annotations

import hashlib
import io
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

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
        """ggml_row_size: bytes of one row (`n_per_row` a multiple of the block)."""
        return n_per_row // self.block * self.block_bytes


GGML_TYPES: dict[str, GgmlType] = {
    t.name: t
    for t in [
        GgmlType("f32", 0, 0, 1, 4),
        GgmlType("f16", 1, 1, 1, 2),
        # blocks of 32 values: (name, ggml_type, ggml_ftype, bytes per block)
        *(
            GgmlType(name, type_id, ftype, 32, size)
            for name, type_id, ftype, size in (
                ("q4_0", 2, 2, 18),
                ("q4_1", 3, 3, 20),
                ("q5_0", 6, 8, 22),
                ("q5_1", 7, 9, 24),
                ("q8_0", 8, 7, 34),
            )
        ),
        # k-quants q2_k .. q6_k: blocks of 256 values; ggml_type and ggml_ftype are both 8 + bits
        *(
            GgmlType(f"q{bits}_k", 8 + bits, 8 + bits, 256, size)
            for bits, size in ((2, 84), (3, 110), (4, 144), (5, 176), (6, 210))
        ),
    ]
}
QUANTIZATIONS = tuple(name for name, t in GGML_TYPES.items() if t.quantized)
_TYPE_BY_ID = {t.type_id: t for t in GGML_TYPES.values()}
_TYPE_BY_FTYPE = {t.ftype: t for t in GGML_TYPES.values()}

# whisper.cpp's fixed audio front end has a 25 ms window at 16 kHz: a mel filter bank
# of N_FFT // 2 + 1 columns.
N_FFT = 400

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
    """The input is not a model this converter can turn into a valid ggml file (or, from
    `verify`, not a ggml file whisper.cpp can load)."""


def read_exact(f: BinaryIO, n: int) -> bytes:
    data = f.read(n)
    if data is None or len(data) != n:
        raise ConversionError(f"file is truncated at byte {f.tell()}")
    return data


def read_int(f: BinaryIO, fmt: str) -> int:
    """One little-endian integer of `struct` format `fmt` (`"i"`, `"I"`, `"H"` ...)."""
    return int(struct.unpack("<" + fmt, read_exact(f, struct.calcsize(fmt)))[0])


# ------------------------------------------------------------------ checksums


def sha256_files(paths: Sequence[Path], chunk: int = 1 << 20) -> str:
    """sha256 of the files' concatenation, streamed."""
    h = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            while block := f.read(chunk):
                h.update(block)
    return h.hexdigest()


def checksum_sidecar(path: Path) -> Path:
    """`<path>.sha256`, where a built model's digest is recorded."""
    return path.with_name(path.name + ".sha256")


def record_checksum(path: Path, digest: str) -> None:
    checksum_sidecar(path).write_text(f"{digest}  {path.name}\n")


def recorded_checksum(path: Path) -> str | None:
    """The digest in `<path>.sha256` (`sha256sum` format), if any."""
    try:
        return checksum_sidecar(path).read_text().split()[0]
    except (FileNotFoundError, IndexError):
        return None


# --------------------------------------------------------------------- reading


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
        """`f16`, `f32`, or the quantized type such as `q5_0`."""
        return self.weight_type.name

    @property
    def quantization_version(self) -> int:
        return self.hparams["ftype"] // GGML_QNT_VERSION_FACTOR


def header_type(ftype: int, path: Path | str = "model") -> GgmlType:
    """The weight type of a header `ftype` (`ggml_ftype + 1000 * quantization version`).

    Refuses what whisper.cpp cannot load: an unknown ftype makes its
    `ggml_ftype_to_ggml_type` abort the process, and a quantized file of another
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


def read_ggml(path: Path | str) -> GgmlInfo:
    """Parse a ggml Whisper file's header and tensor table (skipping tensor data).

    Raises `ConversionError` for a file that cannot be walked: bad magic or header
    type, truncation, a tensor header whisper.cpp would read out of bounds (more than
    4 dimensions), an unknown tensor type, or rows that are not whole blocks of it.
    """
    path = Path(path)
    size = path.stat().st_size
    with path.open("rb") as f:
        if read_int(f, "i") != GGML_MAGIC:
            raise ConversionError(f"{path}: not a ggml file (bad magic)")
        hp = dict(zip(HPARAM_NAMES, struct.unpack("<11i", read_exact(f, 44))))
        header_type(hp["ftype"], path)
        mel_shape = struct.unpack("<ii", read_exact(f, 8))
        if min(mel_shape) < 0:
            raise ConversionError(f"{path}: mel filter bank shape {mel_shape}")
        f.seek(4 * mel_shape[0] * mel_shape[1], io.SEEK_CUR)
        n_tokens = read_int(f, "i")
        for _ in range(n_tokens):
            length = read_int(f, "i")
            if length < 0:
                raise ConversionError(f"{path}: vocabulary token of length {length}")
            f.seek(length, io.SEEK_CUR)
        tensors_offset = f.tell()
        if tensors_offset > size:
            raise ConversionError(f"{path}: file is truncated in the vocabulary")
        tensors: dict[str, GgmlTensorInfo] = {}
        while f.tell() < size:
            n_dims, name_len, ftype = struct.unpack("<iii", read_exact(f, 12))
            if not (1 <= n_dims <= 4 and 0 < name_len <= 1024):
                raise ConversionError(f"{path}: bad tensor header (n_dims {n_dims}, name length {name_len})")
            dims = struct.unpack(f"<{n_dims}i", read_exact(f, 4 * n_dims))
            name = read_exact(f, name_len).decode("utf-8", errors="replace")
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


# ---------------------------------------------------------------------- verify


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


def verify(path: Path | str) -> tuple[GgmlInfo, list[str]]:
    """Check a ggml Whisper file's layout; returns its info and the problems found.

    Raises `ConversionError` where `read_ggml` does; either way the file
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
            problems.append(
                f"tensor {name}: dims {got.dims} type {got.type.name}, expected {dims} type {_TYPE_BY_ID[ftype].name}"
            )
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
