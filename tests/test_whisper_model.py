"""The CTranslate2 -> ggml converter, on the real registry models."""

from __future__ import annotations

import ctypes
import hashlib
import json
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.support import isolation
from tools import ct2_reader
from tools import whisper_convert as wc
from tools import whisper_quantize as wq
from voicemail.transcription import model_file as mf

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "var" / "models"

TINY_EN_HPARAMS = {
    "n_vocab": 51864,
    "n_audio_ctx": 1500,
    "n_audio_state": 384,
    "n_audio_head": 6,
    "n_audio_layer": 4,
    "n_text_ctx": 448,
    "n_text_state": 384,
    "n_text_head": 6,
    "n_text_layer": 4,
    "n_mels": 80,
    "ftype": 1,
}
BASE_HPARAMS = {
    "n_vocab": 51865,
    "n_audio_ctx": 1500,
    "n_audio_state": 512,
    "n_audio_head": 8,
    "n_audio_layer": 6,
    "n_text_ctx": 448,
    "n_text_state": 512,
    "n_text_head": 8,
    "n_text_layer": 6,
    "n_mels": 80,
    "ftype": 1,
}


@pytest.fixture(scope="session")
def tiny_en() -> Path:
    return wc.build_model("tiny.en", MODELS)


@pytest.fixture(scope="session")
def base() -> Path:
    return wc.build_model("base", MODELS)


def _tensor(info: mf.GgmlInfo, name: str) -> np.ndarray:
    t = info.tensors[name]
    dtype = "<f2" if t.ftype == mf.FTYPE_F16 else "<f4"
    count = int(np.prod(t.dims))
    with info.path.open("rb") as f:
        f.seek(t.offset)
        data = np.frombuffer(f.read(count * np.dtype(dtype).itemsize), dtype=dtype)
    return data.reshape(tuple(reversed(t.dims)))


def test_header_of_tiny_en(tiny_en: Path) -> None:
    with tiny_en.open("rb") as f:
        head = f.read(4 + 44 + 8)
    assert struct.unpack("<i", head[:4])[0] == mf.GGML_MAGIC == 0x67676D6C
    assert head[:4] == b"lmgg"  # the magic as it sits on disk (little-endian)
    info = mf.read_ggml(tiny_en)
    assert info.hparams == TINY_EN_HPARAMS
    assert info.mel_shape == (80, 201)
    assert info.n_tokens == 50256  # ordinary tokens, up to <|endoftext|>
    assert info.model_type == "tiny.en" and not info.multilingual
    assert len(info.tensors) == 167
    assert 37e6 < info.n_params < 39e6


def test_tensor_layout_of_tiny_en(tiny_en: Path) -> None:
    info = mf.read_ggml(tiny_en)
    _wm_info, problems = mf.verify(tiny_en)
    assert problems == []
    t = info.tensors
    # biases, norms and positional embeddings f32; weights of two or more dimensions f16
    assert (t["encoder.conv1.bias"].dims, t["encoder.conv1.bias"].ftype) == ((1, 384), mf.FTYPE_F32)
    assert (t["encoder.conv1.weight"].dims, t["encoder.conv1.weight"].ftype) == ((3, 80, 384), mf.FTYPE_F16)
    assert t["encoder.positional_embedding"].ftype == mf.FTYPE_F32
    assert t["decoder.positional_embedding"].dims == (384, 448)
    assert (t["decoder.token_embedding.weight"].dims, t["decoder.token_embedding.weight"].ftype) == ((384, 51864), 1)
    assert t["decoder.blocks.3.mlp.0.weight"].dims == (384, 1536)
    assert t["decoder.blocks.0.attn_ln.weight"].ftype == mf.FTYPE_F32
    # fused projections split, key bias dropped
    for prefix in ("encoder.blocks.0.attn", "decoder.blocks.2.attn", "decoder.blocks.2.cross_attn"):
        for proj in ("query", "key", "value"):
            assert t[f"{prefix}.{proj}.weight"].dims == (384, 384)
        assert f"{prefix}.key.bias" not in t
        assert f"{prefix}.value.bias" in t
    assert not any("layer_norm" in name or "/" in name for name in t)


def test_mel_filters_written_match_the_numpy_bank(tiny_en: Path) -> None:
    with tiny_en.open("rb") as f:
        f.seek(4 + 44 + 8)
        written = np.frombuffer(f.read(80 * 201 * 4), dtype="<f4").reshape(80, 201)
    bank = wc.mel_filters()
    assert np.array_equal(written, bank)
    assert bank.min() >= 0 and np.all(bank.max(axis=1) > 0)
    assert bank[:, 0].sum() == 0  # no filter at DC
    peaks = bank.argmax(axis=1)
    assert np.all(np.diff(peaks) >= 0)  # centres rise with the band index


def test_mel_filters_equal_librosa() -> None:
    librosa = pytest.importorskip("librosa")
    reference = librosa.filters.mel(sr=16000, n_fft=400, n_mels=80)
    np.testing.assert_allclose(wc.mel_filters(), reference, rtol=1e-5, atol=1e-7)


def test_split_tensors_equal_the_ctranslate2_slices(tiny_en: Path) -> None:
    parts, _ = wc.source_files("tiny.en")
    info = mf.read_ggml(tiny_en)
    with parts[0].open("rb") as f:
        ct2 = ct2_reader.index_ct2(f)
        assert ct2.spec == "WhisperSpec" and ct2.binary_version == 6
        fused = ct2_reader._load(f, ct2.variables["decoder/layer_1/self_attention/linear_0/weight"])
        fused_bias = ct2_reader._load(f, ct2.variables["decoder/layer_1/self_attention/linear_0/bias"])
        kv = ct2_reader._load(f, ct2.variables["decoder/layer_1/attention/linear_1/weight"])
        pos = ct2_reader._load(f, ct2.variables["encoder/position_encodings/encodings"])
    q, k, v = np.split(fused, 3)
    np.testing.assert_array_equal(_tensor(info, "decoder.blocks.1.attn.query.weight"), q.astype(np.float16))
    np.testing.assert_array_equal(_tensor(info, "decoder.blocks.1.attn.key.weight"), k.astype(np.float16))
    np.testing.assert_array_equal(_tensor(info, "decoder.blocks.1.attn.value.weight"), v.astype(np.float16))
    np.testing.assert_array_equal(_tensor(info, "decoder.blocks.1.attn.value.bias"), np.split(fused_bias, 3)[2])
    assert not np.split(fused_bias, 3)[1].any()  # the dropped key bias was zero
    ck, cv = np.split(kv, 2)
    np.testing.assert_array_equal(_tensor(info, "decoder.blocks.1.cross_attn.key.weight"), ck.astype(np.float16))
    np.testing.assert_array_equal(_tensor(info, "decoder.blocks.1.cross_attn.value.weight"), cv.astype(np.float16))
    np.testing.assert_array_equal(_tensor(info, "encoder.positional_embedding"), pos)


def test_vocabulary_is_byte_level_up_to_endoftext(tiny_en: Path) -> None:
    tokens = wc.read_vocabulary(["!", "Ġthe", "Ċ", "Ã©", "<|endoftext|>", "<|startoftranscript|>"])
    assert tokens == [b"!", b" the", b"\n", "é".encode()]
    with pytest.raises(mf.ConversionError):
        wc.read_vocabulary(["a", "b"])
    # first tokens of the written table
    with tiny_en.open("rb") as f:
        f.seek(4 + 44 + 8 + 80 * 201 * 4)
        assert struct.unpack("<i", f.read(4))[0] == 50256
        first = [f.read(struct.unpack("<i", f.read(4))[0]) for _ in range(3)]
    assert first == [b"!", b'"', b"#"]


def test_base_from_two_parts(base: Path) -> None:
    info, problems = mf.verify(base)
    assert problems == []
    assert info.hparams == BASE_HPARAMS
    assert info.n_tokens == 50257
    assert info.model_type == "base" and info.multilingual
    assert len(info.tensors) == 245


def test_build_is_idempotent_and_checksummed(tiny_en: Path) -> None:
    sidecar = tiny_en.with_name(tiny_en.name + ".sha256")
    digest = hashlib.sha256(tiny_en.read_bytes()).hexdigest()
    assert sidecar.read_text() == f"{digest}  {tiny_en.name}\n"
    before = tiny_en.stat().st_mtime_ns
    assert wc.build_model("tiny.en", MODELS) == tiny_en
    assert tiny_en.stat().st_mtime_ns == before


def test_build_redoes_a_damaged_output(tmp_path: Path, tiny_en: Path) -> None:
    out = tmp_path / "ggml-tiny.en.bin"
    shutil.copy(tiny_en, out)
    shutil.copy(tiny_en.with_name(tiny_en.name + ".sha256"), tmp_path / "ggml-tiny.en.bin.sha256")
    assert wc.is_built(out)
    with out.open("r+b") as f:
        f.seek(-1, 2)
        f.write(b"\x7f")
    assert not wc.is_built(out)
    _, problems = mf.verify(out)
    assert "content does not match the recorded .sha256" in problems
    wc.build_model("tiny.en", tmp_path)
    assert wc.is_built(out)
    assert out.read_bytes() == tiny_en.read_bytes()  # deterministic conversion


def test_input_checksum_mismatch_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = wc.SOURCES["tiny.en"]
    wrong = wc.ModelSource(**{**source.__dict__, "model_sha256": "0" * 64})
    monkeypatch.setitem(wc.SOURCES, "tiny.en", wrong)
    with pytest.raises(mf.ConversionError, match="does not match the pinned"):
        wc.build_model("tiny.en", tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_truncated_model_bin_is_refused(tmp_path: Path) -> None:
    parts, vocab = wc.source_files("tiny.en")
    cut = tmp_path / "model.bin"
    with parts[0].open("rb") as f:
        cut.write_bytes(f.read(3_000_000))
    with pytest.raises(mf.ConversionError, match="truncated"):
        wc.convert([cut], tmp_path / "out.bin", vocabulary=vocab)
    assert not (tmp_path / "out.bin").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["model.bin"]  # no temp file left


def test_unknown_model_name() -> None:
    with pytest.raises(mf.ConversionError, match="unknown model"):
        wc.build_model("large-v3", MODELS)


def test_cli(tiny_en: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert wc.main(["build", "--name", "tiny.en", "--out", str(MODELS)]) == 0
    assert "up to date" in capsys.readouterr().out
    assert wc.main(["verify", str(tiny_en)]) == 0
    out = capsys.readouterr().out
    assert "tiny.en (English-only)" in out and "n_audio_layer=4" in out and "OK" in out
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"not a model at all")
    assert wc.main(["verify", str(junk)]) == 1
    assert "not a ggml file" in capsys.readouterr().err
    assert wc.main(["verify", str(tmp_path / "missing.bin")]) == 1


# ------------------------------------------------------------------ quantization

AUDIO = ROOT / "tests" / "audio"
# whisper.cpp's examples/quantize keeps these 2-D tensors as they are
KEPT = {"encoder.conv1.bias", "encoder.conv2.bias", "encoder.positional_embedding", "decoder.positional_embedding"}
# expected size against the f16 model: q8_0 34 bytes / 32 values, q5_0 22 / 32 (f16: 64 / 32)
SIZE_RATIO = {"q8_0": 0.553, "q5_0": 0.374}


@pytest.fixture(scope="session")
def base_q8_0() -> Path:
    return wc.build_model("base", MODELS, "q8_0")


@pytest.fixture(scope="session")
def base_q5_0() -> Path:
    return wc.build_model("base", MODELS, "q5_0")


@pytest.fixture
def quantized(request: pytest.FixtureRequest) -> Path:
    return request.getfixturevalue(f"base_{request.param}")


def _word_error_rate(reference: str, hypothesis: str) -> tuple[int, int]:
    """transcription.word_error_rate, or voicemail.word_error's where the transcription rework moved it."""
    import importlib

    from voicemail import transcription

    fn = (
        getattr(transcription, "word_error_rate", None)
        or importlib.import_module("voicemail.word_error").word_error_rate
    )
    return fn(reference, hypothesis)


def _dequantized(info: mf.GgmlInfo, name: str) -> np.ndarray:
    """A quantized tensor as float32, through the ggml library's ``dequantize_row_<type>``."""
    t = info.tensors[name]
    lib = wq.ggml_library()
    fn = getattr(lib, f"dequantize_row_{t.type.name}")
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    fn.restype = None
    with info.path.open("rb") as f:
        f.seek(t.offset)
        raw = np.frombuffer(f.read(t.nbytes), dtype=np.uint8)
    out = np.empty(int(np.prod(t.dims)), dtype=np.float32)
    fn(raw.ctypes.data, out.ctypes.data, out.size)
    return out.reshape(tuple(reversed(t.dims)))


def _patched(src: Path, dst: Path, offset: int, value: int) -> Path:
    """A copy of ``src`` (without its sidecar) with the i32 at ``offset`` replaced."""
    shutil.copy(src, dst)
    with dst.open("r+b") as f:
        f.seek(offset)
        f.write(struct.pack("<i", value))
    return dst


def _type_offset(info: mf.GgmlInfo, name: str) -> int:
    """Byte offset of a tensor's type field in its header."""
    t = info.tensors[name]
    return t.offset - len(name.encode()) - 4 * len(t.dims) - 4


def _assert_refused(path: Path, match: str) -> None:
    """verify refuses ``path``, and so does the transcriber, before whisper.cpp opens it."""
    from voicemail import transcription as tx

    try:
        _, problems = mf.verify(path)
    except mf.ConversionError as exc:
        assert re.search(match, str(exc)), exc
    else:
        assert any(re.search(match, p) for p in problems), problems
    with pytest.raises(tx.TranscriptionError):
        tx.get_transcriber("pywhispercpp", str(path), isolation.engine_threads())


def test_type_table_matches_the_ggml_library() -> None:
    lib = wq.ggml_library()
    import _pywhispercpp  # noqa: F401  (maps the ggml whisper.cpp runs on)

    mapped = {line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines() if "libggml-base" in line}
    assert mapped == {str(Path(lib._name).resolve())}  # the copy whisper.cpp runs on, and no second one
    lib.ggml_ftype_to_ggml_type.argtypes = [ctypes.c_int]
    lib.ggml_ftype_to_ggml_type.restype = ctypes.c_int
    for name, t in mf.GGML_TYPES.items():
        assert lib.ggml_type_name(t.type_id).decode().lower() == name
        assert (lib.ggml_blck_size(t.type_id), lib.ggml_type_size(t.type_id)) == (t.block, t.block_bytes)
        assert lib.ggml_row_size(t.type_id, 2048) == t.row_bytes(2048)
        assert lib.ggml_ftype_to_ggml_type(t.ftype) == t.type_id
    assert set(mf.QUANTIZATIONS) >= {"q8_0", "q5_0", "q5_1", "q4_0", "q4_1"}
    assert wq.QUANTIZE_SKIP == KEPT


@pytest.mark.parametrize("quantized", ["q8_0", "q5_0"], indirect=True)
def test_quantized_base_passes_verify_and_reports_its_type(quantized: Path, base: Path) -> None:
    qtype = quantized.stem.rsplit("-", 1)[1]
    info, problems = mf.verify(quantized)
    assert problems == []
    assert info.quantization == qtype and info.weight_type.quantized and info.quantization_version == 2
    assert info.hparams == {**BASE_HPARAMS, "ftype": 2000 + mf.GGML_TYPES[qtype].ftype}  # 2007 q8_0, 2008 q5_0
    f16 = mf.read_ggml(base)
    assert mf.read_ggml(base).quantization == "f16"
    assert list(info.tensors) == list(f16.tensors)  # same order, same shapes
    for name, t in info.tensors.items():
        assert t.dims == f16.tensors[name].dims
        if len(t.dims) == 2 and name not in KEPT:
            assert t.type.name == qtype, name
        else:
            assert t.ftype == f16.tensors[name].ftype, name  # conv weights f16, the rest f32
    assert info.tensors["decoder.token_embedding.weight"].type.name == qtype
    assert info.tensors["encoder.conv2.weight"].ftype == mf.FTYPE_F16
    assert info.tensors["decoder.positional_embedding"].ftype == mf.FTYPE_F32
    # mel filters and vocabulary copied byte for byte
    with base.open("rb") as a, quantized.open("rb") as b:
        assert a.read(f16.tensors_offset)[48:] == b.read(info.tensors_offset)[48:]
    assert info.size / f16.size == pytest.approx(SIZE_RATIO[qtype], abs=0.01)
    assert wc.is_built(quantized)


@pytest.mark.parametrize("quantized,tolerance", [("q8_0", 0.01), ("q5_0", 0.05)], indirect=["quantized"])
def test_quantized_values_are_close_to_the_f16_ones(quantized: Path, base: Path, tolerance: float) -> None:
    info, f16 = mf.read_ggml(quantized), mf.read_ggml(base)
    for name in (
        "decoder.token_embedding.weight",
        "encoder.blocks.3.mlp.2.weight",
        "decoder.blocks.5.cross_attn.key.weight",
    ):
        original = _tensor(f16, name).astype(np.float32)
        restored = _dequantized(info, name)
        assert restored.shape == original.shape
        assert np.linalg.norm(restored - original) / np.linalg.norm(original) < tolerance, name
    np.testing.assert_array_equal(
        _tensor(info, "decoder.blocks.2.mlp_ln.bias"), _tensor(f16, "decoder.blocks.2.mlp_ln.bias")
    )


def test_chunked_quantization_equals_one_call(base: Path) -> None:
    info = mf.read_ggml(base)
    tensor = info.tensors["decoder.blocks.0.mlp.0.weight"]  # 2048 rows of 512
    q = mf.GGML_TYPES["q5_0"]
    outputs = []
    for chunk_values in (512 * 7, 1 << 30):
        parts: list[bytes] = []
        with base.open("rb") as f:
            f.seek(tensor.offset)
            wq._quantize_tensor(wq.ggml_library(), f, parts.append, tensor, q, chunk_values=chunk_values)
        outputs.append(b"".join(parts))
    assert len(outputs[0]) == 2048 * q.row_bytes(512) and outputs[0] == outputs[1]


def test_quantized_build_is_idempotent_and_streams(
    base_q8_0: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sidecar = base_q8_0.with_name(base_q8_0.name + ".sha256")
    assert sidecar.read_text() == f"{hashlib.sha256(base_q8_0.read_bytes()).hexdigest()}  ggml-base-q8_0.bin\n"
    before = base_q8_0.stat().st_mtime_ns
    assert wc.main(["build", "--name", "base", "--quantize", "q8_0", "--out", str(MODELS)]) == 0
    assert "up to date" in capsys.readouterr().out
    assert base_q8_0.stat().st_mtime_ns == before
    assert wc.main(["verify", str(base_q8_0)]) == 0
    out = capsys.readouterr().out
    assert "weights q8_0, ggml quantization version 2" in out and "ftype=2007" in out and "OK" in out
    # a fresh quantization: same bytes, memory bounded by a chunk, not by the 53 MB token embedding
    out_path = tmp_path / "q.bin"
    # (VmHWM: this process's peak RSS; ru_maxrss would carry pytest's over the exec)
    code = (
        "import re, sys; from tools.whisper_quantize import quantize; quantize(sys.argv[1], sys.argv[2], 'q8_0'); "
        "print(re.search(r'VmHWM:\\s*(\\d+)', open('/proc/self/status').read()).group(1))"
    )
    run = subprocess.run(
        [sys.executable, "-c", code, str(MODELS / "ggml-base.bin"), str(out_path)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    assert int(run.stdout.split()[-1]) < 110_000, "peak RSS (KB) of quantizing base"
    assert out_path.read_bytes() == base_q8_0.read_bytes()
    assert mf.recorded_checksum(out_path) == mf.recorded_checksum(base_q8_0)


def test_quantize_refusals(tiny_en: Path, base_q5_0: Path, tmp_path: Path) -> None:
    with pytest.raises(mf.ConversionError, match="unknown quantization"):
        wq.quantize(tiny_en, tmp_path / "x.bin", "q3_0")
    with pytest.raises(mf.ConversionError, match="already quantized"):
        wq.quantize(base_q5_0, tmp_path / "x.bin", "q8_0")
    # k-quants have blocks of 256 values; tiny's rows are 384 long (whisper.cpp would assert)
    with pytest.raises(mf.ConversionError, match="not whole q4_k blocks"):
        wq.quantize(tiny_en, tmp_path / "x.bin", "q4_k")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(mf.ConversionError, match="unknown quantization"):
        wc.build_model("base", MODELS, "f16")


@pytest.mark.engine
def test_quantized_models_transcribe_like_f16(base: Path, base_q8_0: Path, base_q5_0: Path) -> None:
    from voicemail import transcription as tx

    wq.ggml_library()  # loaded by quantizing: must not stand in for the VAD's own ggml (it did: a segfault)
    label = next(x for x in json.loads((AUDIO / "labels.json").read_text()) if x["file"] == "msg_wav16.wav")
    rates = {}
    for path in (base, base_q8_0, base_q5_0):
        t = tx.get_transcriber("pywhispercpp", str(path), isolation.engine_threads()).transcribe(
            str(AUDIO / "msg_wav16.wav"), "en"
        )
        errors, words = _word_error_rate(label["text"], t.text)
        rates[path.name] = errors / words
    assert rates["ggml-base.bin"] <= 0.15, rates
    for name in ("ggml-base-q8_0.bin", "ggml-base-q5_0.bin"):
        assert rates[name] <= rates["ggml-base.bin"] + 0.1, rates


def test_truncated_quantized_file_is_refused(base_q5_0: Path, tmp_path: Path) -> None:
    cut = tmp_path / "ggml-base-q5_0.bin"
    with base_q5_0.open("rb") as f:
        cut.write_bytes(f.read(base_q5_0.stat().st_size - 1000))
    _assert_refused(cut, "truncated")
    cut.write_bytes(base_q5_0.read_bytes()[:100_000])  # inside the vocabulary
    _assert_refused(cut, "truncated")


@pytest.mark.parametrize(
    "tensor,value,match",
    [
        ("decoder.blocks.3.mlp.0.weight", 99, "unsupported type 99"),  # no ggml type
        ("decoder.blocks.3.mlp.0.weight", 26, "unsupported type 26"),  # i32: not a weight type
        ("decoder.blocks.3.mlp.0.weight", 8, "bad tensor header"),  # q8_0 in a q5_0 file: the next header misread
        ("encoder.conv1.weight", 6, "not whole q5_0 rows"),  # conv weights (rows of 3) stay f16
        ("decoder.ln.bias", 0, None),  # unchanged (control)
    ],
)
def test_corrupted_tensor_type_is_refused(
    base_q5_0: Path, tmp_path: Path, tensor: str, value: int, match: str | None
) -> None:
    info = mf.read_ggml(base_q5_0)
    bad = _patched(base_q5_0, tmp_path / "m.bin", _type_offset(info, tensor), value)
    if match is None:
        assert mf.verify(bad)[1] == []
    else:
        _assert_refused(bad, match)


@pytest.mark.parametrize(
    "ftype,match",
    [
        (2005, "header ftype 2005"),  # ggml_ftype 5 does not exist: whisper.cpp's ggml_ftype_to_ggml_type aborts
        (1008, "quantization version 1"),  # an old q5_0 layout
        (2007, "type q5_0, expected .* type q8_0"),  # header says q8_0, tensors are q5_0
        (-1, "header ftype -1"),
    ],
)
def test_bad_header_ftype_is_refused(base_q5_0: Path, tmp_path: Path, ftype: int, match: str) -> None:
    _assert_refused(_patched(base_q5_0, tmp_path / "m.bin", 4 + 40, ftype), match)
