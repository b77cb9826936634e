"""Closed loop: apply mechanical ONNX rewrites (and keep only verified gains), emit ATC config files.

``advisor fix model.onnx --apply RULE`` uses :func:`run_fix`; ``advisor fix --atc-config REPORT.json`` uses
:mod:`advisor.fix.atc_config`. Rewrites live one per module in :mod:`advisor.fix.rewrites`.

May import the report (a saved report's findings), the graph readers and every earlier stage; never the CLI.
"""

from __future__ import annotations

from advisor.fix.pipeline import FixOptions, FixRun, StepReport, run_fix
from advisor.fix.rewrites import REWRITES, Rewrite, RewriteResult
from advisor.fix.verify import VerifySettings

__all__ = ["REWRITES", "FixOptions", "FixRun", "Rewrite", "RewriteResult", "StepReport", "VerifySettings", "run_fix"]
