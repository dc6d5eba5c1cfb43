"""The research studies behind docs/results.md: each a module run as ``python -m studies.NAME
--out DIR`` from the repository root (with ``PYTHONPATH=src`` unless repinterp is installed).

Importing a study runs nothing. `studies.runner` is what they share: the options of a run over
model seeds, seeds x settings -> rows -> mean ± std, the provenance of a run, and the files
written through `repinterp.store.outputs`. The studies: ``groups_sweep`` (where RI finds
sub-class groups: a sweep over layer, |Q|, sampling and temperature), ``law`` (the class
regions' convexity against the groups), ``subclass`` (groupings below the class and their heat
maps' faithfulness), ``vgg_seeds`` and ``vgg_groups`` (the VGG-11-BN of ``shapes:64``),
``why`` (pooled against per-interpretation AD), ``paired`` (paired differences of two methods
in saved results) and ``architecture`` (the picture of docs/architecture.md). The published
results are under docs/results/.
"""
