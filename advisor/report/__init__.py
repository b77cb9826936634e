"""Reports: render the report dict (see ``advisor/schemas/report.schema.json``) in one format each.

Renderers read the report dict only, never profiles or findings objects, so a saved JSON report can be
re-rendered (``advisor compare`` and ``advisor fix --atc-config`` read it too).

May import the pipeline (types of what it renders) and every earlier stage; never ``compare``, ``fix`` or the
CLI.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

# format name -> "module:function" rendering a report dict to text
RENDERERS: dict[str, str] = {
    "json": "advisor.report.json_report:render",
    "terminal": "advisor.report.terminal:render_text",
    "markdown": "advisor.report.markdown:render",
    "html": "advisor.report.html:render",
    "junit": "advisor.report.junit:render",
}
EXTENSIONS = {"json": "json", "terminal": "txt", "markdown": "md", "html": "html", "junit": "xml"}


def renderer(fmt: str) -> Callable[..., str]:
    module, func = RENDERERS[fmt].split(":")
    return getattr(importlib.import_module(module), func)


def render(report: dict[str, Any], fmt: str, **options: Any) -> str:
    return renderer(fmt)(report, **options)
