"""Beyond the paper: heat maps other than §5.1's on RI's polytopes: the contrastive map of a
boundary between the predicted class and another (``contrastive``) and Score-CAM weights
averaged over a polytope's images (``polytope_weights``). May import ``runtime`` and ``core``.
"""
