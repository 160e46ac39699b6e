"""Time of the dependency graph and credit (`compute_credit`) per trajectory, for synthetic trajectories shaped
like real ones: the agent inspects files, rewrites and edits them, runs scripts that write the verified outputs,
and removes scratch files. Prints the median over runs and the growth per 10x commands (1.0x per command is
linear).

    .venv/bin/python bench/bench_credit.py [--sizes 10 100 1000] [--runs 200 50 10]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from depgpo.credit import compute_credit


def synthetic_trajectory(num_commands: int, seed: int = 0) -> dict:
    rng = random.Random(seed)
    sources = [f"/app/src/module_{k}.py" for k in range(max(3, num_commands // 8))]
    outputs = [f"/app/out/result_{k}.csv" for k in range(max(2, num_commands // 20))]
    content: dict[str, list[str]] = {}

    def lines(path: str) -> list[str]:
        return [f"value_{rng.randint(0, 500)} = {rng.randint(10, 99999)}" for _ in range(rng.randint(15, 40))]

    def text_write(path: str, written: list[str], after: list[str]) -> dict:
        content[path] = after
        return {"path": path, "text": True, "lines_written": written, "content_after": after,
                "hash_after": f"sha256:{hash(tuple(after)) & 0xFFFFFFFF:08x}"}

    commands = []
    for index in range(num_commands):
        kind = rng.random()
        entry = {"index": index, "turn": index, "observation": "", "reads": [], "stats": [], "writes": [],
                 "deletions": []}
        existing = [path for path in sources if path in content]
        if kind < 0.3 and existing:  # look at a file
            path = rng.choice(existing)
            entry.update(text=f"cat {path}", reads=[path], observation="\n".join(content[path][:30]))
        elif kind < 0.55 or not existing:  # (re)write a source file with a heredoc, keeping part of it
            path = rng.choice(sources)
            new = lines(path)
            kept = content.get(path, [])[: len(new) // 2]
            after = kept + new[len(kept):]
            entry.update(text=f"cat > {path} <<'EOF'\n" + "\n".join(after) + "\nEOF",
                         writes=[text_write(path, after, after)])
        elif kind < 0.7:  # sed -i one line
            path = rng.choice(existing)
            after = list(content[path])
            changed = f"value_{rng.randint(0, 500)} = {rng.randint(10, 99999)}"
            after[rng.randrange(len(after))] = changed
            entry.update(text=f"sed -i 's/x/y/' {path}", reads=[path], writes=[text_write(path, [changed], after)])
        elif kind < 0.85:  # run a module that writes a verified output, printing a number
            path, output = rng.choice(existing), rng.choice(outputs)
            rows = [f"{rng.randint(0, 9)},{rng.random():.4f}" for _ in range(rng.randint(5, 50))]
            entry.update(text=f"python3 {path} --out {output}", reads=[path, "/usr/lib/python3.12/os.py"],
                         writes=[text_write(output, rows, rows)], observation=f"wrote {len(rows)} rows, "
                                                                              f"score {rng.random():.4f}")
        elif kind < 0.95:  # list a directory
            entry.update(text="ls -la /app/src", stats=["/app/src"], observation="\n".join(existing))
        else:  # remove a scratch file
            entry.update(text="rm -f /app/tmp.txt", deletions=["/app/tmp.txt"])
        commands.append(entry)
    return {
        "instruction": "Fix the modules in /app/src so that running them writes the results to /app/out.",
        "workdir": "/app", "commands": commands,
        "verifier": {"E": outputs, "E_source": "trace"},
        "final": {"files": {path: {"exists": True, "lines": lines_}
                            for path, lines_ in content.items()}},
    }


def median_ms(trajectory: dict, runs: int) -> float:
    compute_credit(trajectory)  # warm caches (compiled regexes)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        compute_credit(trajectory)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--runs", type=int, nargs="+", default=[200, 50, 10])
    args = parser.parse_args()
    print(f"{'commands':>9} {'median ms':>10} {'ms/command':>11} {'growth':>8}")
    previous = None
    for size, runs in zip(args.sizes, args.runs, strict=True):
        elapsed = median_ms(synthetic_trajectory(size), runs)
        growth = f"{elapsed / previous[1] / (size / previous[0]):.2f}x" if previous else "-"
        print(f"{size:>9} {elapsed:>10.2f} {elapsed / size:>11.3f} {growth:>8}")
        previous = (size, elapsed)
    print("growth: (time ratio) / (size ratio) between consecutive sizes; about 1.0x means linear")


if __name__ == "__main__":
    main()
