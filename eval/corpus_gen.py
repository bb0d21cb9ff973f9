"""A synthetic memory corpus with realistic structure, for capacity runs.

Why not random text and random vectors: BM25 cost depends on posting-list lengths, which
follow the vocabulary's Zipf law; HNSW recall and speed depend on the data's intrinsic
dimension, and random isotropic vectors make any HNSW look broken. So:

* Vocabulary: ``vocab_size`` pronounceable pseudo-words; word frequency is Zipfian
  (exponent ``zipf_s``) both globally and inside each topic.
* Topics: ``topics`` latent topics, each a random unit centroid in embedding space and a
  Zipfian preference over its own random slice of the vocabulary.
* A record mixes 1 to 3 topics (Dirichlet weights). Its text draws each word from the
  global background with probability ``background`` or else from one of its topics; its
  vector is the weighted mix of its topics' centroids plus Gaussian noise of relative
  size ``noise``, L2-normalised. The vectors are therefore low-rank (``topics``
  directions) plus noise, like sentence embeddings of a topical corpus.
* Queries are drawn the same way (short text, same topic mixture for text and vector), so
  a query has topical neighbours in both channels.

Everything is generated in chunks from a seed, so a million records stream through
memory chunk by chunk and the same seed always gives the same corpus.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from engram.index_data.records import DEFAULT_VALID_TIME_MS, IngestRecord

_ONSETS = [
    "b",
    "c",
    "d",
    "f",
    "g",
    "h",
    "j",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "w",
    "z",
    "br",
    "cr",
    "dr",
    "fl",
    "gr",
    "kl",
    "pl",
    "pr",
    "sh",
    "st",
    "th",
    "tr",
]
#: The uniform doubles ``SyntheticCorpus._texts`` draws a word: whether it is background, its
#: topic slot, its rank in the topic and its rank in the background.
_TEXT_DRAWS = 4
#: Records a chunk generates at once. Each chunk draws from a generator seeded by where
#: it starts, so the records and vectors of a corpus are those of chunks of this size.
CHUNK = 10_000
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "io", "ou"]
_CODAS = ["", "n", "r", "s", "t", "l", "m", "x", "nd", "st"]


@dataclass(frozen=True)
class CorpusSpec:
    size: int
    dim: int = 384
    topics: int = 300
    vocab_size: int = 50_000
    zipf_s: float = 1.07
    background: float = 0.35
    noise: float = 0.35
    min_words: int = 30
    max_words: int = 90
    seed: int = 7


def _vocabulary(size: int, rng: np.random.Generator) -> np.ndarray:
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < size:
        n = int(rng.integers(2, 4))
        word = "".join(_ONSETS[rng.integers(len(_ONSETS))] + _VOWELS[rng.integers(len(_VOWELS))] for _ in range(n))
        word += _CODAS[rng.integers(len(_CODAS))]
        if word not in seen:
            seen.add(word)
            words.append(word)
    return np.array(words, dtype=object)


def _zipf_cdf(n: int, s: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** s
    cdf = np.cumsum(weights)
    return cdf / cdf[-1]


class SyntheticCorpus:
    """Deterministic chunks of (records, vectors) and a query set for one spec."""

    def __init__(self, spec: CorpusSpec) -> None:
        self.spec = spec
        rng = np.random.default_rng(spec.seed)
        self.vocab = _vocabulary(spec.vocab_size, rng)
        self.background_cdf = _zipf_cdf(spec.vocab_size, spec.zipf_s)
        topic_words = max(200, spec.vocab_size // 20)
        self.topic_vocab = np.stack(
            [rng.choice(spec.vocab_size, topic_words, replace=False) for _ in range(spec.topics)]
        )
        self.topic_cdf = _zipf_cdf(topic_words, spec.zipf_s)
        centroids = rng.standard_normal((spec.topics, spec.dim)).astype(np.float32)
        self.centroids = centroids / np.linalg.norm(centroids, axis=1, keepdims=True)

    # -- building blocks ----------------------------------------------------------------

    def _mixtures(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(topic ids [n,3], weights [n,3]); unused slots have weight 0."""
        counts = rng.choice([1, 2, 3], size=n, p=[0.5, 0.35, 0.15])
        topics = rng.integers(0, self.spec.topics, size=(n, 3))
        weights = rng.dirichlet(np.ones(3), size=n)
        weights[np.arange(3)[None, :] >= counts[:, None]] = 0.0
        weights /= weights.sum(axis=1, keepdims=True)
        return topics, weights

    def _vectors(self, rng: np.random.Generator, topics: np.ndarray, weights: np.ndarray) -> np.ndarray:
        mix = np.einsum("nk,nkd->nd", weights, self.centroids[topics])
        mix /= np.linalg.norm(mix, axis=1, keepdims=True)
        noise = rng.standard_normal(mix.shape).astype(np.float32)
        noise *= self.spec.noise / np.sqrt(self.spec.dim)
        out = (mix + noise).astype(np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    def _texts(
        self, rng: np.random.Generator, topics: np.ndarray, weights: np.ndarray, lengths: np.ndarray
    ) -> list[str]:
        # Draws exactly _TEXT_DRAWS doubles a word (chunk_vectors skips them).
        total = int(lengths.sum())
        owner = np.repeat(np.arange(len(lengths)), lengths)
        from_background = rng.random(total) < self.spec.background
        # Pick a topic slot per word according to the record's weights.
        cum = np.cumsum(weights[owner], axis=1)
        slot = (rng.random(total)[:, None] > cum).sum(axis=1).clip(0, 2)
        topic = topics[owner, slot]
        in_topic = np.searchsorted(self.topic_cdf, rng.random(total))
        topical = self.topic_vocab[topic, in_topic.clip(0, self.topic_vocab.shape[1] - 1)]
        background = np.searchsorted(self.background_cdf, rng.random(total)).clip(0, self.spec.vocab_size - 1)
        ids = np.where(from_background, background, topical)
        words = self.vocab[ids]
        bounds = np.concatenate([[0], np.cumsum(lengths)])
        return [" ".join(words[bounds[i] : bounds[i + 1]]) for i in range(len(lengths))]

    # -- public -------------------------------------------------------------------------

    def chunks(self, chunk: int = CHUNK, first: int = 0) -> Iterator[tuple[list[IngestRecord], np.ndarray]]:
        """(records, vectors [n, dim]) in order, ``chunk`` at a time, from record ``first``
        (a multiple of ``chunk``: each chunk's records follow from where it starts)."""
        if first % chunk:
            raise ValueError("the first record of chunks must start a chunk")
        spec = self.spec
        for start in range(first, spec.size, chunk):
            n = min(chunk, spec.size - start)
            rng = np.random.default_rng([spec.seed, start])
            topics, weights = self._mixtures(rng, n)
            lengths = rng.integers(spec.min_words, spec.max_words + 1, size=n)
            texts = self._texts(rng, topics, weights, lengths)
            vectors = self._vectors(rng, topics, weights)
            times = DEFAULT_VALID_TIME_MS + rng.integers(0, 365 * 86_400_000, size=n)
            records = [
                IngestRecord(
                    external_id=f"syn-{start + i}",
                    text=texts[i],
                    source_ref=f"synthetic:{spec.seed}/{start + i}",
                    locator_scheme="synthetic",
                    locator_value=str(start + i),
                    valid_time_ms=int(times[i]),
                )
                for i in range(n)
            ]
            yield records, vectors

    def chunk_vectors(self, start: int, n: int) -> np.ndarray:
        """The vectors of :meth:`chunks`'s chunk at ``start`` (of ``n`` records), without
        making its texts: the generator is advanced past the doubles they draw, about a
        third of the work of the whole chunk."""
        bits = np.random.PCG64([self.spec.seed, start])  # what default_rng seeds
        rng = np.random.Generator(bits)
        topics, weights = self._mixtures(rng, n)
        lengths = rng.integers(self.spec.min_words, self.spec.max_words + 1, size=n)
        bits.advance(_TEXT_DRAWS * int(lengths.sum()))
        return self._vectors(rng, topics, weights)

    def records(self, chunk: int = CHUNK, first: int = 0) -> Iterator[IngestRecord]:
        for records, _ in self.chunks(chunk, first):
            yield from records

    def write_vectors(self, path: str, chunk: int = CHUNK, dtype: type = np.float16) -> np.ndarray:
        """All vectors into a ``.npy`` file, streamed; returns it memory-mapped. float16
        by default: what the engine keeps of them, at half the disk of float32 (10M
        vectors: 7.7 GB)."""
        out = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(self.spec.size, self.spec.dim))
        for start in range(0, self.spec.size, chunk):
            n = min(chunk, self.spec.size - start)
            out[start : start + n] = self.chunk_vectors(start, n)
        out.flush()
        del out
        return np.load(path, mmap_mode="r")

    def queries(self, n: int, seed: int = 99, words: tuple[int, int] = (3, 8)) -> tuple[list[str], np.ndarray]:
        """``n`` short topical queries: texts and their (noisy) vectors."""
        rng = np.random.default_rng([self.spec.seed, seed])
        topics, weights = self._mixtures(rng, n)
        lengths = rng.integers(words[0], words[1] + 1, size=n)
        saved = self.spec.background
        object.__setattr__(self.spec, "background", 0.1)  # queries are mostly topical words
        try:
            texts = self._texts(rng, topics, weights, lengths)
        finally:
            object.__setattr__(self.spec, "background", saved)
        return texts, self._vectors(rng, topics, weights)
