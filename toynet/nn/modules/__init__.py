"""The layers: the one-function layers (:mod:`.layers`), containers, and one file per family of the rest."""

from .layers import (  # noqa: F401
    CrossEntropyLoss, Dropout, Flatten, Identity, Linear, LogSoftmax, ModuleDict, ModuleList, MSELoss, ReLU, ReLU6,
    Sequential, Sigmoid, Softmax, Tanh,
)

from .batchnorm import BatchNorm1d, BatchNorm2d  # noqa: F401
from .conv import Conv2d  # noqa: F401
from .pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d  # noqa: F401
from .style import InstanceNorm2d, ReflectionPad2d, Upsample, UpsamplingNearest2d  # noqa: F401
