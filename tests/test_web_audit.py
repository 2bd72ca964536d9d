"""scripts/web_audit.py's choice of the run it reports when a page is audited several times."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import web_audit  # noqa: E402


def run(lcp, tbt, perf):
    return {"lcp_s": lcp, "tbt_ms": tbt, "performance": perf}


def test_the_median_run_is_the_middle_one_not_the_best_or_the_worst():
    runs = [run(2.9, 0, 93), run(2.4, 60, 96), run(2.1, 400, 90)]
    chosen = web_audit.median_run(runs)
    assert (chosen["lcp_s"], chosen["tbt_ms"]) == (2.4, 60)
    assert chosen["perf_range"] == [90, 96] and chosen["runs"] == 3


def test_one_run_is_reported_as_it_is():
    assert web_audit.median_run([run(2.2, 80, 97)]) == {**run(2.2, 80, 97), "perf_range": [97, 97], "runs": 1}


def test_runs_below_one_are_refused(capsys):
    with pytest.raises(SystemExit):
        web_audit.main(["--runs", "0", "--no-baseline", "--pages", "nothing"])
    assert "--runs must be at least 1; got 0" in capsys.readouterr().err


def test_the_machine_line_gives_the_range_and_median_of_the_cpu_benchmark():
    rows = [{"cpu_index": 900}, {"cpu_index": 1400}, {"cpu_index": 1200}, {"cpu_index": 0}]
    assert web_audit.machine_line(rows).endswith(": 900-1400, median 1200")
    assert web_audit.machine_line([{"cpu_index": 0}]) == "Lighthouse reported no CPU benchmark for this machine"
