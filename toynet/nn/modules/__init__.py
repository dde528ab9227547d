"""The layers, one family per file."""

from .activation import ReLU, ReLU6, Sigmoid, Softmax, LogSoftmax, Tanh, Identity  # noqa: F401
from .container import ModuleDict, ModuleList, Sequential  # noqa: F401
from .linear import Flatten, Linear  # noqa: F401
from .loss import CrossEntropyLoss, MSELoss  # noqa: F401
from .batchnorm import BatchNorm1d, BatchNorm2d  # noqa: F401
from .dropout import Dropout  # noqa: F401
from .conv import Conv2d  # noqa: F401
from .pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d  # noqa: F401
from .style import InstanceNorm2d, ReflectionPad2d, Upsample, UpsamplingNearest2d  # noqa: F401
