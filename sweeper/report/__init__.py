"""The HTML report of a sweep: pure report data (data.py), charts drawn from it (charts.py),
one self-contained page (page.py), the cross-night index (index.py); `python -m sweeper.report`."""

from __future__ import annotations

from .data import ReportData, build_report_data, pareto_front
from .page import write_report

__all__ = ["ReportData", "build_report_data", "pareto_front", "write_report"]
