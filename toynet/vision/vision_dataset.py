"""What every image data set here shares: indexing with transforms, a length, and torchvision's printout."""

from __future__ import annotations

from typing import Any


class VisionDataset:
    """Base of the data sets in :mod:`toynet.vision.datasets`. A subclass's ``__init__`` sets ``root``,
    ``train``, ``transform``, ``target_transform``, ``data`` (one image per row) and ``targets``."""

    root: Any
    train: bool
    transform: Any
    target_transform: Any
    data: Any
    targets: list

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        image, target = self.data[index], self.targets[index]
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return image, target

    def __repr__(self) -> str:
        lines = [f"Dataset {type(self).__name__}", f"    Number of datapoints: {len(self)}",
                 f"    Root location: {self.root}", f"    Split: {'Train' if self.train else 'Test'}"]
        if self.transform is not None:
            lines.append("    StandardTransform\n    Transform: " + repr(self.transform).replace("\n", "\n    "))
        if self.target_transform is not None:
            lines.append(f"    Target transform: {self.target_transform!r}")
        return "\n".join(lines)
