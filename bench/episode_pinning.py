"""Episodes per second, pinned (the default: env/sandbox/cpu_slots.py) against unpinned, side by side in one run.

    .venv/bin/python bench/episode_pinning.py [--episodes 8] [--workers 2] [--rounds 3]

Each round runs `--episodes` whole episodes (set-up, five commands of the tiny tasks' kind, the verifier) of one
Harbor task, `--workers` at a time in threads as the agent loop runs them, once pinned and once with
`SandboxLimits(pin=False)`; the two alternate round by round so that the machine's load hits both alike. The last
line is `ratio N.NN`: pinned over unpinned episodes per second (medians over rounds).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from depgpo.env.episode import Episode, EpisodeConfig  # noqa: E402
from depgpo.env.sandbox.layout import SandboxLimits  # noqa: E402
from depgpo.tasks import load_task  # noqa: E402
from tests.helpers.harbor_builder import make_harbor_task  # noqa: E402

COMMANDS = ["mkdir -p /app/out && cd /app/out", "printf 'a\\nb\\n' > notes.txt", "cat notes.txt | wc -l",
            "sed -i 's/a/x/' notes.txt", "python3 -c 'print(open(\"/app/out/notes.txt\").read())'"]
TEST = "def test_notes():\n    assert open('/app/out/notes.txt').read() == 'x\\nb\\n'\n"


def one_episode(task, pin: bool) -> float:
    with Episode(task, EpisodeConfig(command_timeout_s=30, limits=SandboxLimits(pin=pin))) as ep:
        for command in COMMANDS:
            ep.run_command(command)
        reward = ep.verify()["reward"]
    assert reward == 1.0, ep.verifier
    return reward


def episodes_per_s(task, pin: bool, episodes: int, workers: int) -> float:
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda _: one_episode(task, pin), range(episodes)))
    return episodes / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    task = load_task(make_harbor_task(Path(tempfile.mkdtemp(prefix="bench-pin-")), "pin", instruction="x",
                                      test_py=TEST, verifier_timeout=30))
    one_episode(task, True)  # warm caches (uv, the wheel cache) outside the timing
    rates: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.rounds):
        for pin in (True, False):
            rates[pin].append(episodes_per_s(task, pin, args.episodes, args.workers))
    pinned, floating = statistics.median(rates[True]), statistics.median(rates[False])
    print(f"{args.episodes} episodes a round, {args.workers} at a time, {args.rounds} rounds, medians")
    print(f"  pinned   {pinned:6.2f} episodes/s  {[round(r, 2) for r in rates[True]]}")
    print(f"  unpinned {floating:6.2f} episodes/s  {[round(r, 2) for r in rates[False]]}")
    print(f"ratio {pinned / floating:.2f}")


if __name__ == "__main__":
    main()
