"""Image transforms, chained with :class:`Compose` as in torchvision.

An image travels through two stages:

1. **Before** :class:`ToTensor` it is a host array, height x width x channels (HWC), ``uint8`` in
   0..255, as a data set returns it (a PIL image is accepted and turned into such an array). Data
   augmentation works here: :class:`RandomCrop`, :class:`RandomHorizontalFlip`.
2. :class:`ToTensor` makes a toynet tensor, channels x height x width (CHW, the layout conv layers
   expect), ``float32`` in [0, 1]. :class:`Normalize` works on that tensor.

The random transforms draw from toynet's one random generator, so ``toynet.manual_seed(s)`` makes
the augmented images of a run reproducible, together with weight init and data shuffling.

>>> import toynet.vision.transforms as T
>>> augment = T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.ToTensor(),
...                      T.Normalize((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .. import backend
from ..backend import host
from ..dynamic.creation import from_numpy, tensor
from ..dynamic.tensor import Tensor


class Compose:
    """Apply ``transforms`` one after the other: ``Compose([f, g])(x) == g(f(x))``."""

    def __init__(self, transforms: Sequence[Callable]):
        self.transforms = list(transforms)

    def __call__(self, image: Any) -> Any:
        for transform in self.transforms:
            image = transform(image)
        return image

    def __repr__(self) -> str:
        inner = "".join(f"\n    {t!r}" for t in self.transforms)
        return f"Compose({inner}\n)"


class Lambda:
    """Wrap any function of one argument as a transform: ``Lambda(lambda y: y * 2)``.

    Used for what no ready-made transform does, e.g. turning an int label into a one-hot tensor in
    ``target_transform``."""

    def __init__(self, function: Callable):
        if not callable(function):
            raise TypeError(f"Lambda expects a function of one argument, got {type(function).__name__}")
        self.function = function

    def __call__(self, value: Any) -> Any:
        return self.function(value)

    def __repr__(self) -> str:
        return "Lambda()"


class ToTensor:
    """HWC image (``uint8`` host array or PIL image) -> CHW ``float32`` tensor with values in [0, 1].

    ``uint8`` pixels are divided by 255; a floating-point array is taken as already scaled and only
    converted to float32. A 2-D (grayscale) image gets one channel: (H, W) -> (1, H, W).
    """

    def __call__(self, image: Any) -> Tensor:
        array = _host_image(image, "ToTensor")
        if array.ndim == 2:
            array = array[:, :, None]
        if array.dtype == host.uint8:
            chw = host.ascontiguousarray(array.transpose(2, 0, 1), dtype=host.float32)
            chw /= 255  # a Python number keeps float32 float32
        elif array.dtype.kind == "f":
            chw = host.ascontiguousarray(array.transpose(2, 0, 1), dtype=host.float32)
        else:
            raise TypeError(f"ToTensor expects uint8 pixels (0..255) or floats, got {array.dtype}; convert "
                            "the image first, e.g. image.astype('uint8') or pil_image.convert('RGB')")
        return from_numpy(chw)  # chw is a fresh array, so sharing its memory is safe

    def __repr__(self) -> str:
        return "ToTensor()"


class Normalize:
    """Per channel: ``(x - mean[c]) / std[c]``, on a float tensor of shape (..., C, H, W).

    ``mean`` and ``std`` have one number per channel (or a single number for all channels).
    """

    def __init__(self, mean: Sequence[float] | float, std: Sequence[float] | float):
        self.mean = _per_channel(mean, "mean")
        self.std = _per_channel(std, "std")
        if any(s == 0 for s in self.std):
            raise ValueError(f"Normalize: std must not contain 0 (it divides), got {self.std}")

    def __call__(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor):
            raise TypeError(f"Normalize works on tensors, got {type(x).__name__}; put ToTensor() before it")
        if x.ndim < 3 or not x.dtype.is_floating_point:
            raise ValueError(f"Normalize expects a float tensor of shape (..., C, H, W), got {x.dtype} "
                             f"of shape {tuple(x.shape)}; put ToTensor() before it")
        channels = x.shape[-3]
        for values, what in ((self.mean, "mean"), (self.std, "std")):
            if len(values) not in (1, channels):
                raise ValueError(f"Normalize: {what} has {len(values)} values but the image has {channels} "
                                 f"channels (shape {tuple(x.shape)})")
        # Shape (C, 1, 1) broadcasts over the height and width of every channel.
        mean = tensor(self.mean, dtype=x.dtype, device=x.device).reshape(-1, 1, 1)
        std = tensor(self.std, dtype=x.dtype, device=x.device).reshape(-1, 1, 1)
        return (x - mean) / std

    def __repr__(self) -> str:
        return f"Normalize(mean={self.mean}, std={self.std})"


class RandomCrop:
    """Cut a random ``size`` window out of an HWC host image, after optional zero padding.

    ``size`` is an int (square) or ``(height, width)``. ``padding`` is added around the image first:
    an int (all sides), ``(left/right, top/bottom)`` or ``(left, top, right, bottom)``, filled with
    ``fill``. ``RandomCrop(32, padding=4)`` on CIFAR-10 shifts each image by up to 4 pixels.
    """

    def __init__(self, size: int | Sequence[int], padding: int | Sequence[int] | None = None, fill: int = 0):
        self.size = (size, size) if isinstance(size, int) else tuple(size)
        if len(self.size) != 2 or min(self.size) <= 0:
            raise ValueError(f"RandomCrop: size must be a positive int or (height, width), got {size}")
        self.padding = _padding(padding)
        self.fill = fill

    def __call__(self, image: Any) -> Any:
        array = _host_image(image, "RandomCrop")
        left, top, right, bottom = self.padding
        if any(self.padding):
            widths = [(top, bottom), (left, right)] + [(0, 0)] * (array.ndim - 2)
            array = host.pad(array, widths, mode="constant", constant_values=self.fill)
        height, width = array.shape[:2]
        crop_h, crop_w = self.size
        if crop_h > height or crop_w > width:
            raise ValueError(f"RandomCrop: the crop {crop_h}x{crop_w} is larger than the (padded) image "
                             f"{height}x{width}; use a smaller size or more padding")
        rng = backend.generator()  # fetched per call: manual_seed replaces the generator
        i = int(rng.integers(0, height - crop_h + 1))
        j = int(rng.integers(0, width - crop_w + 1))
        return array[i:i + crop_h, j:j + crop_w]

    def __repr__(self) -> str:
        return f"RandomCrop(size={self.size}, padding={self.padding})"


class RandomHorizontalFlip:
    """Mirror an HWC host image left-right with probability ``p``."""

    def __init__(self, p: float = 0.5):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"RandomHorizontalFlip: p is a probability in [0, 1], got {p}")
        self.p = p

    def __call__(self, image: Any) -> Any:
        array = _host_image(image, "RandomHorizontalFlip")
        if backend.generator().random() < self.p:
            return array[:, ::-1]  # axis 1 is the width
        return array

    def __repr__(self) -> str:
        return f"RandomHorizontalFlip(p={self.p})"


# ------------------------------------------------------------------------------------------- helpers


def _host_image(image: Any, who: str) -> Any:
    """The image as a host array of shape (H, W) or (H, W, C); PIL images are converted."""
    if isinstance(image, Tensor):
        raise TypeError(f"{who} works on images before ToTensor (HWC host arrays), got a toynet Tensor; "
                        f"put {who} before ToTensor() in Compose")
    if hasattr(image, "getbands"):  # a PIL image (not imported here: PIL is optional)
        image = host.asarray(image)
    if not isinstance(image, host.ndarray):
        raise TypeError(f"{who} expects an image as a NumPy array (H, W, C) or a PIL image, "
                        f"got {type(image).__name__}")
    if image.ndim not in (2, 3):
        raise ValueError(f"{who} expects an image of shape (H, W) or (H, W, C), got shape {image.shape}")
    return image


def _per_channel(values: Sequence[float] | float, what: str) -> tuple[float, ...]:
    values = (values,) if isinstance(values, (int, float)) else tuple(float(v) for v in values)
    if not values:
        raise ValueError(f"Normalize: {what} needs at least one value")
    return tuple(float(v) for v in values)


def _padding(padding: int | Sequence[int] | None) -> tuple[int, int, int, int]:
    """Padding as (left, top, right, bottom)."""
    if padding is None:
        return (0, 0, 0, 0)
    if isinstance(padding, int):
        padding = (padding,)
    padding = tuple(int(p) for p in padding)
    if any(p < 0 for p in padding) or len(padding) not in (1, 2, 4):
        raise ValueError(f"RandomCrop: padding must be an int, (left/right, top/bottom) or "
                         f"(left, top, right, bottom), all >= 0; got {padding}")
    if len(padding) == 1:
        return padding * 4
    if len(padding) == 2:
        return (padding[0], padding[1], padding[0], padding[1])
    return padding
