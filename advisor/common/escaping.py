"""One escaping function per output medium: terminal, Markdown, shell, HTML, matplotlib text.

Op names, directory names, file paths and plugin messages come from the input (or a plugin) and reach a
terminal, a pull-request comment, a shell script or a web page. Each medium has its own dangerous characters;
every writer of that medium passes untrusted text through the function below, and nothing else escapes ad hoc.
"""

from __future__ import annotations

import html as _html
import re
import shlex
from collections.abc import Callable, Iterable
from typing import Any

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\u061c]")
"""C0 controls except TAB and LF, DEL, C1 controls (CSI, OSC...), and the bidi overrides that reorder text."""
_CONTROL_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\u061c\u2028\u2029]")
"""What may not stand on one line: the above, LF and TAB, and the Unicode line/paragraph separators (a line break
to ``str.splitlines`` and to editors)."""
_MD_SPECIAL = re.compile(r"([\\*\[\]|~`])|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
"""Markdown syntax escaped with a backslash: emphasis, links and images (``[``), table pipes, strikethrough, a
backtick outside a kept code span (it could pair with the opening backtick of advisor's own code span after it and
let that span's content out), a heading mark at the start. ``_`` between two letters or digits cannot start or end
emphasis (GFM) and is kept, so op names stay readable; ``<``, ``>`` and ``&`` become entities (no raw HTML, no
``<...>`` autolinks)."""
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")
_PLAIN_CODE = re.compile(r"[^<>&|`\[\]\\]+")
"""A code span of the text (a rule's ``advisor fix ... --apply ...``) is kept when its content needs no escape:
code span content is literal, so an escape would show; one that would need it is escaped as text."""


def _visible(m: re.Match[str]) -> str:
    c = ord(m.group(0))
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def controls(text: object) -> str:
    """Control characters made visible (``\x1b``); LF and TAB kept. The part every medium shares."""
    return _CONTROL.sub(_visible, str(text))


def terminal(text: object) -> str:
    """Text safe to print on a terminal: ESC, CSI, OSC and other controls become visible ``\\x1b`` (LF and TAB kept)."""
    return _CONTROL.sub(_visible, str(text))


def has_controls(text: object) -> bool:
    """Whether ``text`` holds a line break, another C0/C1 control or a bidi control: such a value from the input
    is never a CANN version, a tensor name or a path to write into a shell script or a config file."""
    return _CONTROL_LINE.search(str(text)) is not None


def terminal_line(text: object) -> str:
    """:func:`terminal` for one-line messages (errors on stderr): line breaks become visible too."""
    return _CONTROL_LINE.sub(_visible, str(text))


def rich_text(text: object) -> str:
    """Text for a string that ``rich`` parses as markup (table cells given as ``str``): controls made visible and
    ``[...]`` markup escaped."""
    from rich.markup import escape

    return escape(terminal(text))


def markdown(text: object) -> str:
    """Text safe in Markdown prose or a table cell: no raw HTML, no link/image/emphasis syntax, no autolink, no
    pipes, no controls, one line."""
    s = _CONTROL.sub(_visible, str(text)).replace("\r", " ").replace("\n", " ")
    parts: list[str] = []
    pos = 0
    for m in _CODE_SPAN.finditer(s):
        if _PLAIN_CODE.fullmatch(m.group(2)):
            parts += [_markdown_text(s[pos:m.start()], pos == 0), m.group(0)]
            pos = m.end()
    return "".join([*parts, _markdown_text(s[pos:], pos == 0)])


def _markdown_text(s: str, at_start: bool) -> str:
    """:func:`markdown` for text outside code spans (``at_start``: a ``#`` may begin a heading)."""
    s = _html.escape(s, quote=False)
    escaped = _MD_SPECIAL.sub(lambda m: m.group(0)[:-1] + "\\" + m.group(0)[-1], s)
    if at_start:
        escaped = re.sub(r"^(\s*)#", r"\1\\#", escaped)
    # ``\](`` is already inert; escaping the parenthesis too means no ``](`` is left for a less careful renderer
    return _no_autolink(escaped.replace("](", "]\\("))


_AUTOLINK_URL = re.compile(r"(?i)(?<![A-Za-z0-9])(https?|ftp|mailto|xmpp)(:)")
_AUTOLINK_WWW = re.compile(r"(?i)(?<![A-Za-z0-9])(www)(\.)")
_AUTOLINK_EMAIL = re.compile(r"@(?=[A-Za-z0-9])")


def _no_autolink(s: str) -> str:
    """GitHub turns bare ``https://...``, ``www.`` and ``a@b.c`` into links (the autolink extension). A backslash
    before the ``:`` or ``.`` keeps the text as it reads and stops the link; an e-mail address has no escapable
    character, so a word joiner (U+2060, written as an entity, invisible) follows its ``@``."""
    s = _AUTOLINK_URL.sub(r"\1\\\2", s)
    s = _AUTOLINK_WWW.sub(r"\1\\\2", s)
    return _AUTOLINK_EMAIL.sub("@&#8288;", s)


def markdown_code(text: object) -> str:
    """Text inside an inline code span: backticks and pipes (which end the span or the table cell) replaced."""
    s = _CONTROL.sub(_visible, str(text)).replace("\r", " ").replace("\n", " ")
    return s.replace("`", "'").replace("|", "¦")


def markdown_block(text: object) -> str:
    """Text inside a fenced code block: controls made visible; a line of backticks cannot close the fence."""
    s = _CONTROL.sub(_visible, str(text))
    return re.sub(r"^(\s*)```", r"\1'''", s, flags=re.M)


def html(text: object) -> str:
    """Text safe in HTML element content or a quoted attribute."""
    return _html.escape(_CONTROL.sub(_visible, str(text)), quote=True)


_HTML_CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")


def html_code_spans(text: object) -> str:
    """:func:`html`, then each ``code span`` of the text (a recommendation's ``--fusion_switch_file``) as
    ``<code>``: the span's content is already escaped, so the only markup added is the element itself."""
    return _HTML_CODE_SPAN.sub(r"<code>\1</code>", html(text))


def markdown_html(text: object) -> str:
    """Text inside raw HTML of a Markdown document (``<summary>``): HTML-escaped and on one line, since a blank
    line ends the HTML block and whatever follows it is read as Markdown again (links, images)."""
    return html(_CONTROL_LINE.sub(lambda m: " " if m.group(0) in "\r\n" else _visible(m), str(text)))


def shell(arg: object) -> str:
    """One argument of a POSIX shell command line, quoted so that no character is interpreted."""
    return shlex.quote(str(arg))


def shell_command(args: Iterable[object]) -> str:
    """A POSIX shell command line in which every argument is quoted (placeholders such as ``<soc_version>``
    included: unquoted, ``<`` is a redirection)."""
    return " ".join(shell(a) for a in args)


_JSON_RAW = re.compile(r"[\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\u061c\u2028\u2029]")


def json_text(document: str) -> str:
    """A serialized JSON document (``ensure_ascii=False``) with DEL, the C1 controls (``\\x9b`` is CSI on a
    terminal), the bidi controls and the line separators written as ``\\uXXXX`` escapes: json escapes only C0.
    They can only stand inside strings, where the escape is the same character."""
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group(0)):04x}", document)


def matplotlib_text(text: object) -> str:
    """A label for matplotlib charts: controls made visible and ``$`` escaped, so an op name is never parsed as
    mathtext (``$\\frac{a}{$`` raised while drawing). Axis ticks keep their mathtext (``10^{2}``)."""
    return _CONTROL.sub(_visible, str(text)).replace("$", r"\$")


def deep(value: Any, fn: Callable[[str], str]) -> Any:
    """``value`` with ``fn`` applied to every string in it (dict keys included); other values unchanged."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {(fn(k) if isinstance(k, str) else k): deep(v, fn) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [deep(v, fn) for v in value]
    return value
