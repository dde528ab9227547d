"""Real text without a download: the Python reference manual as it ships inside Python itself.

Every CPython installation carries ``pydoc_data/topics.py``, the text ``help("if")`` and ``help("class")``
print: about 80 sections of the Python language reference (some 465,000 characters of English prose with
code examples). The Python documentation is released under the PSF License Agreement (its examples also
under the Zero-Clause BSD licence), so it may be used, copied and trained on with attribution.

A character-level language model sees the text as a sequence of integer ids, one per character:
:class:`CharCorpus` builds that vocabulary, splits the ids into training and held-out parts, and cuts random
windows out of them as batches.
"""

from __future__ import annotations

from .. import backend
from ..dynamic.creation import tensor


def python_docs() -> str:
    """The Python reference manual's topics (``pydoc_data.topics``), in the order of their names."""
    try:
        from pydoc_data.topics import topics
    except ImportError as error:   # (some distributions strip the documentation from Python)
        raise RuntimeError("this Python has no pydoc_data package (the documentation text that help() prints); "
                           "install the full Python (for Debian: apt-get install python3-doc, or use the official "
                           "python.org or pyenv build)") from error
    return "\n".join(topics[name] for name in sorted(topics))


class CharCorpus:
    """A text as character ids: ``vocab`` (the sorted distinct characters), ``encode``/``decode``, and the ids
    split into ``train`` (the first ``1 - held_out`` of the text) and ``val`` (the rest, never trained on)."""

    def __init__(self, text: str, held_out: float = 0.1):
        if not isinstance(text, str) or len(text) < 2:
            raise ValueError(f"CharCorpus needs a text of at least 2 characters, got {type(text).__name__} "
                             f"of length {len(text) if isinstance(text, str) else '?'}")
        if not 0.0 < held_out < 1.0:
            raise ValueError(f"held_out is the fraction of the text kept for evaluation: between 0 and 1, "
                             f"got {held_out}")
        self.text = text
        self.vocab = sorted(set(text))
        self.index = {ch: i for i, ch in enumerate(self.vocab)}
        ids = backend.host.array([self.index[ch] for ch in text], dtype=backend.host.int64)
        cut = int(len(ids) * (1 - held_out))
        self.train, self.val = ids[:cut], ids[cut:]

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        unknown = sorted(set(text) - set(self.index))
        if unknown:
            raise ValueError(f"characters {unknown!r} are not in the corpus's vocabulary of {self.vocab_size}")
        return [self.index[ch] for ch in text]

    def decode(self, ids) -> str:
        return "".join(self.vocab[int(i)] for i in backend.host.asarray(ids).reshape(-1))

    def batch(self, split: str, batch_size: int, block_size: int, rng=None):
        """``batch_size`` random windows of ``block_size`` characters from ``split`` ("train" or "val"): inputs
        ``x`` and targets ``y``, the same windows shifted by one character (each position predicts the next)."""
        ids = {"train": self.train, "val": self.val}.get(split)
        if ids is None:
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        if len(ids) <= block_size:
            raise ValueError(f"the {split} split has {len(ids)} characters, fewer than block_size + 1 = "
                             f"{block_size + 1}; use a shorter block_size or a longer text")
        rng = rng if rng is not None else backend.generator()   # (flow.manual_seed makes batches repeat)
        starts = rng.integers(0, len(ids) - block_size, batch_size)
        x = backend.host.stack([ids[s:s + block_size] for s in starts])
        y = backend.host.stack([ids[s + 1:s + 1 + block_size] for s in starts])
        return tensor(x), tensor(y)
