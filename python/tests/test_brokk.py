"""The Python package drives the simulator and returns what `brokk sim`
reports, as DataFrames."""

import json
from pathlib import Path

import pytest

import brokk

ROOT = Path(__file__).resolve().parents[2]
KTH = ROOT / "examples" / "experiments" / "kth-sp2.toml"

# A week of the Lublin-Feitelson model on 64 processors, two seeds, two loads.
SWEEP = {
    "name": "py-sweep",
    "policies": ["fcfs", "easy+sjf"],
    "workload": {"lublin": {"days": 7}, "estimates": "exact"},
    "platform": {"clusters": [{"name": "m64", "procs": 64}]},
    "metrics": {"horizon": "steady-state"},
    "sweep": {"loads": [0.6, 0.8], "seeds": [1, 2]},
}


def test_an_experiment_file_gives_points_jobs_and_the_recorded_baseline(tmp_path):
    r = brokk.run(KTH, out=tmp_path)
    assert list(r.points.policy) == ["fcfs", "easy", "conservative"]
    wait = r.points.set_index("policy").mean_wait
    assert wait["easy"] * 10 < wait["fcfs"]
    # The trace's own schedule: KTH-SP2's users waited 15,348 s on average.
    assert round(r.as_recorded["mean_wait"]) == 15348
    # Every job of every policy, and the recorded schedule, in jobs.csv.
    assert r.jobs.groupby("policy").size().to_dict() == {
        "as-recorded": 27992,
        "conservative": 27992,
        "easy": 27992,
        "fcfs": 27992,
    }
    easy = r.jobs[r.jobs.policy == "easy"]
    assert easy.wait.mean() == pytest.approx(wait["easy"])
    assert (tmp_path / "wait-cdf.svg").exists()
    # Per user and per size class, every job once per policy.
    g = r.groups[r.groups.policy == "easy"]
    assert g[g.kind == "user"].finished.sum() == 27992
    assert g[g.kind == "size"].finished.sum() == 27992
    assert "1" in set(g[g.kind == "size"].group)


def test_an_experiment_built_in_python_sweeps_with_confidence_intervals():
    r = brokk.run(SWEEP, sweep=True, threads=2)
    assert len(r.points) == 2 * 2 * 2
    a = r.aggregates.set_index(["policy", "load"])
    assert set(a.seeds) == {2}
    # Mean over the two seeds, and its interval from Student's t (12.706 for
    # one degree of freedom) by hand.
    for (policy, load), row in a.iterrows():
        waits = r.points[(r.points.policy == policy) & (r.points.load == load)].mean_wait
        assert row.mean_wait_mean == pytest.approx(waits.mean())
        assert row.mean_wait_ci95 == pytest.approx(12.706205 * waits.std() / 2**0.5, rel=1e-5)
    # Deterministic: the same experiment gives the same jobs.
    again = brokk.run(SWEEP, sweep=True, threads=1)
    assert again.jobs.equals(r.jobs)


def test_a_mistake_is_a_value_error_with_its_reason():
    bad = dict(SWEEP, policies=["easy+nope"])
    with pytest.raises(ValueError, match="unknown queue order"):
        brokk.run(bad)
    with pytest.raises(ValueError, match="line 2"):
        path = Path(__file__).with_name("broken.toml")
        path.write_text('name = "x"\npolicies = 3\n')
        try:
            brokk.run(path)
        finally:
            path.unlink()
    with pytest.raises(ValueError, match="experiment"):
        brokk.run(dict(SWEEP, workload={"lubln": {}}))
    json.dumps(SWEEP)  # the dict itself is left as it was


def test_a_sweep_compares_every_series_with_the_baseline_seed_by_seed():
    r = brokk.run(SWEEP, sweep=True, threads=2)
    c = r.comparisons.set_index("load")
    assert set(c.policy) == {"easy+sjf"} and set(c.against) == {"fcfs"}
    for load, row in c.iterrows():
        p = r.points[r.points.load == load].set_index(["policy", "seed"]).mean_wait
        by_hand = sum(p["easy+sjf", s] - p["fcfs", s] for s in (1, 2)) / 2
        assert row.mean_wait_diff == pytest.approx(by_hand)


# KTH-SP2 under EASY, the trace's requested times as estimates.
KTH_EASY = {
    "name": "kth-orders",
    "workload": {"swf": str(ROOT / "data" / "traces" / "KTH-SP2-1996-2.1-cln.swf.gz")},
    "platform": {"clusters": [{"name": "kth", "procs": 100}]},
}


def test_a_queue_order_written_in_python_schedules_as_the_same_order_in_rust():
    import time

    calls = 0

    def shortest(job, now):
        nonlocal calls
        calls += 1
        return job.estimate

    t0 = time.perf_counter()
    rust = brokk.run(dict(KTH_EASY, policies=["easy+sjf"]), threads=1)
    t1 = time.perf_counter()
    py = brokk.run(dict(KTH_EASY, policies=["easy+shortest"]), threads=1, orders={"shortest": shortest})
    t2 = time.perf_counter()
    starts = lambda r: r.jobs[r.jobs.policy != "as-recorded"].set_index("job").start.sort_index()
    assert starts(py).equals(starts(rust))
    assert calls > 100_000
    per_call = ((t2 - t1) - (t1 - t0)) / calls
    print(f"python order: {calls} calls, {per_call * 1e6:.2f} us per call more than Rust's SJF")


def test_an_order_class_gets_an_instance_per_cluster_that_hears_of_starts_and_ends():
    made, heard = [], {"started": 0, "ended": 0}

    class Least:
        """Fair share without decay: the user with the fewest processor-seconds first."""

        def __init__(self):
            self.used = {}
            made.append(self)

        def key(self, job, now):
            return self.used.get(job.user, 0)

        def started(self, job, now):
            heard["started"] += 1

        def ended(self, job, start, now):
            heard["ended"] += 1
            self.used[job.user] = self.used.get(job.user, 0) + job.size * (now - start)

    exp = dict(SWEEP, policies=["easy+least"], workload={"lublin": {"days": 2}, "estimates": "exact"})
    exp["platform"] = {"clusters": [{"name": "a", "procs": 32}, {"name": "b", "procs": 32}], "routing": "round-robin"}
    r = brokk.run(exp, threads=1, orders={"least": Least})
    assert len(made) == 2
    ran = int(r.points.finished.iloc[0])
    assert heard["started"] >= ran and heard["ended"] >= ran


def test_an_order_that_raises_fails_the_run_with_its_error():
    def broken(job, now):
        raise RuntimeError("no key for you")

    with pytest.raises(ValueError, match="queue order broken: RuntimeError: no key for you"):
        brokk.run(dict(SWEEP, policies=["easy+broken"]), orders={"broken": broken})
    with pytest.raises(TypeError, match="give a function"):
        brokk.run(dict(SWEEP, policies=["easy+x"]), orders={"x": 3})


def test_a_grid_router_written_in_python_routes_as_the_same_rule_in_rust(tmp_path):
    import pandas as pd

    calls = 0

    class RoundRobin:
        """The built-in round robin: the next site after the last one used that is large enough."""

        def __init__(self):
            self.turn = 0

        def route(self, job, sites, now):
            nonlocal calls
            calls += 1
            for k in range(len(sites)):
                c = (self.turn + k) % len(sites)
                if sites[c].procs >= job.size:
                    self.turn = c + 1
                    return c
            return None

    # A month, so that the difference in wall time is many calls' worth.
    exp = dict(SWEEP, policies=["easy"], sweep={"loads": [0.7], "seeds": [1]})
    exp["workload"] = {"lublin": {"days": 30}, "estimates": "exact"}
    exp["platform"] = {
        "clusters": [{"name": "a", "procs": 32}, {"name": "b", "procs": 64}],
        "routings": ["round-robin", "rr"],
    }
    r = brokk.run(exp, sweep=True, threads=1, routers={"rr": RoundRobin}, out=tmp_path)
    jobs = r.jobs[r.jobs.policy != "as-recorded"]
    placed = lambda p: jobs[jobs.policy == p].set_index("job")[["cluster", "start"]].sort_index()
    assert len(placed("rr")) > 4000
    assert placed("rr").equals(placed("round-robin"))
    assert set(placed("rr").cluster) == {"a", "b"}
    # Each series' wall time over the same jobs: what a Python call costs.
    t = pd.read_csv(tmp_path / "timings.csv").set_index("series").seconds
    per_call = (t["rr"] - t["round-robin"]) / calls
    print(f"python router: {calls} calls, {per_call * 1e6:.2f} us per call more than Rust's round robin")


def test_a_router_reads_the_sites_and_one_that_raises_fails_the_run():
    seen = []

    def most_free(job, sites, now):
        seen.append([(s.name, s.procs, s.free, s.running, s.waiting) for s in sites])
        fits = [k for k, s in enumerate(sites) if s.procs >= job.size]
        return max(fits, key=lambda k: sites[k].free, default=None)

    exp = dict(SWEEP, policies=["easy"], workload={"lublin": {"days": 2}, "estimates": "exact"})
    exp["platform"] = {"clusters": [{"name": "a", "procs": 32}, {"name": "b", "procs": 64}], "routings": ["free"]}
    r = brokk.run(exp, threads=1, routers={"free": most_free})
    assert int(r.points.finished.iloc[0]) > 0
    assert {s[0] for s in seen[0]} == {"a", "b"} and seen[0][0][1] == 32
    # The sites' state changes as jobs arrive: not every call sees them empty.
    assert any(a[2] < a[1] or b[2] < b[1] for a, b in seen)

    def broken(job, sites, now):
        raise RuntimeError("nowhere")

    with pytest.raises(ValueError, match="router boom: RuntimeError: nowhere"):
        brokk.run(dict(exp, platform=dict(exp["platform"], routings=["boom"])), routers={"boom": broken})
    with pytest.raises(TypeError, match="give a function route"):
        brokk.run(exp, routers={"free": 3})


def test_a_workflow_admission_experiment_gives_its_figures_and_each_schedulers_time(tmp_path):
    exp = tmp_path / "admission.toml"
    schedulers = (ROOT / "examples" / "experiments" / "workflow-schedulers.toml").read_text()
    # Two seeds, two arrival rates and fewer workflows: the same file, smaller.
    lines = []
    for line in schedulers.splitlines():
        key = line.split("=")[0].strip()
        if key == "seeds":
            line = "seeds = [1, 2]"
        elif key == "inter_arrival":
            line = "inter_arrival = [20, 160]"
        elif key == "workflows":
            line = "workflows = 60"
        lines.append(line)
    exp.write_text("\n".join(lines) + "\n")
    a = brokk.admission(exp, out=tmp_path / "out")
    runs = len(a.points)
    assert runs == len(a.timings) == 2 * 2 * a.points.scheduler.nunique()
    # Overload refuses more than a light load, for every scheduler.
    rej = a.aggregates.set_index(["scheduler", "inter_arrival"]).rejection_rate_mean
    for s in a.points.scheduler.unique():
        assert rej[(s, 20.0)] > rej[(s, 160.0)]
    # One admission call per workflow, timed.
    assert (a.timings.calls == 60).all()
    assert (a.timings.seconds > 0).all()
    assert (tmp_path / "out" / "timings.csv").exists()
    assert (tmp_path / "out" / "summary.json").exists()
