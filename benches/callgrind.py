"""Reading callgrind outputs, for benches/profile.sh and cli/benches/profile.sh."""

import re
import subprocess


def inclusive(path):
    """{function: inclusive instructions} of a callgrind output (one per thread or process)."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
                          capture_output=True, text=True, check=True).stdout
    costs = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+\S*?:(.+?) \[", line)
        if m:
            costs.setdefault(m.group(2), int(m.group(1).replace(",", "")))
    return costs


def total(path):
    """All instructions of a callgrind output."""
    for line in open(path):
        if line.startswith("totals:"):
            return int(line.split()[1])
    return 0
