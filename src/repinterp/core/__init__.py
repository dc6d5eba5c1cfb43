"""The method itself (Lam, Chu et al., ICCV 2021), on tensors, with no files.

Owns ``Q``: Eq. 2's boundaries and how their sources are sampled (``boundaries``), with the
settings of a fit (``config``); Algorithm 1 and the exact MILP on sides alone (``cover``); the
§5.1 heat maps (``heatmap``); the in-memory reference index (``reference_index``); one input's
polytope ``P(x)`` (``interpretation``); k-means regions (``regions``); which polytope explains
an image and what a group of images is made of (``groups``); the exact nearest-row search they
share (``nearest``); polytope-averaged Score-CAM weights (``polytope_weights``); beyond the
paper, contrastive maps (``contrastive``), channel relevances (``channel_relevance``) and
``granularity="strategy"`` (``strategies``, ``strategy_set``, ``model_strategies``, ``audit``);
and the registry through which its objects are shown in a notebook without importing presentation
(``views``; the views themselves are `repinterp.display`). What RI finds over many images
(AMI, convexity) is analysis, in `repinterp.evaluation`. May import ``runtime`` only: the
method needs no files, no data set and no model of its own.
"""
