#!/usr/bin/env python3
"""The solutions of a peg solitaire board by start and final hole, as a
Markdown table, counted by `tally run pegs --board BOARD --start S
--by-final-hole --json` for each start hole asked for (one forward search
each gives every final hole).

    scripts/pegs-table.py [--tally PATH] [--board english] [--starts 1,2,4,5,9,10,17]

The default starts are one hole of each class under the board's symmetries.

Also checks what the counts must satisfy: a game played backwards (start on
the final hole, end on the start hole) has as many solutions, and each row
adds up to its run's answer.
"""
import argparse
import json
import subprocess
import sys

# One hole of each class of holes under the symmetries of the square.
CLASSES = {"english": [1, 2, 4, 5, 9, 10, 17]}


def run(tally, board, start):
    out = subprocess.run(
        [tally, "run", "pegs", "--board", board, "--start", str(start), "--by-final-hole", "--json"],
        check=True, capture_output=True, text=True,
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    finals = {int(h): int(n) for h, n in result["details"].get("by_final_hole", {}).items()}
    if sum(finals.values()) != int(result["answer"]):
        sys.exit(f"start {start}: the final holes add up to {sum(finals.values())}, not {result['answer']}")
    return finals


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tally", default="tally")
    parser.add_argument("--board", default="english", choices=["english", "french"])
    parser.add_argument("--starts", help="comma-separated start holes")
    args = parser.parse_args()
    if not args.starts and args.board not in CLASSES:
        parser.error(f"give --starts for the {args.board} board")
    starts = [int(s) for s in args.starts.split(",")] if args.starts else CLASSES[args.board]
    table = {}
    for start in starts:
        table[start] = run(args.tally, args.board, start)
        print(f"start {start} done", file=sys.stderr)
    for a in table:
        for b in table:
            if table[a].get(b, 0) != table[b].get(a, 0):
                sys.exit(f"{a} -> {b} has {table[a].get(b, 0)} solutions and {b} -> {a} {table[b].get(a, 0)}")
    finals = sorted({b for row in table.values() for b in row if row[b] > 0})
    print("| start \\ final | " + " | ".join(str(b) for b in finals) + " |")
    print("|---|" + "---|" * len(finals))
    for start, row in table.items():
        cells = [f"{row[b]:,}" if row.get(b, 0) else "" for b in finals]
        print(f"| {start} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
