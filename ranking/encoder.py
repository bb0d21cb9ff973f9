"""Sentence encoders: the protocol the semantic channel needs, and the real model.

The semantic channel only needs "texts in, unit vectors out"; tests plug in a cheap
deterministic encoder, the service plugs in all-MiniLM-L6-v2. The service's encoder has
two backends over the same weights: ONNX Runtime (:mod:`ranking.onnx_encoder`) for
queries and other small batches, where torch's per-call overhead dominates, and torch
for bulk passages on a GPU (CUDA or MPS), in half precision and larger batches on CUDA.
On the CPU, ONNX Runtime serves bulk batches too, in length-sorted slices: no more CPU
than torch there (192 CISI passages of 120 words on two cores: 9.2 to 9.4 s against
11.0 s, the same vectors within 4e-7), and torch is then never imported, where
importing sentence-transformers alone costs 10 to 13 s on two cores: paid by whichever
call first needed a bulk batch (a warm-up replaying a crash's backlog, a catch-up), it
kept a restarted service from ever becoming ready under repeated kills. Both are loaded
offline, by path (loading by hub name tries the network first).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast, runtime_checkable

import numpy as np

from engram.models.device import Device
from engram.models.errors import EngramError
from engram.ranking.minilm import MINILM_DIM, model_path, quiet_loading
from engram.ranking.profiles import QueryPrecision


class DeviceUnavailable(EngramError):
    """A device was asked for by name and this machine does not have it."""


if TYPE_CHECKING:
    from engram.ranking.onnx_encoder import OnnxMiniLM

# At most this many texts go through ONNX Runtime in one call; larger batches (bulk
# ingestion, rebuilds, a warm-up's replay) go through torch on a GPU, and through ONNX
# Runtime in length-sorted slices of ONNX_BULK_SLICE on the CPU (sorted: less padding;
# slices of 16, 32 and 64 passages cost 15 to 45 % more CPU a passage than 8).
SMALL_BATCH = 16
ONNX_BULK_SLICE = 8

logger = logging.getLogger("engram.encoder")


#: The service model's identity, as vectors it computed are labelled (seed files).
MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"


@runtime_checkable
class Encoder(Protocol):
    """Maps texts to float32 L2-normalised rows (one row per text).

    An encoder may also name its model in ``model_id`` (see :func:`encoder_id`): vectors
    computed elsewhere are taken in place of its own only under the same name."""

    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


def encode_queries(encoder: Encoder, texts: Sequence[str], precision: QueryPrecision) -> np.ndarray:
    """``texts`` encoded as queries: through the encoder's query path
    (``encode_queries(texts, precision)``) where it has one, else as passages are (an
    encoder without one has a single precision). Looked up as an attribute, not through
    a runtime-checked protocol, which would inspect every member on each query batch."""
    query_path = getattr(encoder, "encode_queries", None)
    if query_path is not None:
        return cast(np.ndarray, query_path(texts, precision))
    return encoder.encode(texts)


def encoder_id(encoder: Encoder | None) -> str | None:
    """The model an encoder names itself after (None: unnamed, or no encoder)."""
    value = getattr(encoder, "model_id", None)
    return value if isinstance(value, str) and value else None


# Passages per torch call: a GPU wants large batches, a CPU gains nothing past ~32.
BATCH_SIZE = {Device.CPU: 32, Device.MPS: 128, Device.CUDA: 256}


def choose_device(requested: Device | str, *, cuda: bool, mps: bool) -> Device:
    """The device to run on, given what was asked for and what the machine has."""
    requested = Device(requested)
    if requested is Device.AUTO:
        return Device.CUDA if cuda else Device.MPS if mps else Device.CPU
    if (requested is Device.CUDA and not cuda) or (requested is Device.MPS and not mps):
        raise DeviceUnavailable(f"device {requested.value} requested but not available")
    return requested


def resolve_device(requested: Device | str = Device.AUTO) -> Device:
    """:func:`choose_device` with what torch sees on this machine."""
    import torch

    mps = getattr(torch.backends, "mps", None)
    return choose_device(requested, cuda=torch.cuda.is_available(), mps=bool(mps is not None and mps.is_available()))


# Device nodes through which torch could reach a GPU (NVIDIA, AMD ROCm, WSL's GPU).
ACCELERATOR_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")


def accelerator_possible() -> bool:
    """Whether torch might find a GPU here, answered without importing torch: importing
    it is a large share of a CPU service's resident memory (measured in docs/results/),
    paid only to learn there is none. A yes is then settled by torch itself."""
    return sys.platform == "darwin" or any(os.path.exists(node) for node in ACCELERATOR_NODES)


class TorchMiniLM:
    """all-MiniLM-L6-v2 through sentence-transformers on ``device`` (384 dims, 256-token
    window), fp16 on CUDA. Loaded on first use; encoding is serialised because one model
    instance already uses every core (or the whole GPU)."""

    dim = MINILM_DIM
    model_id = MINILM_ID

    def __init__(self, device: Device | str = Device.AUTO, batch_size: int | None = None) -> None:
        self.requested = Device(device)
        self._batch_size = batch_size
        self._lock = threading.Lock()
        self._model = None
        self.device: Device | None = None

    def load(self) -> None:
        """Load the model now (idempotent); raises if the model cannot be loaded."""
        with self._lock:
            self._load_locked()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            model = self._load_locked()
            assert self.device is not None  # set by the load
            vectors = model.encode(
                list(texts),
                batch_size=self._batch_size or BATCH_SIZE[self.device],
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def _load_locked(self):  # noqa: ANN202 - SentenceTransformer is imported lazily
        if self._model is None:
            path = model_path()
            from sentence_transformers import SentenceTransformer

            device = resolve_device(self.requested)
            quiet_loading()
            model = SentenceTransformer(str(path), device=device.value)
            if device is Device.CUDA:
                model.half()
            self.device, self._model = device, model
        return self._model


class MiniLMEncoder:
    """The service's all-MiniLM-L6-v2: ONNX Runtime for small batches (queries, single
    captures), torch for bulk and on a GPU; the same vectors either way (cosine >= 0.999,
    tested). Queries asked for at ``QueryPrecision.INT8`` run through the int8 copy of
    the ONNX graph (torch, without ONNX Runtime, has only float32).

    ``cache_dir``: where the ONNX export is kept (the service passes its data directory);
    without one, or when the export cannot be made, every batch goes through torch.
    Torch serves bulk batches only where it runs on an accelerator: on the CPU, ONNX
    Runtime serves every batch and torch is never loaded.
    """

    dim = MINILM_DIM
    model_id = MINILM_ID

    def __init__(
        self,
        cache_dir: Path | None = None,
        *,
        device: Device | str = Device.AUTO,
        batch_size: int | None = None,
        small_batch: int = SMALL_BATCH,
    ) -> None:
        self.torch = TorchMiniLM(device, batch_size)
        self._cache_dir = None if cache_dir is None else Path(cache_dir)
        self._small_batch = small_batch
        self._lock = threading.Lock()
        self._loaded = False
        self._bulk_on_torch = True  # settled by load()
        self.onnx: OnnxMiniLM | None = None  # once loaded
        self.onnx_int8: OnnxMiniLM | None = None  # once loaded: the query path at int8

    def load(self) -> None:
        """Load (exporting on first start) and warm every backend this process will use,
        so no later call pays a first-use cost. Raises if no backend can be loaded."""
        with self._lock:
            if self._loaded:
                return
            if self._cache_dir is not None:
                from engram.ranking.onnx_encoder import OnnxMiniLM

                try:
                    onnx = OnnxMiniLM(self._cache_dir)
                    onnx.load()
                    onnx.encode(["warm up"])
                    self.onnx = onnx
                except Exception as exc:  # noqa: BLE001 - torch remains: serve through it
                    logger.warning("ONNX query encoder unavailable, using torch: %s", exc)
                else:
                    self.onnx_int8 = self._load_int8()
            self._bulk_on_torch = self.onnx is None or not self._torch_on_cpu()
            if self._bulk_on_torch:
                self.torch.load()
                self.torch.encode(["warm up"])
            self._loaded = True

    def _load_int8(self) -> OnnxMiniLM | None:
        from engram.ranking.onnx_encoder import OnnxMiniLM

        assert self._cache_dir is not None  # only called where the float32 graph loaded
        try:
            onnx = OnnxMiniLM(self._cache_dir, QueryPrecision.INT8)
            onnx.load()
            onnx.encode(["warm up"])
        except Exception as exc:  # noqa: BLE001 - float32 queries remain
            logger.warning("int8 query encoder unavailable, encoding queries at float32: %s", exc)
            return None
        return onnx

    def _torch_on_cpu(self) -> bool:
        """Whether the torch backend would run on the CPU (then ONNX Runtime serves bulk
        batches as well and torch is never loaded), without importing torch where no GPU
        can be."""
        requested = self.torch.requested
        if requested is Device.CPU or (requested is Device.AUTO and not accelerator_possible()):
            return True
        return resolve_device(requested) is Device.CPU

    @property
    def backend(self) -> str:
        """Which backend small batches use: "onnx" or "torch"."""
        return "torch" if self.onnx is None else "onnx"

    def encode_queries(self, texts: Sequence[str], precision: QueryPrecision) -> np.ndarray:
        if not self._loaded:
            self.load()
        if precision is QueryPrecision.INT8 and self.onnx_int8 is not None and len(texts) <= self._small_batch:
            return self.onnx_int8.encode(texts)
        return self.encode(texts)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not self._loaded:
            self.load()
        if self.onnx is None or (self._bulk_on_torch and len(texts) > self._small_batch):
            return self.torch.encode(texts)
        if len(texts) <= self._small_batch:
            return self.onnx.encode(texts)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(order), ONNX_BULK_SLICE):
            rows = order[start : start + ONNX_BULK_SLICE]
            out[rows] = self.onnx.encode([texts[i] for i in rows])
        return out
