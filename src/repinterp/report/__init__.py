"""Figures and the static HTML report."""

from .figures import CaseStudy, case_study, save_case_study_figure
from .html import write_report

__all__ = ["CaseStudy", "case_study", "save_case_study_figure", "write_report"]
