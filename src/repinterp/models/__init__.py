"""Models: the network the method interprets.

Owns splitting a classifier at a target layer into ``psi`` and a piecewise-linear head ``G``
with ``torch.fx`` (``split``), the node-by-node check that the head is piecewise linear
(``linearity``), models by name with local weights (``zoo``) and a seeded training loop
(``train``). May import ``runtime`` only.
"""
