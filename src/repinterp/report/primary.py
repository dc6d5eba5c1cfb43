"""The primary family's table (`evaluation.primary.decide`), as Markdown."""

from __future__ import annotations

from typing import Any

__all__ = ["primary_section", "primary_table"]


def _p(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.2g}" if value < 0.001 else f"{value:.3f}"


def _estimate(row: dict[str, Any]) -> str:
    if row["mean"] is None:
        return "—"
    spread = "" if row["std"] is None else f" ± {row['std']:.2f}"
    interval = row["t_interval"]
    within = "" if interval is None else f" [{interval[0]:+.2f}, {interval[1]:+.2f}]"
    return f"{row['mean']:+.2f}{spread}{within}"


def primary_table(rows: list[dict[str, Any]]) -> list[str]:
    """The family's table: per endpoint the estimate (mean ± SD of the per-model differences
    [95 % t interval]), the pre-registered test's p and its Holm p, the sign-flip p and its
    Holm p (sensitivity), the TOST p at the margin, the verdict and the models measured of
    those pre-registered.

    Args:
        rows: `evaluation.primary.decide`'s.
    """
    lines = [
        "| endpoint | test | estimate ± SD [95% t interval] | p | Holm p | sign-flip p (Holm) "
        "| TOST p | verdict | models |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        test = "t" if row["hypothesis"] == "difference" else f"TOST ±{row['margin']:g}"
        flip = f"{_p(row['p_signflip'])} ({_p(row['p_signflip_holm'])})"
        if row["p_signflip_holm"] is None:
            flip = _p(row["p_signflip"])
        lines.append(
            f"| `{row['dataset']}` {row['a']} − {row['b']}, {row['score']} | {test} | "
            f"{_estimate(row)} | {_p(row['p'])} | {_p(row['p_holm'])} | {flip} | "
            f"{_p(row['p_tost'])} (±{row['margin']:g}) | **{row['verdict']}** | "
            f"{row['runs']} of {row['models']} |"
        )
    return lines


def primary_section(rows: list[dict[str, Any]]) -> list[str]:
    """`primary_table` under a line that says what it is, for a run's ``results.md``."""
    caption = (
        'The pre-registered primary family over all of its runs (docs/results.md, "Primary '
        "family\"); this run's models are some of them:"
    )
    return [caption, "", *primary_table(rows)]
