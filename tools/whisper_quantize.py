"""Quantize a ggml Whisper model, as whisper.cpp's `examples/quantize` does.

Quantized models (`quantize`, `model build --quantize q8_0`) are what
whisper.cpp's `examples/quantize` writes: the header `ftype` becomes
`ggml_ftype + 1000 * GGML_QNT_VERSION`, every 2-D tensor but the conv biases and the
positional embeddings is stored in the quantized type (blocks of 32 or 256 values per
row, computed by `ggml_quantize_chunk` of the ggml library the pywhispercpp wheel
ships), everything else is copied as it is. The layout and the check that accepts
them are in `transcription.model_file`.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.util
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import numpy as np

from voicemail.transcription.model_file import (
    FTYPE_F16,
    GGML_MAGIC,
    GGML_QNT_VERSION,
    GGML_QNT_VERSION_FACTOR,
    GGML_TYPES,
    HPARAM_NAMES,
    QUANTIZATIONS,
    ConversionError,
    GgmlTensorInfo,
    GgmlType,
    checksum_sidecar,
    read_exact,
    record_checksum,
    verify,
)

# examples/quantize/quantize.cpp: 2-D tensors kept as they are in a quantized model.
QUANTIZE_SKIP = frozenset(
    {
        "encoder.conv1.bias",
        "encoder.conv2.bias",
        "encoder.positional_embedding",
        "decoder.positional_embedding",
    }
)


def quantization_type(name: str) -> GgmlType:
    """The quantized `GgmlType` called `name` (`q8_0`, `q5_0`, `q4_k` ...)."""
    qtype = GGML_TYPES.get(name.lower())
    if qtype is None or not qtype.quantized:
        raise ConversionError(f"unknown quantization {name!r}; choose one of {', '.join(QUANTIZATIONS)}")
    return qtype


@functools.lru_cache(maxsize=1)
def ggml_library() -> ctypes.CDLL:
    """The ggml base library of the installed pywhispercpp (the ggml whisper.cpp runs on).

    The copy `_pywhispercpp` loads: the registry wheel's `pywhispercpp.libs/
    libggml-base-<hash>.so` (its soname is its own), or, in the build `bin/build-whisper`
    installs, `libggml-base.so.0` beside the binding, the soname its libwhisper asks for
    (the wheel also holds copies under other names, which would load a second ggml).
    """
    spec = importlib.util.find_spec("_pywhispercpp")
    if spec is None or not spec.origin:
        raise ConversionError("quantizing needs the pywhispercpp wheel, which ships the ggml library")
    site = Path(spec.origin).parent
    found = sorted((site / "pywhispercpp.libs").glob("libggml-base-*.so*")) + sorted(site.glob("libggml-base.so.0"))
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
    lib.ggml_quantize_chunk.argtypes = [
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_void_p,
    ]
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    return lib


def _checked_library(qtype: GgmlType) -> ctypes.CDLL:
    """The ggml library, after checking it lays `qtype` out as `GGML_TYPES` says
    (an enum or block change in a newer wheel must not produce a file verify misreads)."""
    lib = ggml_library()
    got = (
        (lib.ggml_type_name(qtype.type_id) or b"?").decode().lower(),
        lib.ggml_blck_size(qtype.type_id),
        lib.ggml_type_size(qtype.type_id),
    )
    if got != (qtype.name, qtype.block, qtype.block_bytes) or lib.ggml_quantize_requires_imatrix(qtype.type_id):
        raise ConversionError(f"the ggml library's type {qtype.type_id} is {got}, not {qtype.name} as expected")
    return lib


def quantizes(name: str, n_dims: int) -> bool:
    """whisper.cpp's quantize rule: every 2-D tensor except `QUANTIZE_SKIP`."""
    return n_dims == 2 and name not in QUANTIZE_SKIP


def _copy(src: BinaryIO, write: Callable[[bytes], object], nbytes: int, chunk: int = 1 << 20) -> None:
    while nbytes > 0:
        block = read_exact(src, min(chunk, nbytes))
        write(block)
        nbytes -= len(block)


def _quantize_tensor(
    lib: ctypes.CDLL,
    src: BinaryIO,
    write: Callable[[bytes], object],
    tensor: GgmlTensorInfo,
    qtype: GgmlType,
    chunk_values: int = 1 << 21,
) -> None:
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
        values = np.frombuffer(read_exact(src, rows * n_per_row * dtype.itemsize), dtype=dtype).astype(np.float32)
        got = lib.ggml_quantize_chunk(qtype.type_id, values.ctypes.data, out.ctypes.data, 0, rows, n_per_row, None)
        if got != rows * qtype.row_bytes(n_per_row):
            raise ConversionError(f"ggml_quantize_chunk wrote {got} bytes for {rows} rows of {tensor.name}")
        write(out[:got].tobytes())


def quantize(src: Path | str, dst: Path | str, qtype: str) -> Path:
    """Quantize the f16/f32 ggml Whisper model `src` to `qtype` (`q8_0`, `q5_0`,
    ...) at `dst`, with its `.sha256` sidecar, as whisper.cpp's quantize tool does.

    The source must pass `verify`. Tensor by tensor, in chunks of rows, so memory
    stays at a few MB; written to a temporary file and renamed, so a crash never leaves
    a half-written model at `dst`.
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
            raise ConversionError(
                f"{name}: rows of {info.tensors[name].dims[0]} values are not whole {target.name} "
                f"blocks of {target.block}; choose a type with blocks of 32 (q8_0, q5_0, ...)"
            )
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
                encoded = tensor.name.encode("utf-8")
                out_type = target.type_id if tensor.name in chosen else tensor.ftype
                write(struct.pack(f"<iii{len(tensor.dims)}i", len(tensor.dims), len(encoded), out_type, *tensor.dims))
                write(encoded)
                fin.seek(tensor.offset)
                if tensor.name in chosen:
                    _quantize_tensor(lib, fin, write, tensor, target)
                else:
                    _copy(fin, write, tensor.nbytes)
            fout.flush()
            os.fsync(fout.fileno())
        checksum_sidecar(dst).unlink(missing_ok=True)
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)
    record_checksum(dst, digest.hexdigest())
    return dst
