#!/usr/bin/env python3
"""A frontier job's levels as a Markdown table, read from its durable events:
for each stage, the level it found and its positions, the stage data it
wrote and the bytes that makes for each position of the level it wrote
(every copy a parent shard sent, before the next stage sums them), what its
shards spilled past their memory shares, and its wall time.

    scripts/levels-table.py --data DIR [--job JOB] [--tally PATH] [--stage-store URL]

DIR is a data directory a `tally run ... --data DIR` left (the job is its last
one unless --job says): a coordinator is started on it for the events and
stopped again, on the run's stage store (`file://DIR/stage`, the default of
`tally run`, when that directory exists; --stage-store names another). Where the answer's details give positions expanded per level
(`expanded`, after pruning), they are shown beside the positions kept, and
where they give the children each level left out because they cannot finish
(`pruned_when_sent`: counted once for each jump that made them, or, by
releases that held children to the rule when they sent them, once by each
shard and spilled run that summed them), beside the level those children
would have joined.
"""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time

LEVEL = re.compile(r"level (\d+): ([\d,]+) positions")
WRITTEN = re.compile(r"stage data written: (\d+) bytes")
SPILLED = re.compile(r"shards spilled (\d+) bytes")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tally_json(args, url, *command):
    out = subprocess.run(
        [args.tally, *command, "--coordinator", url, "--json"],
        check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--job")
    parser.add_argument("--tally", default="tally")
    parser.add_argument("--stage-store")
    args = parser.parse_args()
    stage_store = args.stage_store
    if stage_store is None and os.path.isdir(os.path.join(args.data, "stage")):
        stage_store = "file://" + os.path.abspath(os.path.join(args.data, "stage"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [args.tally, "coordinator", "--data", args.data, "--listen", f"127.0.0.1:{port}"]
    if stage_store:
        command += ["--stage-store", stage_store]
    coordinator = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                jobs = tally_json(args, url, "list", "--all")
                break
            except subprocess.CalledProcessError:
                time.sleep(0.2)
        else:
            sys.exit("the coordinator on the data directory did not answer")
        job = args.job or jobs["jobs"][-1]["id"]
        events = tally_json(args, url, "events", job)["events"]
        result = tally_json(args, url, "result", job)
    finally:
        coordinator.terminate()
        coordinator.wait(timeout=30)
    details = result.get("details") or {}
    expanded = details.get("expanded") or []
    pruned = details.get("pruned_when_sent") or []
    started = next((e["time_ms"] for e in events if e["kind"] == "leased"), events[0]["time_ms"])
    rows = []
    for e in events:
        if e["kind"] not in ("stage", "succeeded"):
            continue
        levels = LEVEL.findall(e["message"])
        written = WRITTEN.search(e["message"])
        spilled = SPILLED.search(e["message"])
        rows.append({
            "stage": e["stage"] - 1 if e["kind"] == "stage" else e["stage"],
            "level": int(levels[-1][0]) if levels else None,
            "positions": int(levels[-1][1].replace(",", "")) if levels else None,
            "written": int(written.group(1)) if written else None,
            "spilled": int(spilled.group(1)) if spilled else 0,
            "wall_s": (e["time_ms"] - started) / 1000,
        })
        started = e["time_ms"]
    print("| stage | level found | positions | children pruned on the way to it | expanded | stage data written | bytes a position of the next level | spilled | wall (s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i, row in enumerate(rows):
        nxt = rows[i + 1]["positions"] if i + 1 < len(rows) else None
        per = f"{row['written'] / nxt:.1f}" if row["written"] and nxt else ""
        level = row["level"]
        exp = f"{expanded[level]:,}" if level is not None and level < len(expanded) else ""
        cut = f"{pruned[level - 1]:,}" if level and level - 1 < len(pruned) else ""
        print(f"| {row['stage']} | {'' if level is None else level} | "
              f"{'' if row['positions'] is None else format(row['positions'], ',')} | {cut} | {exp} | "
              f"{'' if row['written'] is None else format(row['written'], ',')} | {per} | "
              f"{format(row['spilled'], ',')} | {row['wall_s']:.1f} |")


if __name__ == "__main__":
    main()
