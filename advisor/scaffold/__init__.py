"""``advisor kb new NAME``: write a pip-installable knowledge-base package from the templates beside this module.

The templates (``template/**/*.tmpl``) are plain files with ``string.Template`` placeholders (``$name``,
``$package``...; ``$$`` is a literal ``$``). The generated package is the worked example of docs/plugins.md: one
knowledge base with one rule, its rules file and schema shipped as package data, a README and a pytest test.

May import every stage (it is part of the CLI: ``advisor kb new``).
"""

from __future__ import annotations

import keyword
import re
import string
import sys
from pathlib import Path

from advisor import __version__
from advisor.common.errors import UsageError
from advisor.common.output import write_atomic
from advisor.hookspecs import API_VERSION

TEMPLATE_DIR = Path(__file__).parent / "template"

# template file -> path in the new project ({package}, {name} filled in)
FILES: dict[str, str] = {
    "pyproject.toml.tmpl": "pyproject.toml",
    "README.md.tmpl": "README.md",
    "gitignore.tmpl": ".gitignore",
    "package/__init__.py.tmpl": "src/{package}/__init__.py",
    "package/kb.py.tmpl": "src/{package}/kb.py",
    "package/rules/rules.yaml.tmpl": "src/{package}/rules/{name}.yaml",
    "package/rules/schema/rules.schema.json.tmpl": "src/{package}/rules/schema/{name}.schema.json",
    "tests/test_kb.py.tmpl": "tests/test_{package}.py",
}

NAME_PATTERN = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
_RESERVED = {"advisor", "rules", "knowledge_bases", "tests", "test"}


def normalize_name(name: str) -> str:
    """``My_KB``, ``MyKB``, ``my kb`` -> ``my-kb``: words (split at ``_``, spaces and camelCase humps) joined by
    ``-`` in lower case; the result must be a kebab-case id usable as a package name."""
    words = re.sub(r"([a-z0-9])([A-Z])|([A-Z])([A-Z][a-z])", r"\1\3-\2\4", name.strip())
    norm = re.sub(r"[\s_]+", "-", words).lower()
    if not NAME_PATTERN.match(norm):
        raise UsageError(f"knowledge-base name '{name}' must be kebab-case: lowercase letters and digits separated "
                         "by '-', starting with a letter (e.g. 'my-kb')")
    package = norm.replace("-", "_")
    if keyword.iskeyword(package) or package in _RESERVED or package in sys.stdlib_module_names:
        raise UsageError(f"knowledge-base name '{name}' would give the Python package '{package}', which clashes "
                         "with an existing module; choose another name")
    return norm


def _next_major(version: str) -> str:
    """``0.1.0`` -> ``1``: the first release a plugin written today must not assume compatible."""
    m = re.match(r"\d+", version)
    return str(int(m.group(0)) + 1 if m else 1)


def variables(name: str) -> dict[str, str]:
    """Every placeholder the templates use."""
    package = name.replace("-", "_")
    words = [w for w in name.split("-") if w]
    return {
        "name": name,
        "package": package,
        "dist": name,
        "title": " ".join([words[0].capitalize(), *words[1:]]) if words else name,
        "class_name": "".join(w.capitalize() for w in words) + "KnowledgeBase",
        "rule_id": f"{name}.transpose-time",
        "api_version": API_VERSION,
        "advisor_min": __version__,
        "advisor_max": _next_major(__version__),
    }


def render(template: str, values: dict[str, str]) -> str:
    try:
        return string.Template(template).substitute(values)
    except (KeyError, ValueError) as e:  # a template bug, not a user error
        raise RuntimeError(f"scaffold template error: {e}") from e


def create(name: str, parent: Path) -> Path:
    """Write the project for knowledge base ``name`` into ``parent/<name>`` and return that directory."""
    name = normalize_name(name)
    parent = Path(parent)
    if parent.exists() and not parent.is_dir():
        raise UsageError(f"--dir {parent} is not a directory")
    target = parent / name
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UsageError(f"{target} already exists and is not empty")
    values = variables(name)
    rendered = {dest.format(**values): render((TEMPLATE_DIR / src).read_text(encoding="utf-8"), values)
                for src, dest in FILES.items()}
    for rel, text in rendered.items():
        write_atomic(target / rel, text)
    return target
