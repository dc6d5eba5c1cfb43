"""Fixtures shared by the test modules; `browser` is headless Chromium (Debian's ``chromium``,
driven by Playwright) for the tests that look at a page as a person would: without it they say
so and skip, except under ``CI=true`` where they fail."""

import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from threadpoolctl import threadpool_limits


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """Tiny models: one thread (torch, BLAS, OpenMP) is faster, and immune to a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with threadpool_limits(1):
        yield
    torch.set_num_threads(threads)


CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _unavailable(reason: str) -> None:
    message = f"BROWSER TESTS NOT RUN: {reason}; `make browser` installs Chromium"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message} (CI=true requires them)")
    warnings.warn(message, stacklevel=2)
    pytest.skip(message)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError as exc:
        _unavailable(f"the playwright package is missing ({exc})")
    if not CHROMIUM.exists():
        _unavailable(f"{CHROMIUM} is missing")
    with sync_playwright() as playwright:
        try:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        except Error as exc:
            _unavailable(f"{CHROMIUM} does not start: {exc.message.splitlines()[0]}")
        yield chromium
        chromium.close()


@pytest.fixture
def strategy_searches(monkeypatch) -> list[int]:
    """A list that grows by one at each search of a model's strategies
    (`repinterp.strategies.model.model_strategies`), for tests that they are found once."""
    import repinterp.strategies.model as strategies_module

    calls: list[int] = []
    found = strategies_module.model_strategies

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return found(*args, **kwargs)

    monkeypatch.setattr(strategies_module, "model_strategies", counted)
    return calls
