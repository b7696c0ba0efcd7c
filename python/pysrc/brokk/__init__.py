"""Brokk's simulator from Python.

Run an experiment file (the TOML files `brokk sim` reads) or an experiment
built as a dict with the same keys, and get its results as pandas
DataFrames::

    import brokk
    r = brokk.run("examples/experiments/kth-sp2.toml")
    r.points[["policy", "mean_wait", "mean_bounded_slowdown"]]
    r.jobs.groupby("policy").wait.describe()

Simulations run in Rust, in parallel, without holding the interpreter.

A queue order can be written in Python and named in the experiment's
policies after `+`, as the built-in ones are::

    def narrowest(job, now):          # lower goes first
        return job.size
    r = brokk.run(exp, orders={"narrow": narrowest})   # policies = ["easy+narrow"]

A grid routing policy can be written in Python too and named in the
experiment's `routings` beside the built-in rules; it reads what every
site publishes when a job arrives and returns the chosen site's position
(or None to leave the job unrouted)::

    def most_free(job, sites, now):
        fits = [k for k, s in enumerate(sites) if s.procs >= job.size]
        return max(fits, key=lambda k: sites[k].free, default=None)
    r = brokk.run(exp, routers={"most-free": most_free})   # routings = ["most-free"]

Each site has `name`, `procs`, `speed`, `free`, `running`, `waiting` and
`estimated_wait` (seconds, or None). A router that keeps state is a class
with a `route(job, sites, now)` method; each simulation gets an instance.

Workflow admission experiments ([VRM] 4.6, the files `brokk sim workflows`
reads) run too, with each scheduler's own time per workflow::

    a = brokk.admission("examples/experiments/workflow-schedulers.toml")
    a.aggregates[["scheduler", "inter_arrival", "rejection_rate_mean"]]
    a.timings.groupby("series").us_per_call.mean()

`job` has `id`, `submit`, `size`, `estimate`, `user`, `queue` and
`partition`; `now` is the simulated second. An order that keeps state (fair
share) is a class: each simulated cluster gets an instance, whose `key(job,
now)` orders and whose optional `started(job, now)` and `ended(job, start,
now)` hear of starts and ends. Each call takes the interpreter's lock, so a
Python order runs far slower than a built-in one (README: its cost per
call).
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

import pandas as pd

from . import _brokk

__all__ = ["Admission", "Results", "admission", "run"]


@dataclass
class Results:
    """What an experiment produced."""

    #: The summary document, as `brokk sim --json` prints it.
    summary: dict
    #: One row per point: policy, load, seed, offered load, counts and the
    #: overall figures (means, percentiles, utilization, ...).
    points: pd.DataFrame
    #: One row per (policy, load) over its seeds: for each figure its
    #: `_mean`, `_sd` and `_ci95` (half-width of the 95% interval).
    aggregates: pd.DataFrame
    #: One row per job and point (jobs.csv), the recorded schedule as
    #: policy "as-recorded".
    jobs: pd.DataFrame
    #: One row per point and group: `kind` "user" (the user's id in
    #: `group`) or "size" (a size class such as "5-16"), with the group's
    #: figures.
    groups: pd.DataFrame
    #: The trace's own schedule's figures, for a trace workload.
    as_recorded: Optional[dict]
    #: One row per pair of series and load, seed by seed: `policy` minus
    #: `against` (the baseline when the pair holds it), each figure's
    #: `_diff` (mean difference) and `_ci95` (its paired 95% interval).
    comparisons: pd.DataFrame


def _points(summary: dict) -> pd.DataFrame:
    rows = []
    for p in summary["points"]:
        row = {k: v for k, v in p.items() if not isinstance(v, (dict, list))}
        row.update(p["overall"])
        rows.append(row)
    return pd.DataFrame(rows)


def _groups(summary: dict) -> pd.DataFrame:
    rows = []
    for p in summary["points"]:
        for kind in ("user", "size"):
            for g in p[f"by_{kind}"]:
                row = {"policy": p["policy"], "load": p["load"], "seed": p["seed"], "kind": kind}
                row.update(g)
                rows.append(row)
    return pd.DataFrame(rows)


def _aggregates(summary: dict) -> pd.DataFrame:
    rows = []
    for a in summary["aggregates"]:
        row = {"policy": a["policy"], "load": a["load"], "seeds": a["seeds"]}
        for key, s in a["metrics"].items():
            row[f"{key}_mean"] = s["mean"]
            row[f"{key}_sd"] = s["sd"]
            row[f"{key}_ci95"] = s["ci95"]
        rows.append(row)
    return pd.DataFrame(rows)


def _comparisons(summary: dict) -> pd.DataFrame:
    rows = []
    for c in summary.get("comparisons", []):
        row = {"policy": c["policy"], "against": c["against"], "load": c["load"], "seeds": c["seeds"]}
        for key, s in c["difference"].items():
            row[f"{key}_diff"] = s["mean"]
            row[f"{key}_ci95"] = s["ci95"]
        rows.append(row)
    return pd.DataFrame(rows)


def run(
    experiment: Union[str, "os.PathLike[str]", dict],
    *,
    sweep: bool = False,
    threads: Optional[int] = None,
    traces: Optional[str] = None,
    out: Optional[str] = None,
    base: Optional[str] = None,
    orders: Optional[dict[str, Union[Callable[..., float], type]]] = None,
    routers: Optional[dict[str, Union[Callable[..., Optional[int]], type]]] = None,
) -> Results:
    """Runs an experiment.

    `experiment` is a path to an experiment file, or a dict with its keys
    (trace paths relative to `base`, the current directory by default).
    `sweep` runs every load x seed x policy, else each policy's first point.
    `out` also writes the reports and plots `brokk sim` writes. `orders`
    names queue orders and `routers` grid routing policies written in
    Python (see the module's documentation). A mistake in the experiment,
    or an exception an order or a router raised, raises ValueError with
    the place and the reason.
    """
    t = None if traces is None else os.fspath(traces)
    o = None if out is None else os.fspath(out)
    if isinstance(experiment, dict):
        spec = json.dumps(experiment)
        summary, jobs = _brokk.run_spec(spec, os.fspath(base or "."), sweep, threads, t, o, orders, routers)
    else:
        summary, jobs = _brokk.run_file(os.fspath(experiment), sweep, threads, t, o, orders, routers)
    s: dict[str, Any] = json.loads(summary)
    frame = pd.read_csv(io.StringIO(jobs), dtype={"policy": str, "cluster": str, "seed": "Int64"})
    return Results(
        summary=s,
        points=_points(s),
        aggregates=_aggregates(s),
        jobs=frame,
        groups=_groups(s),
        as_recorded=s.get("as_recorded"),
        comparisons=_comparisons(s),
    )


@dataclass
class Admission:
    """What a workflow admission experiment produced."""

    #: The summary document, as `brokk sim workflows --json` prints it.
    summary: dict
    #: One row per run: its setting (scheduler, inter_arrival, hold, ...),
    #: seed and figures (rejection_rate, utilization, probes_per_task, ...).
    points: pd.DataFrame
    #: One row per setting over its seeds: for each figure its `_mean` and
    #: `_ci95` (half-width of the 95% interval).
    aggregates: pd.DataFrame
    #: One row per run: `series` (the scheduler), `at` (inter-arrival),
    #: `seed`, `calls` (workflows), `seconds` and `us_per_call`: wall-clock
    #: time, so unlike everything else it varies from run to run.
    timings: pd.DataFrame


def _flat(d: dict) -> dict:
    return {k: v for k, v in d.items() if not isinstance(v, (dict, list))}


def admission(
    experiment: Union[str, "os.PathLike[str]"],
    *,
    threads: Optional[int] = None,
    out: Optional[str] = None,
) -> Admission:
    """Runs a workflow admission experiment file ([VRM] 4.6).

    `out` also writes what `brokk sim workflows` writes (summary.json,
    timings.csv and the plots). A mistake in the file raises ValueError.
    """
    o = None if out is None else os.fspath(out)
    summary, timings = _brokk.run_admission(os.fspath(experiment), threads, o)
    s: dict[str, Any] = json.loads(summary)
    aggregates = []
    for a in s["aggregates"]:
        row = _flat(a)
        for key, v in a.items():
            if isinstance(v, dict) and "mean" in v:
                row[f"{key}_mean"] = v["mean"]
                row[f"{key}_ci95"] = v["ci95"]
        aggregates.append(row)
    return Admission(
        summary=s,
        points=pd.DataFrame([_flat(p) for p in s["points"]]),
        aggregates=pd.DataFrame(aggregates),
        timings=pd.read_csv(io.StringIO(timings), dtype={"series": str, "at": str}),
    )
