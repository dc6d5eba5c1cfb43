"""Figures, the static HTML report, and the evaluation's result files and plots.

Data flows from `evaluation` to here, never back: the evaluation computes the
numbers and lays them out in tables (`repinterp.evaluation.protocols`), this package writes
them (``write_results``).
"""

from .explanations import explain_to_files
from .figures import CaseStudy, case_study, contrastive_case_study, save_case_study_figure
from .html import write_report
from .results import write_results

__all__ = [
    "CaseStudy",
    "case_study",
    "contrastive_case_study",
    "explain_to_files",
    "save_case_study_figure",
    "write_report",
    "write_results",
]
