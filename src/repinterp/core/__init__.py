"""The method itself (Lam, Chu et al., ICCV 2021), on tensors, with no files, and the one plug
through which it may go beyond the paper.

Start with ``paper``: RI for one input as the paper states it, the reference the rest is tested
against. The fast kernel: ``Q``, Eq. 2's boundaries and how their sources are sampled
(``boundaries``), with the settings of a fit (``config``); Algorithm 1 and the exact MILP on
sides alone (``cover``); the §5.1 heat maps (``heatmap``); the in-memory reference index and the
rows of a batch (``reference_index``); Eq. 3 for N inputs (``representative``); one input's
polytope ``P(x)`` (``interpretation``); k-means regions (``regions``); which polytope explains
an image and what a group of images is made of (``groups``); the exact nearest-row search they
share (``nearest``). The plug: ``granularity`` (three hooks; the paper's is the default) and
``granularities`` (the registry of names). And the registry through which its objects are shown
in a notebook without importing presentation (``views``; the views themselves are
`repinterp.display`). What goes beyond the paper lives in `repinterp.strategies` and
`repinterp.maps`; what RI finds over many images (AMI, convexity) is analysis, in
`repinterp.evaluation`. May import ``runtime`` only: the method needs no files, no data set and
no model of its own.
"""
