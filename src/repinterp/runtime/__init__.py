"""Runtime: how the engine computes and checks, independent of the method.

Owns the precision every entry point computes in (``precision``: full float32, TF32 off), the
one resolver of device names and a model's device and dtype (``devices``), the
``torch.distributed`` helpers that let a fit run under ``torchrun`` (``distributed``), and the
SHA-256 checksums of tensors and files (``checksums``). Imports nothing from repinterp.
"""
