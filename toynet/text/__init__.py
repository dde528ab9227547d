"""``toynet.text``: a character-level corpus that ships with Python, and a tiny GPT written with OneFlow's API.

Notebook 09 trains the GPT on the corpus in Eager and Graph mode; ``benchmarks/bench_gpt.py`` times it.
"""

from .corpus import CharCorpus, python_docs  # noqa: F401
from .gpt import GPT, Block, CausalSelfAttention, GPTConfig, MLP  # noqa: F401
