"""Runtime: how the engine computes and checks, independent of the method.

Owns the precision every entry point computes in (``precision``: full float32, TF32 off), the
one resolver of device names and a model's device and dtype (``devices``), the
``torch.distributed`` helpers that let a fit run under ``torchrun`` (``distributed``), the
SHA-256 checksums of tensors and files (``checksums``), progress bars (``progress``) and the
version that every manifest records (``version``).
Imports nothing from repinterp.
"""
