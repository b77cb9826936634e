"""What produced a report: advisor's version, the plugin API and every knowledge base with its version and origin.

Two reports are comparable when the same knowledge bases (same versions) judged both runs; ``advisor compare``
says when they were not, because a score or a finding can then move without the model changing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache
from importlib import metadata
from typing import Any

CORE_DISTRIBUTION = "ascend-advisor"
"""The distribution advisor itself ships in: its knowledge bases are ``core``, any other one's are ``plugin``."""


@cache
def distribution_version(name: str) -> str:
    """The installed version of distribution ``name`` ("" when it is not installed, e.g. a test's own plugin)."""
    if not name:
        return ""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return ""


def produced_by(advisor_version: str, api_version: str, knowledge_bases: Iterable[Mapping[str, Any]]
                ) -> dict[str, Any]:
    """The report's ``produced_by``: ``knowledge_bases`` are the report's ``knowledge_bases`` entries (``id``,
    ``version``, ``package``), whatever their status: a failed or skipped one was still part of the analysis."""
    kbs = []
    for kb in sorted(knowledge_bases, key=lambda k: str(k["id"])):
        package = str(kb.get("package") or "")
        source = "core" if package in ("", CORE_DISTRIBUTION) else "plugin"
        entry = {"name": str(kb["id"]), "version": str(kb.get("version") or ""), "source": source}
        if source == "plugin":
            entry.update({"package": package, "package_version": distribution_version(package)})
        kbs.append(entry)
    return {"advisor": advisor_version, "plugin_api": api_version, "knowledge_bases": kbs}


def of_report(report: Mapping[str, Any]) -> dict[str, Any]:
    """A report's ``produced_by``; reports saved before the key existed give what their ``tool`` and
    ``knowledge_bases`` say."""
    if isinstance(report.get("produced_by"), Mapping):
        return dict(report["produced_by"])
    tool = report.get("tool") or {}
    return produced_by(str(tool.get("version") or ""), str(tool.get("api_version") or ""),
                       [k for k in report.get("knowledge_bases") or [] if isinstance(k, Mapping) and "id" in k])


def differences(base: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """One line per way the producers of two reports differ (plugin API, knowledge bases present, their
    versions); empty when the same knowledge bases judged both. advisor's own version is compared elsewhere."""
    pb, pn = of_report(base), of_report(new)
    out = []
    if pb.get("plugin_api") and pn.get("plugin_api") and pb["plugin_api"] != pn["plugin_api"]:
        out.append(f"plugin API differs ({pb['plugin_api']} vs {pn['plugin_api']})")
    kb_base = {k["name"]: k for k in pb.get("knowledge_bases", [])}
    kb_new = {k["name"]: k for k in pn.get("knowledge_bases", [])}
    only_base, only_new = sorted(set(kb_base) - set(kb_new)), sorted(set(kb_new) - set(kb_base))
    if only_base:
        out.append("knowledge bases only in base: " + ", ".join(only_base))
    if only_new:
        out.append("knowledge bases only in new: " + ", ".join(only_new))
    changed = [f"{name} {kb_base[name].get('version') or '?'} -> {kb_new[name].get('version') or '?'}"
               for name in sorted(set(kb_base) & set(kb_new))
               if kb_base[name].get("version") != kb_new[name].get("version")]
    if changed:
        out.append("knowledge base versions differ: " + ", ".join(changed))
    return out
