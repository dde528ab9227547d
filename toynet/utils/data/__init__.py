"""Datasets and batching: ``Dataset``, ``TensorDataset``, ``DataLoader`` and ``default_collate``."""

from .dataloader import DataLoader, default_collate  # noqa: F401
from .dataset import Dataset, Subset, TensorDataset  # noqa: F401
