"""Runs AccaSim (PyPI, an independent HPC simulator) on an SWF trace and
writes its schedule as CSV (job,submit,start,end), for comparison with
`brokk sim`. Prints one JSON line: jobs, seconds (simulation wall time).

AccaSim 1.1.3 predates Python 3.10; its one incompatibility (collections.Mapping)
is bridged here, without touching the package.

Brokk simulates processors only, so the trace's memory fields (SWF fields 7 and
10) are blanked in a copy first. Without that AccaSim would allocate memory too,
and it fails (KeyError: 'mem') on a trace where some jobs record memory and
others do not.
"""
import argparse
import collections
import collections.abc
import json
import os
import shutil
import sys
import tempfile
import time

collections.Mapping = collections.abc.Mapping  # AccaSim imports it from collections

from accasim.base.allocator_class import FirstFit  # noqa: E402
from accasim.base.scheduler_class import EASYBackfilling, FirstInFirstOut  # noqa: E402
from accasim.base.simulator_class import Simulator  # noqa: E402


def without_memory(swf, copy):
    """Writes SWF `swf` to `copy` with every job's memory fields set to -1."""
    with open(swf) as src, open(copy, "w") as dst:
        for line in src:
            fields = line.split()
            if line.startswith(";") or len(fields) < 10:
                dst.write(line)
                continue
            fields[6] = fields[9] = "-1"
            dst.write(" ".join(fields) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--swf", required=True, help="uncompressed SWF trace")
    ap.add_argument("--procs", type=int, required=True)
    ap.add_argument("--policy", choices=["fcfs", "easy"], required=True)
    ap.add_argument("--out", required=True, help="CSV schedule to write")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="accasim-")
    config = os.path.join(work, "system.json")
    with open(config, "w") as f:
        # One single-core node per processor: SWF sizes are processors.
        json.dump({"groups": {"p": {"core": 1}}, "resources": {"p": a.procs},
                   "equivalence": {"processor": {"core": 1}}, "start_time": 0}, f)
    trace = os.path.join(work, "trace.swf")
    without_memory(a.swf, trace)
    allocator = FirstFit()
    dispatcher = FirstInFirstOut(allocator) if a.policy == "fcfs" else EASYBackfilling(allocator)
    schedule = {
        "format": "{job_id};{queue_time};{start_time};{end_time}",
        "attributes": {
            "job_id": ("id", "str"),
            "queue_time": ("queued_time", "int"),
            "start_time": ("start_time", "int"),
            "end_time": ("end_time", "int"),
        },
    }
    sim = Simulator(trace, config, dispatcher, RESULTS_FOLDER_PATH=work, SCHEDULE_OUTPUT=schedule,
                    statistics_output=False, show_statistics=False, LOG_LEVEL="ERROR")
    t0 = time.perf_counter()
    sim.start_simulation()
    seconds = time.perf_counter() - t0
    sched = [n for n in os.listdir(work) if n.startswith("sched")]
    rows = 0
    with open(a.out, "w") as out:
        out.write("job,submit,start,end\n")
        for name in sched:
            with open(os.path.join(work, name)) as f:
                for line in f:
                    parts = line.strip().split(";")
                    if len(parts) == 4:
                        out.write(",".join(parts) + "\n")
                        rows += 1
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"jobs": rows, "seconds": seconds}))


if __name__ == "__main__":
    sys.exit(main())
