"""The two scalar teaching versions of toynet, each short enough to read in one sitting.

* :mod:`toynet.toy.dynamic`: define-by-run. ``Tensor`` computes as you write ``w * x + b`` and
  records its parents; ``backward`` walks that record.
* :mod:`toynet.toy.static`: define-and-run. ``Node``\\ s describe the computation in a ``Graph``
  first; ``SGD`` then runs it forward and backward, step after step.

They work on plain Python numbers. The full framework keeps the same names and the same shape of code
(``toynet.Tensor`` and ``toynet/autograd.py``; ``toynet.static`` and ``toynet.nn.Graph``) on arrays.
"""

from . import dynamic, static  # noqa: F401
