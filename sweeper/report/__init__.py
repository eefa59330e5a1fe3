"""The HTML report of a sweep: pure report data (data.py), charts drawn from it (charts.py),
one self-contained page (page.py), the cross-night index (index.py); `python -m sweeper.report`.
Reads the store (sweeper.store), never the sweep; imports no torch."""

from __future__ import annotations

from .contents import ReportData
from .data import build_report_data
from .page import write_report

__all__ = ["ReportData", "build_report_data", "write_report"]
