#!/usr/bin/env python3
"""The fair share measured through real processes.

Two users of weights 1 and 3 (alice and bob) each submit JOBS synthetic jobs
of SHARDS shards to one coordinator; then one worker of 4 slots starts. The
coordinator's /metrics is read every half second: each user's slot-seconds
(tally_user_slot_seconds), slots held and unfinished jobs. Prints the ratio of
the slot-seconds each user's jobs held while both had work (the goal: 3 within
10%), and, once bob's work is done, the slots alice's jobs held on average
(slot-seconds a second: the goal, all 4).

Usage: scripts/fair-share.py [--tally target/release/tally] [--jobs 50]
       [--shards 200] [--terms 8000000]
"""

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics(http: str) -> dict:
    """Per-user values of the tally_user_* gauges."""
    text = urllib.request.urlopen(f"http://{http}/metrics", timeout=10).read().decode()
    seen: dict = {}
    for line in text.splitlines():
        m = re.match(r'tally_user_(\w+)\{user="([^"]+)"\} (\S+)', line)
        if m:
            seen.setdefault(m.group(2), {})[m.group(1)] = float(m.group(3))
    return seen


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tally", default="target/release/tally")
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--shards", type=int, default=200)
    parser.add_argument("--terms", type=int, default=8_000_000)
    args = parser.parse_args()
    tally = str(Path(args.tally).resolve())
    work = Path(tempfile.mkdtemp(prefix="tally-fair-share-"))
    tokens = {name: f"{name}-token-{time.time_ns()}" for name in ["admin", "worker", "alice", "bob"]}
    for name, token in tokens.items():
        (work / f"{name}-token").write_text(token)

    def hash_of(name: str) -> str:
        return subprocess.run(
            [tally, "hash-token", "--token-file", str(work / f"{name}-token")],
            check=True, capture_output=True, text=True,
        ).stdout.strip()

    (work / "users").write_text(
        f"alice user {hash_of('alice')} weight=1\nbob user {hash_of('bob')} weight=3\n"
    )
    port, http = free_port(), f"127.0.0.1:{free_port()}"
    url = f"http://127.0.0.1:{port}"
    log = open(work / "coordinator.log", "w")
    coordinator = subprocess.Popen(
        [tally, "coordinator", "--listen", f"127.0.0.1:{port}", "--data", str(work / "data"),
         "--http", http, "--token-file", str(work / "admin-token"),
         "--worker-token-file", str(work / "worker-token"), "--users-file", str(work / "users")],
        stderr=log,
    )
    worker = None
    try:
        def client(user: str, *command: str) -> str:
            return subprocess.run(
                [tally, "--coordinator", url, *command],
                check=True, capture_output=True, text=True,
                env={"TALLY_TOKEN": tokens[user], "PATH": "/usr/bin:/bin"},
            ).stdout

        deadline = time.time() + 60
        while True:
            try:
                client("alice", "whoami")
                break
            except subprocess.CalledProcessError:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        for _ in range(args.jobs):
            for user in ["alice", "bob"]:
                client(user, "submit", "synthetic", "--shards", str(args.shards),
                       "--terms-per-shard", str(args.terms))
        worker = subprocess.Popen(
            [tally, "worker", "--coordinator", url, "--slots", "4", "--id", "w1"],
            env={"TALLY_WORKER_TOKEN": tokens["worker"], "PATH": "/usr/bin:/bin"},
            stderr=open(work / "worker.log", "w"),
        )
        samples = []
        started = time.time()
        while True:
            now = metrics(http)
            samples.append((time.time() - started, now))
            if all(now[u]["jobs_unfinished"] == 0 for u in ["alice", "bob"]):
                break
            time.sleep(0.5)
    finally:
        for process in [worker, coordinator]:
            if process:
                process.terminate()
                process.wait(timeout=30)

    both = [(t, s) for t, s in samples
            if s["alice"]["jobs_unfinished"] > 0 and s["bob"]["jobs_unfinished"] > 0
            and s["alice"]["slot_seconds"] + s["bob"]["slot_seconds"] > 0]
    first, last = both[0], both[-1]
    used = {u: last[1][u]["slot_seconds"] - first[1][u]["slot_seconds"] for u in ["alice", "bob"]}
    alone = [(t, s["alice"]["slot_seconds"]) for t, s in samples
             if s["bob"]["jobs_unfinished"] == 0 and s["alice"]["jobs_unfinished"] > 0]
    summary = {
        "jobs_per_user": args.jobs, "shards_per_job": args.shards, "terms_per_shard": args.terms,
        "both_had_work_s": round(last[0] - first[0], 1),
        "slot_seconds_while_both_had_work": {u: round(v, 1) for u, v in used.items()},
        "ratio_bob_to_alice": round(used["bob"] / used["alice"], 3),
        "alice_alone_s": round(alone[-1][0] - alone[0][0], 1) if len(alone) > 1 else 0,
        # Slot-seconds a second: the slots alice's jobs held on average.
        "alice_alone_slots": round((alone[-1][1] - alone[0][1]) / (alone[-1][0] - alone[0][0]), 2)
        if len(alone) > 1 else None,
        "wall_s": round(samples[-1][0], 1),
    }
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    sys.exit(main())
