"""Copies the whole-process figures of docs/performance.md into README's cost table.

README gives the headline figures of the same run as docs/performance.md: for each exporting
wiring and the registry it sits on, the training thread's time and the whole process's CPU time
per span, root and child. The rows are taken from the page's whole-process table, so the two
never disagree. Exits 1 when the page has no such table or README no markers.

Usage: python3 benches/readme_cost.py [docs/performance.md] [README.md]
"""

import re
import sys

page_path = sys.argv[1] if len(sys.argv) > 1 else "docs/performance.md"
readme_path = sys.argv[2] if len(sys.argv) > 2 else "README.md"
BEGIN = "<!-- cost table: written by benches/run_all.sh from docs/performance.md -->"
END = "<!-- end of cost table -->"
ROWS = [
    "`tracing_subscriber::registry()` alone",
    "tracing-opentelemetry, default options",
    "tracing-opentelemetry, lean (no inactivity/thread/location/target)",
    "**lens, exported**",
]

page = open(page_path, encoding="utf-8").read()
m = re.search(r"^Whole process,.*?\n\n((?:\|.*\n)+)", page, re.M)
if not m:
    sys.exit(f"readme_cost: no whole-process table in {page_path}")
cells = {}
for line in m.group(1).splitlines()[2:]:
    parts = [c.strip() for c in line.strip("|").split("|")]
    cells[parts[0]] = parts[1:3]
missing = [r for r in ROWS if r not in cells]
if missing:
    sys.exit(f"readme_cost: {page_path} has no row for {', '.join(missing)}")

table = [
    BEGIN,
    "| wiring | root span: training thread (wall) / whole process CPU"
    " | child span: training thread (wall) / whole process CPU |",
    "|---|---|---|",
]
table += [f"| {r} | {cells[r][0]} | {cells[r][1]} |" for r in ROWS]
table.append(END)

readme = open(readme_path, encoding="utf-8").read()
start, end = readme.find(BEGIN), readme.find(END)
if start < 0 or end < start:
    sys.exit(f"readme_cost: {readme_path} has no cost table markers")
readme = readme[:start] + "\n".join(table) + readme[end + len(END):]
open(readme_path, "w", encoding="utf-8").write(readme)
