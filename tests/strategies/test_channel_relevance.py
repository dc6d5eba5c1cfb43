"""`channel_relevance`: each image's pooled gradient x input of its class's margin."""

import torch

from repinterp.models.split import split_model
from repinterp.strategies.channel_relevance import channel_relevance

from ..networks import random_setup


def test_channel_relevance_is_the_pooled_gradient_times_input(one_thread) -> None:
    model, images = random_setup(n=20)
    split = split_model(model, "relu2")
    with torch.no_grad():
        t = split.psi(images[:5])
    vectors = channel_relevance(split.head, t)
    for i in range(5):
        ti = t[i : i + 1].clone().requires_grad_(True)
        logits = split.head(ti)[0]
        c = int(logits.argmax())
        contrast = logits[c] - (logits.sum() - logits[c]) / (len(logits) - 1)
        (grad,) = torch.autograd.grad(contrast, ti)
        torch.testing.assert_close(vectors[i], (ti * grad)[0].sum((1, 2)).detach())
