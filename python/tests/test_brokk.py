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
