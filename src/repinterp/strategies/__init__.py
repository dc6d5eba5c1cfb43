"""Beyond the paper: a model's strategies, the groups of images of one predicted class it treats
alike, found without labels, each given an exact polytope, and the audit that ranks them.

Owns the discovery (``discovery``: k-means per class, k by the silhouette against one
Gaussian's, and the separators between a class's strategies), the strategy granularity
(``granularity``: `StrategySet`, ``granularity="strategy"``, plugged into the method through
`repinterp.core.granularity`), what a user meets (``model``: `Strategy`, `model_strategies`),
the causal check (``causal_checks``), the audit's reasons, score and flag (``audit``) and the
channel relevances the audit and the PCX-like grouping read (``channel_relevance``). May import
``runtime`` and ``core``; the method's kernel imports nothing of it (the registry names
`StrategySet` by its module's path).
"""
