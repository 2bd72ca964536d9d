"""A stand-in for Nsight Compute's ``ncu`` command line (tests/test_diagnose.py).

Profiling (``... --export REPORT CHILD...``) it runs the child, as ncu would, and writes into
REPORT how many calls the child listed (``$ATTN_EDU_PROFILE_CHILD``); with ``FAKE_NCU_FAIL``
set it fails as ncu does where the GPU's counters cannot be read. Printing (``--import
REPORT --csv --page details|raw``) it prints, for each call, the marker kernel and one kernel
``fake_kernel_<call>`` of duration ``1000 + 10 * call`` microseconds and a half, in the layout
of ncu 2024-2025's CSV: a ``==WARNING==`` line first; the details page's metric rows ending in
a comma, a rule row (no metric name) per kernel and an ``n/a`` value; the raw page's eleven
leading columns, its second row the units, the stall metrics with ``selected`` among them. Like
ncu, it exits with the child's code unless given ``--check-exit-code 0``.
"""
import csv
import json
import os
import subprocess
import sys

args = sys.argv[1:]
LEAD = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size", "Grid Size",
        "Device", "CC"]
if "--import" in args:
    calls = json.load(open(args[args.index("--import") + 1]))["calls"]
    page = args[args.index("--page") + 1]
    out = csv.writer(sys.stdout, quoting=csv.QUOTE_ALL, lineterminator="\n")
    print("==WARNING== a message ncu prints on stdout")
    kernels = [k for c in range(calls) for k in
               (("at::cuda::<unnamed>::spin_kernel(long)", "1.02"), (f"fake_kernel_{c}", f"{1000 + 10 * c}.5"))]
    head = lambda i, name: [str(i), "1234", "python", "127.0.0.1", name, "1", "7", "(128, 1, 1)", "(64, 16, 1)", "0",
                            "9.0"]
    if page == "details":
        out.writerow(LEAD + ["Section Name", "Metric Name", "Metric Unit", "Metric Value", "Rule Name", "Rule Type",
                             "Rule Description", "Estimated Speedup Type", "Estimated Speedup"])
        for i, (name, duration) in enumerate(kernels):
            for section, metric, unit, value in (
                    ("GPU Speed Of Light Throughput", "Duration", "usecond", duration),
                    ("GPU Speed Of Light Throughput", "Compute (SM) Throughput", "%", "61.25"),
                    ("GPU Speed Of Light Throughput", "Memory Throughput", "%", "33.5"),
                    ("Occupancy", "Achieved Occupancy", "%", "12.4"),
                    ("Launch Statistics", "Registers Per Thread", "register/thread", "168"),
                    ("Launch Statistics", "Dynamic Shared Memory Per Block", "Kbyte/block", "98.30"),
                    ("Compute Workload Analysis", "Issue Slots Busy", "%", "n/a")):
                sys.stdout.write(",".join(f'"{x}"' for x in head(i, name) + [section, metric, unit, value]) + ",\n")
            out.writerow(head(i, name) + ["Occupancy", "", "", "", "AchievedOccupancy", "OPT",
                                          "a rule's advice, with a comma, in its text", "local", "12.5"])
    else:
        stall = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
        reasons = {"barrier": "0.5", "long_scoreboard": "2.25", "selected": "1.0", "not_selected": "0.3"}
        out.writerow(LEAD + [stall.format(r) for r in reasons] + ["sm__throughput.avg.pct_of_peak_sustained_elapsed"])
        out.writerow([""] * len(LEAD) + ["inst"] * len(reasons) + ["%"])
        for i, (name, _) in enumerate(kernels):
            out.writerow(head(i, name) + list(reasons.values()) + ["61.25"])
    sys.exit(0)
if os.environ.get("FAKE_NCU_FAIL"):
    print("==ERROR== Failed to initialize the profiler: LibraryNotLoaded", file=sys.stderr)
    sys.exit(1)
at = args.index("--export")
report, child = args[at + 1], args[at + 2:]
done = subprocess.run(child)
calls = len(json.load(open(os.environ["ATTN_EDU_PROFILE_CHILD"])))
json.dump({"calls": calls}, open(report, "w"))
checked = args[args.index("--check-exit-code") + 1] != "0" if "--check-exit-code" in args else True
sys.exit(done.returncode if checked else 0)
