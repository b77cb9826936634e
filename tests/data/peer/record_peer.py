"""Record the peer's findings on one profile as test data for tests/test_peer_parity.py.

Runs msprof-analyze ``advisor all`` twice on PROFILE (``--agent`` for the finding list as JSON, then without it
for the xlsx holding the detail rows), and writes NAME.json here: each finding's title, description, suggestion
and the first rows of its detail sheet, trimmed. Not run by the tests (the peer is not a test dependency).

    python tests/data/peer/record_peer.py PROFILE_DIR NAME [--sample PATH_RELATIVE_TO_SAMPLES]

The peer comes from ``$PEER_VENV`` (default ``/tmp/venv-msprof-analyze``, see ../shared/bench/peer_msprof_analyze.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path
from typing import Any

NS = {"m": "http://schemas.openxmlformats.org/spreadsheetml/2006/main",
      "r": "http://schemas.openxmlformats.org/officeDocument/2006/relationships"}
HERE = Path(__file__).resolve().parent


def read_xlsx(path: Path) -> dict[str, list[list[Any]]]:
    """Every sheet of an xlsx written by xlsxwriter, as rows of cell values (no openpyxl needed)."""
    z = zipfile.ZipFile(path)
    shared: list[str] = []
    if "xl/sharedStrings.xml" in z.namelist():
        for si in ET.fromstring(z.read("xl/sharedStrings.xml")).findall("m:si", NS):
            shared.append("".join(t.text or "" for t in si.iter(f"{{{NS['m']}}}t")))
    book = ET.fromstring(z.read("xl/workbook.xml"))
    rels = {r.get("Id"): r.get("Target") for r in ET.fromstring(z.read("xl/_rels/workbook.xml.rels"))}
    out: dict[str, list[list[Any]]] = {}
    for sheet in book.find("m:sheets", NS) or []:
        xml = ET.fromstring(z.read("xl/" + str(rels[sheet.get(f"{{{NS['r']}}}id")])))
        rows = []
        for row in xml.iter(f"{{{NS['m']}}}row"):
            cells: dict[int, Any] = {}
            for c in row.findall("m:c", NS):
                col = 0
                for ch in re.match(r"[A-Z]+", str(c.get("r"))).group():  # type: ignore[union-attr]
                    col = col * 26 + ord(ch) - 64
                v = c.find("m:v", NS)
                if v is None:
                    value: Any = None
                elif c.get("t") == "s":
                    value = shared[int(v.text or 0)]
                else:
                    try:
                        value = float(v.text or "")
                    except ValueError:
                        value = v.text
                cells[col - 1] = value
            if cells:
                rows.append([cells.get(i) for i in range(max(cells) + 1)])
        out[str(sheet.get("name"))] = rows
    return out


def trim(value: Any, n: int = 160) -> Any:
    if isinstance(value, str):
        value = value.replace("_x000D_", "").replace("\r", "")
        return value if len(value) <= n else value[:n] + "..."
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def detail_rows(title: str, sheets: dict[str, list[list[Any]]]) -> dict[str, Any] | None:
    sheet = sheets.get(title[:31])  # xlsx sheet names are cut at 31 characters
    if sheet is None and title == "Fusible Operator Analysis":
        found = next((v for k, v in sheets.items() if k.startswith("OPERATOR SEQUENCE")), None)
        sheet = [found[0], *found[2:]] if found else None  # its second row explains the columns
    if not sheet:
        return None
    rows = sheet[1:]
    if sheet[0] == ["Type", "Description"]:  # AI Core performance: one cell per class, one line per op
        rows = [[r[0], trim(line.strip(), 300)] for r in rows for line in str(r[1]).split("\n")[:8] if line.strip()]
    return {"columns": sheet[0], "rows": [[trim(c) for c in r] for r in rows[:8]], "total_rows": len(rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile", type=Path)
    ap.add_argument("name")
    ap.add_argument("--sample", help="path of the profile relative to ../shared/samples")
    args = ap.parse_args()
    exe = Path(os.environ.get("PEER_VENV", "/tmp/venv-msprof-analyze")) / "bin" / "msprof-analyze"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        base = [str(exe), "advisor", "all", "-d", str(args.profile), "-l", "en", "--force"]
        agent = subprocess.run([*base, "-o", str(out / "agent"), "--agent"], capture_output=True, text=True,
                               cwd=tmp, check=False)
        t = time.perf_counter()
        full = subprocess.run([*base, "-o", str(out / "full")], capture_output=True, text=True, cwd=tmp, check=False)
        wall = time.perf_counter() - t
        report = json.loads(agent.stdout)
        xlsx = sorted((out / "full").rglob("*.xlsx"))
        sheets = read_xlsx(xlsx[0]) if xlsx else {}
    findings = []
    for row in report["message"]["problems"]["data"]:
        item: dict[str, Any] = {"title": row[0], "description": trim(row[1], 300), "suggestion": trim(row[2], 200)}
        detail = detail_rows(row[0], sheets)
        if detail:
            item["detail"] = detail
        findings.append(item)
    data = {"peer": "msprof-analyze 26.2.0 (PyPI)",
            "command": "msprof-analyze advisor all -d <profile dir> -o <out> -l en --force (findings: --agent JSON; "
                       "detail rows: the xlsx written without --agent)",
            "sample": args.sample or str(args.profile), "exit_code": full.returncode, "wall_s": round(wall, 2),
            "findings": findings}
    target = HERE / f"{args.name}.json"
    target.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{target}: {len(findings)} findings", file=sys.stderr)


if __name__ == "__main__":
    main()
