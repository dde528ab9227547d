"""Model definitions, as ``flowvision.models`` / ``torchvision.models`` name them.

>>> import toynet.vision as flowvision
>>> model = flowvision.models.mobilenet_v2(num_classes=10)

No weights are ever downloaded: ``pretrained=True`` raises an error that says how to load your own.
"""

from .mobilenetv2 import ConvBNActivation, ConvBNReLU, InvertedResidual, MobileNetV2, mobilenet_v2  # noqa: F401
from . import neural_style_transfer  # noqa: F401,E402
