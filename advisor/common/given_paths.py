"""Paths as the user gave them, whatever the executor.

Workers of an existing Dask cluster do not share this process's working directory, so a rank is sent to them by
its resolved absolute path. What they read is then named by that path; this module puts the user's spelling back
(``../shared/run`` stays ``../shared/run`` even when ``../shared`` is a symlink), so a report is the same on every
executor.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from typing import Any


class PathSpelling:
    """Rewrites paths below ``sent`` (the root a worker was given) to the same paths below ``given`` (the root as
    the user spelled it)."""

    def __init__(self, sent: str, given: str) -> None:
        self.sent = sent.rstrip(os.sep) or os.sep
        self.given = given.rstrip(os.sep) or os.sep
        # the root itself, or the root followed by a separator: never a longer sibling name (``run`` vs ``run2``)
        self._inside = re.compile(re.escape(self.sent) + r"(?=$|" + re.escape(os.sep) + r"|[\s:;,'\")\]])")

    def path(self, text: str) -> str:
        """``text`` (one path) below ``given`` when it is ``sent`` or below it, else unchanged."""
        if text == self.sent:
            return self.given
        if text.startswith(self.sent + os.sep):
            return self.given + text[len(self.sent):]
        return text

    def text(self, text: str) -> str:
        """Every occurrence of ``sent`` as a path in a message (``reading /abs/run/x.csv: bad``) rewritten."""
        if self.sent == self.given or self.sent not in text:
            return text
        return self._inside.sub(lambda _m: self.given, text)

    def meta(self, meta: Any) -> None:
        """Rewrite in place the paths a rank's :class:`advisor.model.Meta` records."""
        meta.source = self.path(meta.source)
        meta.files_read = [self.path(f) for f in meta.files_read]
        meta.files_skipped = [replace(s, path=self.path(s.path), reason=self.text(s.reason))
                              for s in meta.files_skipped]
        meta.notes = [self.text(n) for n in meta.notes]


def as_given(outcome: Any, spelling: PathSpelling) -> Any:
    """An :class:`advisor.pipeline.executor.Outcome` of a rank job with its paths as the user gave them: the rank's
    ``summary.meta`` rewritten in place, a failure's path and reason rewritten."""
    if outcome.result is not None:
        spelling.meta(outcome.result.summary.meta)
    if outcome.failure is not None:
        failure = outcome.failure
        outcome = replace(outcome, failure=replace(failure, path=spelling.path(failure.path),
                                                   reason=spelling.text(failure.reason)))
    return outcome
