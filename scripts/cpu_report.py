"""Sum a ``SLUICE_CPU_REPORT`` file (tests/conftest.py) by test file: wall and CPU seconds, the heaviest first.

    python scripts/cpu_report.py FILE [--tests N]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("file")
    p.add_argument("--tests", type=int, default=25, help="also list the N heaviest tests")
    p.add_argument("--files", type=int, default=40, help="list the N heaviest files")
    a = p.parse_args()
    rows = [json.loads(line) for line in open(a.file) if line.strip()]
    by_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0])
    for r in rows:
        f = by_file[r["test"].split("::")[0]]
        f[0] += r["wall"]
        f[1] += r["self"]
        f[2] += r["children"]
        f[3] += 1
    total = [sum(r[k] for r in rows) for k in ("wall", "self", "children")]
    print(f"{len(rows)} tests: wall {total[0]:.0f} s, CPU {total[1]:.0f} s in pytest + {total[2]:.0f} s in children")
    print(f"{'file':<64} {'tests':>5} {'wall':>7} {'cpu':>7} {'child':>7}")
    for name, (wall, cpu, child, n) in sorted(by_file.items(), key=lambda kv: -(kv[1][1] + kv[1][2]))[:a.files]:
        print(f"{name:<64} {int(n):>5} {wall:>7.1f} {cpu:>7.1f} {child:>7.1f}")
    print()
    for r in sorted(rows, key=lambda r: -(r["self"] + r["children"]))[:a.tests]:
        print(f"{r['test'][:100]:<100} wall {r['wall']:>6.1f} cpu {r['self']:>6.1f} child {r['children']:>6.1f}")


if __name__ == "__main__":
    main()
