"""A stand-in for Nsight Compute's ``ncu`` command line (tests/test_diagnose.py).

Profiling (``... --export REPORT CHILD...``) it runs the child, as ncu would, and writes into
REPORT how many calls the child listed (``$ATTN_EDU_PROFILE_CHILD``); with ``FAKE_NCU_FAIL``
set it fails as ncu does where the GPU's counters cannot be read. Printing (``--import
REPORT --csv --page details|raw``) it prints, for each call, the marker kernel and one kernel
``fake_kernel_<call>`` of duration ``1,000 + 10 * call`` microseconds and a half, in the layout
of ncu's CSV (a ``==PROF==`` line first; the raw page's second row gives units).
"""
import csv
import json
import os
import subprocess
import sys

args = sys.argv[1:]
if "--import" in args:
    calls = json.load(open(args[args.index("--import") + 1]))["calls"]
    page = args[args.index("--page") + 1]
    out = csv.writer(sys.stdout, quoting=csv.QUOTE_ALL, lineterminator="\n")
    print("==PROF== Disconnected from process 1234")
    kernels = [k for c in range(calls) for k in
               (("at::cuda::<unnamed>::spin_kernel(long)", "1.02"), (f"fake_kernel_{c}", f"{1000 + 10 * c:,}.5"))]
    if page == "details":
        out.writerow(["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
                      "Block Size", "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit",
                      "Metric Value"])
        for i, (name, duration) in enumerate(kernels):
            head = [str(i), "1234", "python", "127.0.0.1", name, "1", "7", "(128, 1, 1)", "(64, 16, 1)", "0", "9.0"]
            for section, metric, unit, value in (
                    ("GPU Speed Of Light Throughput", "Duration", "usecond", duration),
                    ("GPU Speed Of Light Throughput", "Compute (SM) Throughput", "%", "61.25"),
                    ("GPU Speed Of Light Throughput", "Memory Throughput", "%", "33.5"),
                    ("Occupancy", "Achieved Occupancy", "%", "12.4"),
                    ("Launch Statistics", "Registers Per Thread", "register/thread", "168"),
                    ("Launch Statistics", "Dynamic Shared Memory Per Block", "Kbyte/block", "98.30")):
                out.writerow(head + [section, metric, unit, value])
    else:
        stall = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
        out.writerow(["ID", "Kernel Name", stall.format("barrier"), stall.format("long_scoreboard"),
                      stall.format("not_issued"), "sm__throughput.avg.pct_of_peak_sustained_elapsed"])
        out.writerow(["", "", "inst", "inst", "inst", "%"])
        for i, (name, _) in enumerate(kernels):
            out.writerow([str(i), name, "0.5", "2.25", "9.0", "61.25"])
    sys.exit(0)
if os.environ.get("FAKE_NCU_FAIL"):
    print("==ERROR== Failed to initialize the profiler: LibraryNotLoaded", file=sys.stderr)
    sys.exit(1)
at = args.index("--export")
report, child = args[at + 1], args[at + 2:]
done = subprocess.run(child)
calls = len(json.load(open(os.environ["ATTN_EDU_PROFILE_CHILD"])))
json.dump({"calls": calls}, open(report, "w"))
sys.exit(done.returncode)
