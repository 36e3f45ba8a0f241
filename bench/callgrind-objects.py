#!/usr/bin/env python3
"""Self cost (Ir) per object file of a callgrind output: how many of a run's instructions were
executed inside gatewayd itself, libcrypto, libc, libswiftCore, …

    callgrind-objects.py callgrind.out.N [--json]

Reads the format's name compression (`ob=(3) /path` then `ob=(3)`) and skips the inclusive cost
line that follows each `calls=` line, so every instruction is counted once, in the object that
executed it. The totals add up to the file's `summary:` line.
"""
import json
import re
import sys
from collections import defaultdict


def main() -> int:
    path = sys.argv[1]
    names = {}
    current = "???"
    skip_next = False
    per = defaultdict(int)
    summary = None
    comp = re.compile(r"^\((\d+)\)(?: (.*))?$")
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("ob="):
                m = comp.match(line[3:].strip())
                if m:
                    if m.group(2) is not None:
                        names[m.group(1)] = m.group(2)
                    current = names.get(m.group(1), "???")
                else:
                    current = line[3:].strip()
                continue
            if line.startswith("cob="):
                m = comp.match(line[4:].strip())
                if m and m.group(2) is not None:
                    names[m.group(1)] = m.group(2)
                continue
            if line.startswith("calls="):
                skip_next = True
                continue
            if line.startswith(("summary:", "totals:")) and summary is None:
                summary = int(line.split()[1])
                continue
            c = line[:1]
            if c.isdigit() or c in "+-*":
                if skip_next:
                    skip_next = False
                    continue
                parts = line.split()
                if len(parts) >= 2:
                    per[current] += int(parts[1])
    short = defaultdict(int)
    for name, ir in per.items():
        base = name.rsplit("/", 1)[-1]
        short[re.sub(r"\.so(\.[0-9.]+)?$", "", base)] += ir
    if "--json" in sys.argv:
        print(json.dumps({"summary": summary, "objects": dict(short)}))
    else:
        for name, ir in sorted(short.items(), key=lambda kv: -kv[1]):
            print(f"{ir:>16,} {name}")
        print(f"{sum(short.values()):>16,} total (summary {summary:,})" if summary else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
