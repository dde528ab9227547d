"""The layers: the plain layers and Sequential (:mod:`.layers`), the activations, the containers, and one file per family of the rest."""

from .layers import CrossEntropyLoss, Flatten, Linear, MSELoss, Sequential  # noqa: F401
from .activation import Dropout, Identity, LogSoftmax, ReLU, ReLU6, Sigmoid, Softmax, Tanh  # noqa: F401
from .containers import ModuleDict, ModuleList  # noqa: F401

from .batchnorm import BatchNorm1d, BatchNorm2d  # noqa: F401
from .conv import Conv2d  # noqa: F401
from .pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d  # noqa: F401
from .style import InstanceNorm2d, ReflectionPad2d, Upsample, UpsamplingNearest2d  # noqa: F401
from .activation import GELU  # noqa: F401,E402
from .transformer import Embedding, LayerNorm, MultiheadAttention, NonDynamicallyQuantizableLinear  # noqa: F401,E402
