"""Figures, the static HTML report, and the evaluation's tables and plots.

Data flows from `evaluation` to here, never back: the evaluation computes the
numbers, this package writes them (``write_results``).
"""

from .figures import CaseStudy, case_study, contrastive_case_study, save_case_study_figure
from .html import write_report
from .tables import results_markdown, write_results

__all__ = [
    "CaseStudy",
    "case_study",
    "contrastive_case_study",
    "results_markdown",
    "save_case_study_figure",
    "write_report",
    "write_results",
]
