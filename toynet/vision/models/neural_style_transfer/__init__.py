"""Fast neural style transfer (Johnson et al. 2016), as flowvision defines it: see :mod:`.stylenet`."""

from .stylenet import NeuralStyleTransfer, neural_style_transfer  # noqa: F401
