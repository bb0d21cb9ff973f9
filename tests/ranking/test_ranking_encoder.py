"""The real model's two backends agree, and the device choice never requires a GPU.

Parity: the ONNX Runtime export (queries) and torch (bulk) must give the same vectors,
cosine >= 0.999, on sample text kept here and, when the dev collections sit beside the
repository (``../shared/data``), on every one of their queries.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engram.ranking import Device, DeviceUnavailable, MiniLMEncoder
from engram.ranking.encoder import TorchMiniLM, choose_device, resolve_device
from engram.ranking.onnx_encoder import OnnxMiniLM, export_file, quantized_file
from engram.ranking.profiles import QueryPrecision

SAMPLE = [
    "vehicle ignition failure",
    "what did Okonkwo17 do",
    "ERR_4821x",
    "Why was the billing ledger moved to serialisable transactions?",
    "the effect of x-rays on bone density in growing children",
    "   ",
    "naïve café — ünïcödé, 日本語のテキスト, emoji 🚀",
    "a " + "very long passage about nothing in particular " * 60,  # past the 256-token window
]
SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_auto_prefers_cuda_then_mps_then_cpu():
    assert choose_device(Device.AUTO, cuda=True, mps=True) is Device.CUDA
    assert choose_device("auto", cuda=False, mps=True) is Device.MPS
    assert choose_device(Device.AUTO, cuda=False, mps=False) is Device.CPU


def test_named_device_must_exist():
    assert choose_device("cpu", cuda=True, mps=False) is Device.CPU
    assert choose_device("cuda", cuda=True, mps=False) is Device.CUDA
    with pytest.raises(DeviceUnavailable):
        choose_device(Device.CUDA, cuda=False, mps=True)
    with pytest.raises(DeviceUnavailable):
        choose_device("mps", cuda=True, mps=False)
    with pytest.raises(ValueError):
        choose_device("tpu", cuda=True, mps=True)


def test_this_machine_resolves_to_what_torch_sees():
    import torch

    assert resolve_device(Device.AUTO) is (
        Device.CUDA if torch.cuda.is_available() else Device.MPS if torch.backends.mps.is_available() else Device.CPU
    )
    assert resolve_device("cpu") is Device.CPU


@pytest.fixture(scope="module")
def cache_dir(model_files: Path) -> Path:
    return model_files


@pytest.fixture(scope="module")
def backends(cache_dir: Path) -> tuple[OnnxMiniLM, TorchMiniLM]:
    onnx = OnnxMiniLM(cache_dir)
    onnx.load()
    torch_cpu = TorchMiniLM(Device.CPU)
    torch_cpu.load()
    return onnx, torch_cpu


@pytest.mark.model
def test_onnx_matches_torch_on_sample_text(backends):
    onnx, torch_cpu = backends
    one_by_one = np.vstack([onnx.encode([t]) for t in SAMPLE])
    batched = onnx.encode(SAMPLE)  # padded batch: padding must not move any vector
    reference = torch_cpu.encode(SAMPLE)
    assert one_by_one.shape == batched.shape == (len(SAMPLE), 384)
    assert cosines(one_by_one, reference).min() >= 0.999
    assert cosines(batched, reference).min() >= 0.999
    assert np.allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-5)


def _dev_queries() -> list[str]:
    return [
        json.loads(line)["text"]
        for path in sorted(SHARED_DATA.rglob("queries.jsonl"))
        for line in path.read_text().splitlines()
        if line.strip()
    ]


@pytest.mark.model
@pytest.mark.slow  # ~1,500 queries through both backends: minutes on two busy cores
@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="dev collections (../shared/data) not present")
def test_onnx_matches_torch_on_every_dev_query(backends):
    onnx, torch_cpu = backends
    queries = _dev_queries()
    assert len(queries) > 400
    served = np.vstack([onnx.encode(queries[i : i + 64]) for i in range(0, len(queries), 64)])
    assert cosines(served, torch_cpu.encode(queries)).min() >= 0.999


@pytest.mark.model
def test_service_encoder_on_the_cpu_serves_every_batch_through_onnx_and_reuses_the_export(backends, cache_dir: Path):
    _, torch_cpu = backends
    stamp = export_file(cache_dir).stat().st_mtime_ns
    encoder = MiniLMEncoder(cache_dir, device=Device.CPU, small_batch=2)
    encoder.load()
    assert encoder.backend == "onnx"
    assert export_file(cache_dir).stat().st_mtime_ns == stamp  # cached, not exported again
    # A bulk batch (past small_batch, past one length-sorted slice) loads nothing more:
    # the first bulk batch after ready once paid the 10 s import of sentence-transformers.
    bulk = [SAMPLE[i % len(SAMPLE)] + " " + "memory " * i for i in range(19)]
    vectors = encoder.encode(bulk)
    assert encoder.torch.device is None
    assert vectors.shape == (len(bulk), 384)
    assert cosines(vectors, torch_cpu.encode(bulk)).min() >= 0.999  # row order kept


@pytest.mark.model
def test_auto_device_without_a_gpu_node_does_not_load_torch(backends, cache_dir: Path, monkeypatch):
    import engram.ranking.encoder as encoder_module

    monkeypatch.setattr(encoder_module, "accelerator_possible", lambda: False)
    encoder = MiniLMEncoder(cache_dir, device=Device.AUTO)
    encoder.load()
    assert encoder.backend == "onnx" and encoder.torch.device is None
    assert encoder.encode(SAMPLE[:1]).shape == (1, 384)


@pytest.mark.model
def test_damaged_export_is_made_again(tmp_path: Path):
    export_file(tmp_path).parent.mkdir(parents=True, exist_ok=True)
    export_file(tmp_path).write_bytes(b"not a model")
    onnx = OnnxMiniLM(tmp_path)
    onnx.load()
    assert onnx.encode(["hello"]).shape == (1, 384)


@pytest.mark.model
def test_int8_query_graph_is_made_once_and_stays_close_to_float32(backends, cache_dir: Path):
    onnx, _ = backends
    int8 = OnnxMiniLM(cache_dir, QueryPrecision.INT8)
    int8.load()
    stamp = quantized_file(cache_dir).stat().st_mtime_ns
    again = OnnxMiniLM(cache_dir, QueryPrecision.INT8)
    again.load()
    assert quantized_file(cache_dir).stat().st_mtime_ns == stamp  # cached, not quantised again
    queries = SAMPLE[:5]
    exact, quantised = onnx.encode(queries), int8.encode(queries)
    assert np.abs(exact - quantised).max() > 1e-3  # another graph, not the float32 one
    assert cosines(quantised, exact).min() >= 0.97
    assert np.allclose(np.linalg.norm(quantised, axis=1), 1.0, atol=1e-5)
    # The nearest of a few passages stays the nearest.
    passages = onnx.encode(["ignition coil failure in a car", "ledger isolation levels", "bone growth and x-rays"])
    assert ((exact @ passages.T).argmax(1)[[0, 3, 4]] == (quantised @ passages.T).argmax(1)[[0, 3, 4]]).all()


@pytest.mark.model
def test_service_encoder_encodes_queries_at_the_precision_asked(backends, cache_dir: Path):
    onnx, _ = backends
    encoder = MiniLMEncoder(cache_dir, device=Device.CPU)
    queries = SAMPLE[:3]
    assert np.array_equal(encoder.encode_queries(queries, QueryPrecision.FLOAT32), encoder.encode(queries))
    assert encoder.onnx_int8 is not None
    assert np.array_equal(encoder.encode_queries(queries, QueryPrecision.INT8), encoder.onnx_int8.encode(queries))
    assert not np.array_equal(encoder.encode(queries), encoder.onnx_int8.encode(queries))
    assert np.array_equal(encoder.encode(queries), onnx.encode(queries))  # passages stay float32


@pytest.mark.model
def test_damaged_int8_graph_is_made_again(backends, cache_dir: Path, tmp_path: Path):
    export_file(tmp_path).write_bytes(export_file(cache_dir).read_bytes())
    quantized_file(tmp_path).write_bytes(b"not a model")
    int8 = OnnxMiniLM(tmp_path, QueryPrecision.INT8)
    int8.load()
    assert quantized_file(tmp_path).stat().st_size > 1_000_000
    assert int8.encode(["hello"]).shape == (1, 384)


@pytest.mark.model
@pytest.mark.skipif(resolve_device(Device.AUTO) is Device.CPU, reason="no GPU on this machine")
def test_gpu_vectors_match_cpu(backends):
    _, torch_cpu = backends
    gpu = TorchMiniLM(Device.AUTO)
    assert cosines(gpu.encode(SAMPLE), torch_cpu.encode(SAMPLE)).min() >= 0.999


def test_device_is_a_setting(monkeypatch):
    from pydantic import ValidationError

    from engram.service.settings import load_settings

    assert load_settings().device is Device.AUTO
    monkeypatch.setenv("ENGRAM_DEVICE", "cpu")
    assert load_settings().device is Device.CPU
    monkeypatch.setenv("ENGRAM_DEVICE", "tpu")
    with pytest.raises(ValidationError):
        load_settings()


@pytest.mark.skipif(resolve_device(Device.AUTO) is Device.CUDA, reason="this machine has CUDA")
def test_engine_refuses_a_named_device_the_machine_lacks(tmp_path: Path):
    from engram.service.engine.engine import Engine

    with pytest.raises(DeviceUnavailable):
        Engine.open(tmp_path / "data", device=Device.CUDA)
    assert not (tmp_path / "data").exists()  # refused before anything was created


@pytest.mark.model
def test_queries_fall_back_to_float32_when_the_int8_graph_cannot_be_made(
    backends, cache_dir: Path, tmp_path: Path, monkeypatch, caplog
):
    import engram.ranking.onnx_encoder as onnx_module

    def refuse(source: Path, destination: Path) -> None:
        raise OSError("no space left on device")

    monkeypatch.setattr(onnx_module, "quantize", refuse)
    export_file(tmp_path).write_bytes(export_file(cache_dir).read_bytes())
    encoder = MiniLMEncoder(tmp_path, device=Device.CPU)
    with caplog.at_level("WARNING", logger="engram.encoder"):
        encoder.load()
    assert encoder.onnx is not None and encoder.onnx_int8 is None
    assert "int8 query encoder unavailable" in caplog.text
    queries = SAMPLE[:2]
    assert np.array_equal(encoder.encode_queries(queries, QueryPrecision.INT8), encoder.encode(queries))
