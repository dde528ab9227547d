"""A tiny CIFAR-10 in the exact format of the official "python version" archive, for tests.

The writer lives in :mod:`toynet.vision.fake_cifar` (the tutorial examples use it too, when the real
data set is absent); this module keeps the names the tests import.
"""

from toynet.vision.fake_cifar import (  # noqa: F401
    ARCHIVE,
    CLASSES,
    FOLDER,
    FakeCifar,
    make_cifar10,
    make_images,
    python2_pickle,
    python3_pickle,
)
