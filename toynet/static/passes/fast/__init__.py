"""The fast path's passes: skip this folder on a first reading. Each was tuned on a benchmark (MobileNetV2's
training and inference steps, the poly fit, the tiny GPT) and changes how a step computes, never what:

* :mod:`.scalars`  ReassociateScalars: two scalar factors across linear ops become one (``2 * lr``);
* :mod:`.fold_batch_norm`  FoldBatchNorm: conv -> BatchNorm (eval) -> relu6 becomes one conv;
* :mod:`.recompute`  RecomputeActivations: backward recomputes relu6(batch_norm(x)) instead of keeping it;
* :mod:`.layout`  ChannelsLast: 1x1 and depthwise convolutions, BatchNorm and what lies between run NHWC;
* :mod:`.slice_grads`  MergeSliceGradients: the gradients of a split's pieces, added up, become one ``cat``
  (a transformer's attention);
* :mod:`.kernels`  ChooseKernels: time the ways some ops can run, on the real shapes; keep the fastest;
* :mod:`.memory`  PlanMemory: the lesson's memory plan, its buffers packed tighter (alive at different times,
  two buffers share memory).

:func:`default_pipeline` puts them into the lesson's pipeline: the first five after the simplifying passes,
ChooseKernels just before the memory plan, which is the fast one.
"""

from __future__ import annotations

from ....mode import fast_replacement
from ... import passes
from ...ir import Pass
from .fold_batch_norm import fold_batch_norm
from .kernels import choose_kernels
from .layout import plan_layout
from .memory import plan_memory
from .recompute import recompute_activations
from .scalars import reassociate_scalars
from .slice_grads import merge_slice_gradients

_lesson_pipeline = passes.default_pipeline


@fast_replacement(passes, "default_pipeline")
def default_pipeline(amp: bool = False, checkpoint: tuple[str, ...] = ()) -> list[Pass]:
    """The lesson's pipeline with the speed passes in it."""
    pipeline = _lesson_pipeline(amp, checkpoint)
    fuse = pipeline.index(passes.fuse_elementwise)
    pipeline[fuse:fuse] = [reassociate_scalars, fold_batch_norm, recompute_activations, plan_layout,
                           merge_slice_gradients]
    memory = pipeline.index(passes.plan_memory)
    pipeline[memory:memory + 1] = [choose_kernels, plan_memory]
    return pipeline
