"""Copies the whole-process figures of docs/performance.md into README's cost table.

README gives the headline figures of the same run as docs/performance.md: for each exporting
wiring and the registry it sits on, the training thread's time and the whole process's CPU time
per span, root and child, with the discarding exporter; then lens and lean tracing-opentelemetry
really exporting OTLP to a loopback collector (HTTP/protobuf, gRPC). The rows are taken from the
page's whole-process and real-export tables, so the two never disagree. Exits 1 when the page
has no such table or README no markers.

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

# Rows of the real-export table, and how README names them.
REAL_ROWS = {
    "**lens**, HTTP/protobuf": "**lens**, real OTLP export, HTTP/protobuf",
    "tracing-opentelemetry, lean, HTTP/protobuf": "tracing-opentelemetry, lean, real OTLP export, HTTP/protobuf",
    "**lens**, gRPC": "**lens**, real OTLP export, gRPC",
    "tracing-opentelemetry, lean, gRPC": "tracing-opentelemetry, lean, real OTLP export, gRPC",
}

page = open(page_path, encoding="utf-8").read()


def table_rows(heading):
    """The rows of the table after the paragraph starting with `heading`, by first cell."""
    m = re.search(r"^" + heading + r".*?\n\n((?:\|.*\n)+)", page, re.M)
    if not m:
        sys.exit(f"readme_cost: no '{heading}' table in {page_path}")
    rows = {}
    for line in m.group(1).splitlines()[2:]:
        parts = [c.strip() for c in line.strip("|").split("|")]
        rows[parts[0]] = parts[1:3]
    return rows


cells = table_rows("Whole process,")
real = table_rows("Real OTLP export")
missing = [r for r in ROWS if r not in cells] + [r for r in REAL_ROWS if r not in real]
if missing:
    sys.exit(f"readme_cost: {page_path} has no row for {', '.join(missing)}")


def wall_cpu(cell):
    """`process CPU / training thread / flush` as README's `training thread / process CPU`."""
    parts = [p.strip() for p in cell.split("/")]
    if len(parts) != 3:
        sys.exit(f"readme_cost: unexpected real-export cell '{cell}'")
    return f"{parts[1]} / {parts[0]}"


table = [
    BEGIN,
    "| wiring | root span: training thread (wall) / whole process CPU"
    " | child span: training thread (wall) / whole process CPU |",
    "|---|---|---|",
]
table += [f"| {r} | {cells[r][0]} | {cells[r][1]} |" for r in ROWS]
table += [
    f"| {name} | {wall_cpu(real[r][0])} | {wall_cpu(real[r][1])} |"
    for r, name in REAL_ROWS.items()
]
table.append(END)

readme = open(readme_path, encoding="utf-8").read()
start, end = readme.find(BEGIN), readme.find(END)
if start < 0 or end < start:
    sys.exit(f"readme_cost: {readme_path} has no cost table markers")
readme = readme[:start] + "\n".join(table) + readme[end + len(END):]
open(readme_path, "w", encoding="utf-8").write(readme)
