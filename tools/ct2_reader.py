"""Read a CTranslate2 Whisper model and plan its ggml tensors.

Input: CTranslate2 `model.bin` (binary version >= 4)::

    u32 binary_version, str spec_name, u32 spec_revision, u32 n_variables,
    n_variables x (str name, u8 rank, u32[rank] shape, u8 dtype, u32 n_bytes, bytes),
    u32 n_aliases, n_aliases x (str alias, str target)

where `str` is a u16 length followed by that many bytes ending in NUL, and dtype
is CTranslate2's `DataType` enum (0 float32, 1 int8, 2 int16, 3 int32, 4 float16,
5 bfloat16). The file is indexed once (headers only, data skipped with seeks) and each
tensor is then read on its own, so memory stays at the size of the largest tensor and
the split halves are never joined on disk or in memory.

CTranslate2 fuses the self-attention q/k/v projections (and cross-attention k/v);
whisper.cpp wants them separate and has no key bias, so the key bias (zero in Whisper)
is dropped after checking that it is zero.
"""

from __future__ import annotations

import io
import os
import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np

from voicemail.transcription.model_file import FTYPE_F16, ConversionError, read_exact, read_int

# CTranslate2 DataType enum values.
_CT2_FLOAT32, _CT2_INT8, _CT2_INT16, _CT2_INT32, _CT2_FLOAT16, _CT2_BFLOAT16 = range(6)
_CT2_ITEMSIZE = {0: 4, 1: 1, 2: 2, 3: 4, 4: 2, 5: 2}


class ConcatReader(io.RawIOBase):
    """A read-only, seekable view of several files one after the other.

    Lets the two halves of a split `model.bin` be parsed as one stream without
    joining them on disk or in memory.
    """

    def __init__(self, paths: Sequence[Path]) -> None:
        super().__init__()
        self._files = [open(p, "rb") for p in paths]  # noqa: SIM115 (kept open for the caller; closed by it)
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

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
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
    """Index of a CTranslate2 `model.bin`: variable headers and data offsets only."""

    binary_version: int
    spec: str
    revision: int
    variables: dict[str, Ct2Variable]
    aliases: dict[str, str] = field(default_factory=dict)


def _read_str(f: BinaryIO) -> str:
    n = read_int(f, "H")
    return read_exact(f, n).split(b"\0", 1)[0].decode("utf-8")


def index_ct2(f: BinaryIO) -> Ct2Model:
    """Read every variable header of `model.bin`, seeking past the data."""
    version = read_int(f, "I")
    if version < 4:
        raise ConversionError(f"CTranslate2 binary version {version} is too old (need >= 4)")
    if version > 6:
        raise ConversionError(f"CTranslate2 binary version {version} is newer than this converter knows (<= 6)")
    spec = _read_str(f)
    revision = read_int(f, "I")
    count = read_int(f, "I")
    variables: dict[str, Ct2Variable] = {}
    for _ in range(count):
        name = _read_str(f)
        rank = read_int(f, "B")
        shape = struct.unpack(f"<{rank}I", read_exact(f, 4 * rank)) if rank else ()
        dtype = read_int(f, "B")
        nbytes = read_int(f, "I")
        offset = f.tell()
        if dtype not in _CT2_ITEMSIZE:
            raise ConversionError(f"variable {name}: unknown dtype id {dtype}")
        if int(np.prod(shape, dtype=np.int64)) * _CT2_ITEMSIZE[dtype] != nbytes:
            raise ConversionError(f"variable {name}: {nbytes} bytes do not match shape {shape}")
        variables[name] = Ct2Variable(name, tuple(int(d) for d in shape), dtype, offset, nbytes)
        f.seek(nbytes, io.SEEK_CUR)
    aliases: dict[str, str] = {}
    n_alias = read_int(f, "I")
    for _ in range(n_alias):
        alias = _read_str(f)
        aliases[alias] = _read_str(f)
    if f.read(1):
        raise ConversionError("trailing bytes after the alias table of model.bin")
    return Ct2Model(version, spec, revision, variables, aliases)


def _load(f: BinaryIO, var: Ct2Variable) -> np.ndarray:
    """One variable as a float16/float32 array (bfloat16 widened to float32; scalars as ints)."""
    f.seek(var.offset)
    raw = read_exact(f, var.nbytes)
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
    """Layer numbers from `<prefix>/layer_<n>/...` only (not `layer_norm`)."""
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


def _self_attention(plans: list[TensorPlan], g: str, c: str) -> None:
    """A block's self-attention: its norm, and q/k/v split from CTranslate2's fused projection."""
    _norm(plans, f"{g}.attn_ln", f"{c}/self_attention/layer_norm")
    _linear(plans, f"{g}.attn.query", f"{c}/self_attention/linear_0", part=0, parts=3)
    _linear(plans, f"{g}.attn.key", f"{c}/self_attention/linear_0", bias=False, part=1, parts=3)
    _linear(plans, f"{g}.attn.value", f"{c}/self_attention/linear_0", part=2, parts=3)
    _linear(plans, f"{g}.attn.out", f"{c}/self_attention/linear_1")


def _mlp(plans: list[TensorPlan], g: str, c: str) -> None:
    """A block's feed-forward layers and their norm."""
    _norm(plans, f"{g}.mlp_ln", f"{c}/ffn/layer_norm")
    _linear(plans, f"{g}.mlp.0", f"{c}/ffn/linear_0")
    _linear(plans, f"{g}.mlp.2", f"{c}/ffn/linear_1")


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
        _self_attention(plans, g, c)
        _mlp(plans, g, c)
    _norm(plans, "encoder.ln_post", "encoder/layer_norm")
    plans += [
        TensorPlan("decoder.positional_embedding", "decoder/position_encodings/encodings"),
        TensorPlan("decoder.token_embedding.weight", "decoder/embeddings/weight"),
    ]
    for i in _layer_ids(names, "decoder"):
        g, c = f"decoder.blocks.{i}", f"decoder/layer_{i}"
        _self_attention(plans, g, c)
        _norm(plans, f"{g}.cross_attn_ln", f"{c}/attention/layer_norm")
        _linear(plans, f"{g}.cross_attn.query", f"{c}/attention/linear_0")
        _linear(plans, f"{g}.cross_attn.key", f"{c}/attention/linear_1", bias=False, part=0, parts=2)
        _linear(plans, f"{g}.cross_attn.value", f"{c}/attention/linear_1", part=1, parts=2)
        _linear(plans, f"{g}.cross_attn.out", f"{c}/attention/linear_2")
        _mlp(plans, g, c)
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


# ------------------------------------------------------------------ tensor data


def tensor_data(f: BinaryIO, model: Ct2Model, plan: TensorPlan, cache: dict[str, np.ndarray]) -> np.ndarray:
    """The data of one ggml tensor (as stored in model.bin), slicing fused projections.

    `cache` holds the one fused variable currently being split so it is read once.
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


def check_dropped_key_bias(f: BinaryIO, model: Ct2Model, plans: list[TensorPlan]) -> None:
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
