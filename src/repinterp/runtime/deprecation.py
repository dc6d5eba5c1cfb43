"""Names deprecated for one release: each use warns and says the new spelling."""

from __future__ import annotations

import warnings

__all__ = ["renamed"]


def renamed(owner: str, old: str, new: str) -> property:
    """A read-only alias ``old`` of ``owner``'s attribute ``new`` (a property, or a method,
    which it returns bound) whose every use warns with a ``DeprecationWarning`` (deprecated in
    0.6, removed in 0.7)."""

    def alias(self: object) -> object:
        warnings.warn(
            f"{owner}.{old} is deprecated and will be removed in 0.7: use {new}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(self, new)

    return property(alias, doc=f"Deprecated (0.6; removed in 0.7): ``{new}``'s old name.")
