"""The fast path's ops, kept apart from the lesson's: skip this folder on a first reading.

* :mod:`.fused`: several plain ops as one, so Eager mode pays one Python call for them (``linear``,
  ``mse_loss``, ``sub_scaled``...);
* :mod:`.conv_fused`, :mod:`.conv_nhwc`, :mod:`.conv_rows`, :mod:`.conv_matrix`: convolutions that only the
  fast passes write (BatchNorm folded in, channels-last layout, depthwise algorithms timed by ChooseKernels);
* :mod:`.sum_to`: ``sum_to``'s forward for a bias gradient, into an array of its own; :mod:`.matmul`:
  ``matmul`` on a stack of rows and one matrix as one product; :mod:`.softmax`: softmax's backward as one op;
  :mod:`.rows`: sums and maxima along short rows (softmax's) as BLAS products and halvings; :mod:`.where`:
  a masked fill as a copy and a fill;
* :mod:`.emit`: the one-line source the fast compiler writes for cheap ops, and the candidate kernels
  ChooseKernels times.

Every op here is registered in the one op table (a saved graph that uses one loads on either path); only the
fast path's code makes them.
"""

from . import conv_fused, fused, matmul, rows, softmax, sum_to, where  # noqa: F401  (registers the ops and the replacements)
