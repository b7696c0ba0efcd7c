#!/usr/bin/env python3
"""Delegation between Brokk brokers beside Slurm federation, on real Slurm.

The same imbalanced stream (every job arriving at one cluster, the other
idle) runs three ways on local Slurm testbeds (scripts/slurm-testbed.sh):

  home        plain Slurm: every job queues where it arrived;
  federation  the two clusters joined as a Slurm federation (slurmdbd and
              MariaDB): each job gets a sibling on every cluster, the first
              to start wins;
  brokk       two `brokk serve`, each over one of the clusters (an embedded
              Slurm site) and the other as a sibling neighbour: the first
              delegates what its own cluster cannot start at once ([DMM]).

For each it prints the mean wait, the makespan (first submission to last
end) and how many jobs ran away from home; `--json` prints them as JSON.

    scripts/federation-compare.py --brokk target/release/brokk [--jobs 12]
        [--cpus 8] [--seconds 6] [--json]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))


def log(*a):
    print("federation-compare:", *a, file=sys.stderr)


def run(args, env=None, check=True):
    p = subprocess.run(args, env=env, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise SystemExit(f"{' '.join(args)}: {p.stderr.strip()}")
    return p.stdout


def testbed(directory, port, federation=None):
    args = [os.path.join(HERE, "slurm-testbed.sh"), "start", "--dir", directory, "--port", str(port)]
    if federation:
        args += ["--federation", federation]
    run(args)
    return [os.path.join(directory, f"c{c}", "slurm.conf") for c in (1, 2)]


def slurm_env(conf):
    return dict(os.environ, SLURM_CONF=conf, TZ="UTC")


def stamp(text):
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()


def figures(rows, home):
    """rows: (submit, start, end, where) per job."""
    first = min(r[0] for r in rows)
    return {
        "jobs": len(rows),
        "mean_wait_s": round(sum(r[1] - r[0] for r in rows) / len(rows), 1),
        "makespan_s": round(max(r[2] for r in rows) - first, 1),
        "away_from_home": sum(1 for r in rows if r[3] != home),
    }


def submit_slurm(conf, n, cpus, seconds):
    ids = []
    for _ in range(n):
        out = run(["sbatch", "--parsable", "-n", str(cpus), "-o", "/dev/null", "--wrap", f"sleep {seconds}"],
                  env=slurm_env(conf))
        ids.append(out.strip().split(";")[0])
    return ids


def wait_slurm(conf, ids, clusters):
    env = slurm_env(conf)
    deadline = time.time() + 600
    while time.time() < deadline:
        many = ["-M", clusters] if clusters else []
        out = run(["squeue", "-h", *many, "-o", "%i", "-j", ",".join(ids)], env=env)
        if not any(line.strip() in ids for line in out.splitlines()):
            return
        time.sleep(0.5)
    raise SystemExit("the Slurm jobs did not end in 10 minutes")


def federation(conf, n, cpus, seconds):
    since = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    ids = submit_slurm(conf, n, cpus, seconds)
    wait_slurm(conf, ids, "all")
    # The accounting has each job once where it ran (a database kept from
    # an earlier run may know the same ids: only this run's count).
    rows = {}
    for _ in range(50):
        out = run(["sacct", "-M", "all", "-X", "-n", "-P", "-S", since, "-o",
                   "JobID,Cluster,Submit,Start,End,State", "-j", ",".join(ids)], env=slurm_env(conf))
        rows = {}
        for line in out.splitlines():
            r = line.split("|")
            if r[0] in ids and r[5] == "COMPLETED" and stamp(r[2]) >= stamp(since):
                rows[r[0]] = r
        if len(rows) == n:
            return figures([(stamp(r[2]), stamp(r[3]), stamp(r[4]), r[1]) for r in rows.values()], "brokk1")
        time.sleep(0.5)
    raise SystemExit(f"sacct has {len(rows)} of {n} federated jobs")


def home(conf, n, cpus, seconds):
    ids = submit_slurm(conf, n, cpus, seconds)
    wait_slurm(conf, ids, None)
    rows = []
    for i in ids:
        line = run(["scontrol", "show", "job", "-o", i], env=slurm_env(conf))
        f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        rows.append((stamp(f["SubmitTime"]), stamp(f["StartTime"]), stamp(f["EndTime"]), "brokk1"))
    return figures(rows, "brokk1")


def brokk(binary, confs, n, cpus, seconds):
    work = tempfile.mkdtemp(prefix="brokk-fedcmp-")
    names = ["alpha", "beta"]
    ports = []
    for _ in names:
        import socket
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        ports.append(s.getsockname()[1])
        s.close()
    servers = []
    for k, me in enumerate(names):
        other = 1 - k
        d = os.path.join(work, me)
        os.makedirs(d)
        config = (
            f'name = "{me}"\nlisten = "127.0.0.1:{ports[k]}"\ndatabase = "broker.db"\nstate_dir = "sites"\n'
            f'info_ttl_ms = 0\ndelegates = ["{names[other]}"]\n'
            f'[tokens]\n"tok-ann" = "ann"\n"tok-{names[other]}" = "{names[other]}"\n'
            f'[[sites]]\nname = "{names[other]}"\nurl = "http://127.0.0.1:{ports[other]}/site"\n'
            f'token = "tok-{me}"\nneighbour = "sibling"\n'
            f'[[embedded]]\nname = "{me}-slurm"\nslurm = {{ conf = "{confs[k]}" }}\n'
        )
        path = os.path.join(d, "broker.toml")
        with open(path, "w") as f:
            f.write(config)
        os.chmod(path, 0o600)
        servers.append(subprocess.Popen([binary, "serve", "--config", path], stdout=subprocess.DEVNULL,
                                        stderr=open(os.path.join(d, "service.log"), "w")))
    try:
        for p in ports:
            for _ in range(200):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{p}/healthz", timeout=1)
                    break
                except OSError:
                    time.sleep(0.1)
        # Both brokers see their neighbour before the stream starts.
        time.sleep(2)
        env = dict(os.environ, BROKK_SERVER=f"http://127.0.0.1:{ports[0]}", BROKK_TOKEN="tok-ann")
        job = os.path.join(work, "job.json")
        with open(job, "w") as f:
            json.dump({"executable": "/bin/sleep", "arguments": [str(seconds)], "cpus": cpus, "wall_time": 600}, f)
        ids = [json.loads(run([binary, "submit", job, "--json"], env=env))["id"] for _ in range(n)]
        deadline = time.time() + 600
        while True:
            views = [json.loads(run([binary, "status", "--json", i], env=env)) for i in ids]
            if all(v["state"] in ("finished", "failed", "cancelled") for v in views):
                break
            if time.time() > deadline:
                raise SystemExit("the brokered jobs did not end in 10 minutes")
            time.sleep(0.5)
        bad = [v for v in views if v["state"] != "finished"]
        if bad:
            raise SystemExit(f"brokered jobs did not finish: {bad[0]}")

        def at(t):
            return datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp()

        rows = [(at(v["submitted"]), at(v["started"]), at(v["ended"]), v["site"]) for v in views]
        return figures(rows, "alpha-slurm")
    finally:
        for s in servers:
            s.kill()
            s.wait()


def main():
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--brokk", required=True)
    a.add_argument("--jobs", type=int, default=12)
    a.add_argument("--cpus", type=int, default=8)
    a.add_argument("--seconds", type=int, default=6)
    a.add_argument("--json", action="store_true")
    args = a.parse_args()
    base = tempfile.gettempdir()
    log("starting the testbeds")
    fed = testbed(os.path.join(base, "brokk-fedcmp-fed"), 17200, "brokkfed")
    plain = testbed(os.path.join(base, "brokk-fedcmp-plain"), 17300)
    results = {}
    log("home: every job at the first cluster")
    results["home"] = home(plain[0], args.jobs, args.cpus, args.seconds)
    log("federation")
    results["federation"] = federation(fed[0], args.jobs, args.cpus, args.seconds)
    log("brokk delegation")
    results["brokk"] = brokk(os.path.abspath(args.brokk), plain, args.jobs, args.cpus, args.seconds)
    setup = {"jobs": args.jobs, "cpus": args.cpus, "seconds": args.seconds,
             "clusters": "2 x (2 nodes x 8 CPUs)"}
    if args.json:
        print(json.dumps({"setup": setup, "results": results}, indent=2))
        return
    print(f"{args.jobs} jobs of {args.cpus} CPUs for {args.seconds} s, all arriving at one of two clusters "
          f"of 16 CPUs each")
    print(f"{'setup':<12} {'mean wait (s)':>14} {'makespan (s)':>13} {'away from home':>15}")
    for k, r in results.items():
        print(f"{k:<12} {r['mean_wait_s']:>14} {r['makespan_s']:>13} {r['away_from_home']:>15}")


if __name__ == "__main__":
    main()
