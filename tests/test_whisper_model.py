"""The CTranslate2 -> ggml converter, on the real registry models."""

from __future__ import annotations

import hashlib
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

import whisper_model as wm

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "var" / "models"

TINY_EN_HPARAMS = {
    "n_vocab": 51864, "n_audio_ctx": 1500, "n_audio_state": 384, "n_audio_head": 6, "n_audio_layer": 4,
    "n_text_ctx": 448, "n_text_state": 384, "n_text_head": 6, "n_text_layer": 4, "n_mels": 80, "ftype": 1,
}
BASE_HPARAMS = {
    "n_vocab": 51865, "n_audio_ctx": 1500, "n_audio_state": 512, "n_audio_head": 8, "n_audio_layer": 6,
    "n_text_ctx": 448, "n_text_state": 512, "n_text_head": 8, "n_text_layer": 6, "n_mels": 80, "ftype": 1,
}


@pytest.fixture(scope="session")
def tiny_en() -> Path:
    return wm.build_model("tiny.en", MODELS)


@pytest.fixture(scope="session")
def base() -> Path:
    return wm.build_model("base", MODELS)


def _tensor(info: wm.GgmlInfo, name: str) -> np.ndarray:
    t = info.tensors[name]
    dtype = "<f2" if t.ftype == wm.FTYPE_F16 else "<f4"
    count = int(np.prod(t.dims))
    with info.path.open("rb") as f:
        f.seek(t.offset)
        data = np.frombuffer(f.read(count * np.dtype(dtype).itemsize), dtype=dtype)
    return data.reshape(tuple(reversed(t.dims)))


def test_header_of_tiny_en(tiny_en: Path) -> None:
    with tiny_en.open("rb") as f:
        head = f.read(4 + 44 + 8)
    assert struct.unpack("<i", head[:4])[0] == wm.GGML_MAGIC == 0x67676D6C
    assert head[:4] == b"lmgg"  # the magic as it sits on disk (little-endian)
    info = wm.read_ggml(tiny_en)
    assert info.hparams == TINY_EN_HPARAMS
    assert info.mel_shape == (80, 201)
    assert info.n_tokens == 50256  # ordinary tokens, up to <|endoftext|>
    assert info.model_type == "tiny.en" and not info.multilingual
    assert len(info.tensors) == 167
    assert 37e6 < info.n_params < 39e6


def test_tensor_layout_of_tiny_en(tiny_en: Path) -> None:
    info = wm.read_ggml(tiny_en)
    wm_info, problems = wm.verify(tiny_en)
    assert problems == []
    t = info.tensors
    # biases, norms and positional embeddings f32; weights of two or more dimensions f16
    assert (t["encoder.conv1.bias"].dims, t["encoder.conv1.bias"].ftype) == ((1, 384), wm.FTYPE_F32)
    assert (t["encoder.conv1.weight"].dims, t["encoder.conv1.weight"].ftype) == ((3, 80, 384), wm.FTYPE_F16)
    assert t["encoder.positional_embedding"].ftype == wm.FTYPE_F32
    assert t["decoder.positional_embedding"].dims == (384, 448)
    assert (t["decoder.token_embedding.weight"].dims, t["decoder.token_embedding.weight"].ftype) == ((384, 51864), 1)
    assert t["decoder.blocks.3.mlp.0.weight"].dims == (384, 1536)
    assert t["decoder.blocks.0.attn_ln.weight"].ftype == wm.FTYPE_F32
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
    bank = wm.mel_filters()
    assert np.array_equal(written, bank)
    assert bank.min() >= 0 and np.all(bank.max(axis=1) > 0)
    assert bank[:, 0].sum() == 0  # no filter at DC
    peaks = bank.argmax(axis=1)
    assert np.all(np.diff(peaks) >= 0)  # centres rise with the band index


def test_mel_filters_equal_librosa() -> None:
    librosa = pytest.importorskip("librosa")
    reference = librosa.filters.mel(sr=16000, n_fft=400, n_mels=80)
    np.testing.assert_allclose(wm.mel_filters(), reference, rtol=1e-5, atol=1e-7)


def test_split_tensors_equal_the_ctranslate2_slices(tiny_en: Path) -> None:
    parts, _ = wm.source_files("tiny.en")
    info = wm.read_ggml(tiny_en)
    with parts[0].open("rb") as f:
        ct2 = wm.index_ct2(f)
        assert ct2.spec == "WhisperSpec" and ct2.binary_version == 6
        fused = wm._load(f, ct2.variables["decoder/layer_1/self_attention/linear_0/weight"])
        fused_bias = wm._load(f, ct2.variables["decoder/layer_1/self_attention/linear_0/bias"])
        kv = wm._load(f, ct2.variables["decoder/layer_1/attention/linear_1/weight"])
        pos = wm._load(f, ct2.variables["encoder/position_encodings/encodings"])
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
    tokens = wm.read_vocabulary(["!", "Ġthe", "Ċ", "Ã©", "<|endoftext|>", "<|startoftranscript|>"])
    assert tokens == [b"!", b" the", b"\n", "é".encode()]
    with pytest.raises(wm.ConversionError):
        wm.read_vocabulary(["a", "b"])
    # first tokens of the written table
    with tiny_en.open("rb") as f:
        f.seek(4 + 44 + 8 + 80 * 201 * 4)
        assert struct.unpack("<i", f.read(4))[0] == 50256
        first = [f.read(struct.unpack("<i", f.read(4))[0]) for _ in range(3)]
    assert first == [b"!", b'"', b"#"]


def test_base_from_two_parts(base: Path) -> None:
    info, problems = wm.verify(base)
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
    assert wm.build_model("tiny.en", MODELS) == tiny_en
    assert tiny_en.stat().st_mtime_ns == before


def test_build_redoes_a_damaged_output(tmp_path: Path, tiny_en: Path) -> None:
    out = tmp_path / "ggml-tiny.en.bin"
    shutil.copy(tiny_en, out)
    shutil.copy(tiny_en.with_name(tiny_en.name + ".sha256"), tmp_path / "ggml-tiny.en.bin.sha256")
    assert wm.is_built(out)
    with out.open("r+b") as f:
        f.seek(-1, 2)
        f.write(b"\x7f")
    assert not wm.is_built(out)
    _, problems = wm.verify(out)
    assert "content does not match the recorded .sha256" in problems
    wm.build_model("tiny.en", tmp_path)
    assert wm.is_built(out)
    assert out.read_bytes() == tiny_en.read_bytes()  # deterministic conversion


def test_input_checksum_mismatch_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = wm.SOURCES["tiny.en"]
    wrong = wm.ModelSource(**{**source.__dict__, "model_sha256": "0" * 64})
    monkeypatch.setitem(wm.SOURCES, "tiny.en", wrong)
    with pytest.raises(wm.ConversionError, match="does not match the pinned"):
        wm.build_model("tiny.en", tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_truncated_model_bin_is_refused(tmp_path: Path) -> None:
    parts, vocab = wm.source_files("tiny.en")
    cut = tmp_path / "model.bin"
    with parts[0].open("rb") as f:
        cut.write_bytes(f.read(3_000_000))
    with pytest.raises(wm.ConversionError, match="truncated"):
        wm.convert([cut], tmp_path / "out.bin", vocabulary=vocab)
    assert not (tmp_path / "out.bin").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["model.bin"]  # no temp file left


def test_unknown_model_name() -> None:
    with pytest.raises(wm.ConversionError, match="unknown model"):
        wm.build_model("large-v3", MODELS)


def test_cli(tiny_en: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert wm.main(["build", "--name", "tiny.en", "--out", str(MODELS)]) == 0
    assert "up to date" in capsys.readouterr().out
    assert wm.main(["verify", str(tiny_en)]) == 0
    out = capsys.readouterr().out
    assert "tiny.en (English-only)" in out and "n_audio_layer=4" in out and "OK" in out
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"not a model at all")
    assert wm.main(["verify", str(junk)]) == 1
    assert "not a ggml file" in capsys.readouterr().err
    assert wm.main(["verify", str(tmp_path / "missing.bin")]) == 1
