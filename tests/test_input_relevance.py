"""``RepresentativeInterpreter.input_relevance``: what the audit pastes and the why maps draw."""

import torch

from repinterp import RepresentativeInterpreter

from .networks import images, tiny_cnn


def test_input_relevance_is_gradient_x_input_of_the_predicted_class_or_its_contrast(one_thread):
    model = tiny_cnn(seed=1).eval()
    x = images(40, seed=2)
    ri = RepresentativeInterpreter(model, "3", progress=False, n_boundaries=30).fit(x[:30])
    new = x[30:]
    logits, maps = ri.input_relevance(new)
    contrast = (logits.argmax(1) + 1) % logits.shape[1]
    _, contrasted = ri.input_relevance(new, contrast)
    for i in range(len(new)):  # brute force, one image at a time
        xi = new[i : i + 1].clone().requires_grad_(True)
        out = model(xi)[0]
        c = int(out.argmax())
        (grad,) = torch.autograd.grad(out[c], xi, retain_graph=True)
        expected = (grad * xi).sum(1)[0].clamp(min=0)
        torch.testing.assert_close(maps[i], expected.detach(), rtol=1e-4, atol=1e-6)
        (grad,) = torch.autograd.grad(out[c] - out[int(contrast[i])], xi)
        expected = (grad * xi).sum(1)[0].clamp(min=0)
        torch.testing.assert_close(contrasted[i], expected.detach(), rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(logits, model(new).detach())
