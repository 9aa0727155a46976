"""The project's cost goals against one run's figures: met or missed, never rounded into a pass.

Reads what benches/run_all.sh collected (the `peers` output, instructions.sh's table,
report.py's criterion tables and the command-line tool's throughput table) and prints a
Markdown table. A figure it cannot find is shown as missing, and the script exits 1 so that
run_all.sh does not write a page with a hole.

Usage: python3 benches/goals.py PEERS.txt INSTRUCTIONS.txt CRITERION.txt CLI_TABLE.txt
"""

import re
import sys

peers, instructions, criterion, cli = (open(p).read() for p in sys.argv[1:5])
missing = []


def ratio(label):
    """A ratio line of `peers`: `- <label>: 1.17x`."""
    m = re.search(r"^- " + re.escape(label) + r": ([\d.]+)x", peers, re.M)
    if not m:
        missing.append(label)
        return None
    return float(m.group(1))


def instructions_of(wiring, column):
    """A cell of instructions.sh's table (column 1 root, 2 child)."""
    m = re.search(r"^\| " + re.escape(wiring) + r" \| (\d+)[^|]*\| (\d+)", instructions, re.M)
    if not m:
        missing.append(f"instructions of {wiring}")
        return None
    return int(m.group(column))


UNITS = {"ps": 1e-3, "ns": 1.0, "µs": 1e3, "us": 1e3, "ms": 1e6}


def median_ns(group, case):
    """A criterion median from report.py's table for `group`, in nanoseconds."""
    m = re.search(r"^`" + re.escape(group) + r"`\n(.*?)(?=^`|\Z)", criterion, re.M | re.S)
    row = m and re.search(r"^\| " + re.escape(case) + r" \| ([\d.]+) (ps|ns|µs|us|ms) \|",
                          m.group(1), re.M)
    if not row:
        missing.append(f"{group} {case}")
        return None
    return float(row.group(1)) * UNITS[row.group(2)]


CLI_UNITS = {"ms": 1e-3, "s": 1.0, "MiB/s": 1.0, "GiB/s": 1024.0}


def cli_cell(bench, column):
    """A cell of the tool's throughput table (column 1 time in s, 2 throughput in MiB/s)."""
    m = re.search(r"^\| `" + re.escape(bench) + r"` \| ([\d.]+) (ms|s) \| ([\d.]+) (MiB/s|GiB/s) \|",
                  cli, re.M)
    if not m:
        missing.append(f"the tool's {bench}")
        return None
    value, unit = m.group(2 * column - 1), m.group(2 * column)
    return float(value) * CLI_UNITS[unit]


def line(goal, value, limit, shown, at_least=False):
    if value is None:
        print(f"| {goal} | missing | |")
    else:
        met = value >= limit if at_least else value <= limit
        print(f"| {goal} | {shown(value)} | {'met' if met else '**missed**'} |")


x = lambda v: f"{v:.2f}x"
ns = lambda v: f"{v:.1f} ns"
count = lambda v: f"{v:,}"

print("| goal | this run | |")
print("|---|---|---|")
for shape in ("root", "child"):
    line(f"whole process, {shape}: CPU per exported span at most 0.5x tracing-opentelemetry lean's",
         ratio(f"{shape}: lens exported / tracing-opentelemetry lean, process CPU"), 0.5, x)
for protocol in ("http/protobuf", "grpc"):
    for shape in ("root", "child"):
        line(f"real OTLP export ({protocol}), {shape}: process CPU per span at most 0.5x tracing-opentelemetry lean's",
             ratio(f"{protocol} {shape}: lens / tracing-opentelemetry lean, process CPU"), 0.5, x)
# The sampled runs (medians of many samples per wiring), not the one whole-process run, whose
# single figure per wiring moves with a moment's load.
for shape in ("root", "child"):
    line(f"training thread, {shape}: an exported span at most 2x the registry alone (context activation on)",
         ratio(f"{shape}: lens exported / registry alone"), 2.0, x)
line("training thread: at most 2,000 instructions per exported root span",
     instructions_of("lens_exported", 1), 2000, count)
line("a re-entered exported span at most 30 ns", median_ns("span_reentered", "lens_exported"), 30.0, ns)
line("an event in an exported span at most 200 ns", median_ns("event_in_span", "lens_exported"), 200.0, ns)
floor = instructions_of("no_subscriber", 1)
for wiring, what in (("lens_non_exporting_rank", "a non-exporting rank"),
                     ("lens_disabled_group", "a span of a disabled group")):
    v = instructions_of(wiring, 1)
    # A disabled callsite: the no-subscriber floor plus at most the level check and the cached
    # interest (a few instructions), never a span.
    line(f"{what} costs a disabled callsite (the no-subscriber floor is {floor} instructions, a "
         "disabled callsite's level check and cached interest add under 10)",
         v, (floor or 0) + 10, count)

mib = lambda v: f"{v:.0f} MiB/s"
for command in ("straggler", "summary"):
    line(f"`nemo-lens {command}`, one thread, 8 ranks of console JSONL: at least 400 MiB/s",
         cli_cell(f"cli/{command}_plain", 2), 400.0, mib, at_least=True)
    line(f"`nemo-lens {command}`, one thread, 64 rank dumps: at least 400 MiB/s",
         cli_cell(f"cli_64_files/{command}_jobs1", 2), 400.0, mib, at_least=True)
    one, two = cli_cell(f"cli_64_files/{command}_jobs1", 1), cli_cell(f"cli_64_files/{command}_jobs2", 1)
    line(f"`nemo-lens {command}`, 64 rank dumps: two threads at least 1.7x one",
         one / two if one and two else None, 1.7, x, at_least=True)

if missing:
    print("goals.py: not found: " + "; ".join(missing), file=sys.stderr)
    sys.exit(1)
