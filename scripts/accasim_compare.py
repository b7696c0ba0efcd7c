"""Compares Brokk's per-job schedule (jobs.csv of `brokk sim run`) with
AccaSim's (accasim_run.py) for one policy and prints the agreement as JSON.
Exits 1 if the share of jobs starting at the same second is below --min."""
import argparse
import csv
import json
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokk", required=True)
    ap.add_argument("--accasim", required=True)
    ap.add_argument("--policy", required=True)
    ap.add_argument("--min", type=float, default=0.0, help="least share of identical starts")
    a = ap.parse_args()
    ours = {}
    with open(a.brokk) as f:
        for r in csv.DictReader(f):
            if r["policy"] == a.policy:
                ours[r["job"]] = (int(r["submit"]), int(r["start"]), int(r["end"]))
    theirs = {}
    with open(a.accasim) as f:
        for r in csv.DictReader(f):
            theirs[r["job"]] = (int(r["submit"]), int(r["start"]), int(r["end"]))
    common = sorted(set(ours) & set(theirs), key=int)
    same = sum(1 for j in common if ours[j][1] == theirs[j][1])
    diffs = [ours[j][1] - theirs[j][1] for j in common]
    wait = lambda s: sum(s[j][1] - s[j][0] for j in common) / max(len(common), 1)
    # Jobs AccaSim started later than the trace submit in ours: first divergence.
    first = next((j for j in common if ours[j][1] != theirs[j][1]), None)
    out = {
        "policy": a.policy,
        "brokk_jobs": len(ours),
        "accasim_jobs": len(theirs),
        "common": len(common),
        "same_start": same,
        "same_start_share": same / max(len(common), 1),
        "within_60s_share": sum(1 for d in diffs if abs(d) <= 60) / max(len(common), 1),
        "brokk_mean_wait": wait(ours),
        "accasim_mean_wait": wait(theirs),
        "first_difference": None if first is None else {"job": int(first), "brokk": ours[first], "accasim": theirs[first]},
    }
    print(json.dumps(out))
    return 0 if out["same_start_share"] >= a.min else 1


if __name__ == "__main__":
    sys.exit(main())
