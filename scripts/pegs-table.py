#!/usr/bin/env python3
"""The solutions of a peg solitaire board by start and final hole, as a
Markdown table, counted by `tally run pegs --board BOARD --start S --json`
for one start hole of each class under the board's symmetries (one forward
search each gives every final hole; `--by-final-hole` is added only where
the symmetric search cannot tell the final holes apart).

    scripts/pegs-table.py [--tally PATH] [--board english|french|diamond]
                          [--starts 1,2,4] [--results FILE] [--data-root DIR]
                          [--memory-budget SIZE]

Checks what the counts must satisfy, and stops naming the first failure:
- each row adds up to its run's answer;
- every pair (a, b) of holes: N(a -> b) = N(b -> a), a game played backwards
  with pegs and holes swapped, each side from its own forward search (a hole
  outside the starts run is mapped onto its class's start by a symmetry,
  which maps the pair with it);
- a start the position classes rule out answers 0 and says why.

`--results FILE` keeps each start's counts as it finishes, so that a table of
many hours resumes where it stopped; `--data-root DIR` gives each run a data
directory of its own under DIR, so that an interrupted run resumes too.
"""
import argparse
import json
import os
import subprocess
import sys
import time

# Row widths of each board, centred on a square grid; holes are numbered row
# by row, left to right, from 1.
ROWS = {
    "english": [3, 3, 7, 7, 7, 3, 3],
    "french": [3, 5, 7, 7, 7, 5, 3],
    "diamond": [1, 3, 5, 7, 9, 7, 5, 3, 1],
}


def holes_of(board):
    """Each hole's (x, y), centred on the board's middle, by hole number."""
    rows = ROWS[board]
    width = max(rows)
    holes = {}
    number = 1
    for y, row in enumerate(rows):
        for i in range(row):
            x = (width - row) // 2 + i
            holes[number] = (2 * x - (width - 1), 2 * y - (len(rows) - 1))
            number += 1
    return holes


def symmetries(board):
    """The eight symmetries of the square, as permutations of hole numbers."""
    holes = holes_of(board)
    at = {xy: h for h, xy in holes.items()}
    maps = [
        lambda x, y: (x, y), lambda x, y: (-y, x), lambda x, y: (-x, -y), lambda x, y: (y, -x),
        lambda x, y: (-x, y), lambda x, y: (x, -y), lambda x, y: (y, x), lambda x, y: (-y, -x),
    ]
    return [{h: at[f(*xy)] for h, xy in holes.items()} for f in maps]


def classes(board):
    """The least hole of each class of holes under the symmetries."""
    seen, firsts = set(), []
    for h in sorted(holes_of(board)):
        if h not in seen:
            firsts.append(h)
            seen.update(g[h] for g in symmetries(board))
    return firsts


def jump_lines(board):
    """Every line of three holes a jump uses, along rows and columns."""
    holes = holes_of(board)
    at = {xy: h for h, xy in holes.items()}
    lines = []
    for h, (x, y) in holes.items():
        for dx, dy in ((2, 0), (0, 2)):
            b, c = at.get((x + dx, y + dy)), at.get((x + 2 * dx, y + 2 * dy))
            if b and c:
                lines.append((h, b, c))
    return lines


def parity_sets(board):
    """A basis of the hole sets every jump line meets in 0 or 2 holes (so no
    jump changes the parity of the pegs on them): the position classes."""
    holes = sorted(holes_of(board))
    index = {h: i for i, h in enumerate(holes)}
    # Solve line . w = 0 over GF(2): rows are the lines as bit masks.
    rows = [sum(1 << index[h] for h in line) for line in jump_lines(board)]
    pivots = {}
    for row in rows:
        for col, prow in pivots.items():
            if row >> col & 1:
                row ^= prow
        if row:
            col = row.bit_length() - 1
            for c, prow in list(pivots.items()):
                if prow >> col & 1:
                    pivots[c] = prow ^ row
            pivots[col] = row
    free = [i for i in range(len(holes)) if i not in pivots]
    basis = []
    for f in free:
        w = 1 << f
        for col, prow in pivots.items():
            if prow >> f & 1:
                w |= 1 << col
        basis.append({holes[i] for i in range(len(holes)) if w >> i & 1})
    return basis


def needs_by_final_hole(board, start):
    """Whether a search reduced by every symmetry cannot tell the final holes
    apart: some class of one-peg positions holds two holes the parities allow
    from `start` that no symmetry fixing `start` maps onto each other."""
    sets = parity_sets(board)
    holes = sorted(holes_of(board))
    signature = lambda pegs: tuple(len(w & pegs) % 2 for w in sets)
    wanted = signature(set(holes) - {start})
    allowed = {t for t in holes if signature({t}) == wanted}
    groups = symmetries(board)
    fixing = [g for g in groups if g[start] == start]
    for t in allowed:
        orbit = {g[t] for g in groups} & allowed
        related = {g[t] for g in fixing}
        if not orbit <= related:
            return True
    return False


def run(args, start, by_final_hole):
    command = [args.tally, "run", "pegs", "--board", args.board, "--start", str(start), "--json"]
    if by_final_hole:
        command.append("--by-final-hole")
    if args.data_root:
        command += ["--data", os.path.join(args.data_root, f"{args.board}-{start}")]
    if args.memory_budget:
        command += ["--memory-budget", args.memory_budget]
    began = time.monotonic()
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    result["wall_s"] = round(time.monotonic() - began, 1)
    return result


def count_start(args, start):
    """One start's row: its counts by final hole, and how it was found."""
    result = run(args, start, needs_by_final_hole(args.board, start))
    details = result["details"]
    if details.get("ruled_out"):
        if int(result["answer"]) != 0:
            sys.exit(f"start {start}: ruled out, yet {result['answer']} solutions")
        return {"finals": {}, "ruled_out": details["ruled_out"], "wall_s": result["wall_s"]}
    if "by_final_hole" not in details:
        result = run(args, start, True)
        details = result["details"]
    finals = {int(h): int(n) for h, n in details.get("by_final_hole", {}).items()}
    if sum(finals.values()) != int(result["answer"]):
        sys.exit(f"start {start}: the final holes add up to {sum(finals.values())}, not {result['answer']}")
    return {
        "finals": finals,
        "answer": int(result["answer"]),
        "positions": details.get("positions"),
        "wall_s": result["wall_s"],
    }


def check_reversal(board, table):
    """N(a -> b) = N(b -> a) for every pair of holes, through the symmetries."""
    groups = symmetries(board)
    holes = sorted(holes_of(board))

    def count(a, b):
        for g in groups:
            if g[a] in table:
                return table[g[a]]["finals"].get(g[b], 0)
        return None

    checked, solved = 0, 0
    for a in holes:
        for b in holes:
            ab, ba = count(a, b), count(b, a)
            if ab is None or ba is None:
                continue
            if ab != ba:
                sys.exit(f"{a} -> {b} has {ab} solutions and {b} -> {a} {ba}")
            checked += 1
            solved += ab > 0
    return checked, solved


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tally", default="tally")
    parser.add_argument("--board", default="english", choices=sorted(ROWS))
    parser.add_argument("--starts", help="comma-separated start holes (default: one of each class)")
    parser.add_argument("--results", help="a JSON file keeping each start's counts as it finishes")
    parser.add_argument("--data-root", help="a directory for each run's data directory")
    parser.add_argument("--memory-budget", help="each run's --memory-budget (say 7GiB)")
    args = parser.parse_args()
    starts = [int(s) for s in args.starts.split(",")] if args.starts else classes(args.board)
    kept = {}
    if args.results and os.path.exists(args.results):
        with open(args.results) as f:
            kept = json.load(f)
    table = {}
    for start in starts:
        key = f"{args.board}:{start}"
        if key in kept:
            row = kept[key]
            row["finals"] = {int(h): n for h, n in row["finals"].items()}
        else:
            row = count_start(args, start)
            kept[key] = row
            if args.results:
                with open(args.results, "w") as f:
                    json.dump(kept, f, indent=1)
        table[start] = row
        print(f"start {start}: {row.get('answer', 0)} solutions, {row['wall_s']} s", file=sys.stderr)
    pairs, solved = check_reversal(args.board, table)
    print(f"{pairs} ordered pairs of holes checked by reversal, {solved} of them with "
          "solutions", file=sys.stderr)
    finals = sorted({b for row in table.values() for b in row["finals"] if row["finals"][b] > 0})
    print("| start \\ final | " + " | ".join(str(b) for b in finals) + " |")
    print("|---|" + "---|" * len(finals))
    for start, row in table.items():
        if row.get("ruled_out") or not any(row["finals"].values()):
            continue
        cells = [f"{row['finals'][b]:,}" if row["finals"].get(b, 0) else "" for b in finals]
        print(f"| {start} | " + " | ".join(cells) + " |")
    searched = [(start, row) for start, row in table.items()
                if not row.get("ruled_out") and not any(row["finals"].values())]
    if searched:
        print()
        print("No solution, after a whole search: "
              + ", ".join(f"{s} ({row['positions']:,} positions)" for s, row in searched) + ".")
    ruled_out = [start for start, row in table.items() if row.get("ruled_out")]
    if ruled_out:
        print()
        print("No solution (the position classes rule them out, answered at planning): "
              + ", ".join(str(s) for s in ruled_out) + ".")


if __name__ == "__main__":
    main()
