"""Progress bars that cost nothing when off: `progress_bar`."""

from __future__ import annotations

from typing import Any

__all__ = ["progress_bar"]


def progress_bar(*args: Any, enabled: bool = True, **kwargs: Any) -> Any:
    """A tqdm bar (``tqdm(*args, **kwargs)``): tqdm.auto's, a notebook widget where one runs,
    when ``enabled``; else a disabled plain tqdm. tqdm.auto is imported only for a bar that is
    shown: its import alone warns ``IProgress not found`` in a notebook without ipywidgets."""
    if not enabled:
        from tqdm.std import tqdm

        return tqdm(*args, disable=True, **kwargs)
    from tqdm.auto import tqdm

    return tqdm(*args, **kwargs)
