"""The short chaos drill (`python -m tests.chaos --short`, issue 31): every kind of fault it
knows once, at seeded random points, with orders, terminations and top-ups, a 2-node cluster,
a 2-rank job and an endpoint in flight on the platform's real processes; it fails when any
invariant does (tests/chaos/invariants.py)."""

import re
import subprocess
import sys

from tests.chaos.stack import REPO


def test_the_short_chaos_drill_breaks_no_invariant(tmp_path):
    done = subprocess.run(
        [
            *(sys.executable, "-m", "tests.chaos", "--short", "--root", str(tmp_path / "run")),
            *("--pg", str(REPO / "var" / "chaos" / "pg-test")),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    summary = re.search(
        r"(\d+) faults injected, (\d+) invariants checked, (\d+) violations", done.stdout
    )
    assert summary, done.stdout[-3000:] + done.stderr[-3000:]
    faults, checks, violations = (int(n) for n in summary.groups())
    assert done.returncode == 0 and violations == 0, done.stdout[-5000:]
    # every fault of the short version injected, every check run after its round and at the end
    assert (faults, checks) == (10, 18)
    assert "VIOLATION" not in done.stdout
