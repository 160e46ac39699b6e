"""What the verifier's image view (env/sandbox/judge_view.py) costs an episode, against the full view, side by side.

    .venv/bin/python bench/judge_view_cost.py [--episodes 12] [--task harbor|generated]

Each pair runs one whole episode (set-up, five commands of the tiny tasks' kind, the verifier) in the image view
(the default) and one in the full view, in alternating order, one at a time, so that the machine's load hits both
alike. Per view it prints the medians of the episode's set-up (which makes the view's directories and seeds its
homes), its verifier step (which in the image view skips the walk of the agent's upper layers) and the whole
episode, in ms; the last line is `added N ms (ratio R)`: the median of the per-pair differences of whole episodes
and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from depgpo.env.episode import Episode, EpisodeConfig  # noqa: E402
from depgpo.tasks import load_task  # noqa: E402
from tests.helpers.harbor_builder import make_harbor_task  # noqa: E402

COMMANDS = ["mkdir -p /app/out && cd /app/out", "printf 'a\\nb\\n' > notes.txt", "cat notes.txt | wc -l",
            "sed -i 's/a/x/' notes.txt", "python3 -c 'print(open(\"/app/out/notes.txt\").read())'"]
TEST = "def test_notes():\n    assert open('/app/out/notes.txt').read() == 'x\\nb\\n'\n"


def one_episode(task, view: str) -> dict[str, float]:
    start = time.perf_counter()
    with Episode(task, EpisodeConfig(command_timeout_s=30, verifier_view=view)) as ep:
        for command in COMMANDS:
            ep.run_command(command)
        verifier = ep.verify()
    total = time.perf_counter() - start
    assert verifier["reward"] == 1.0 and verifier["view"] == view, verifier
    return {"setup": ep.timings["setup_s"] * 1e3, "verifier": ep.timings["verifier_s"] * 1e3, "episode": total * 1e3}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=12, help="pairs of episodes")
    args = ap.parse_args()
    task = load_task(make_harbor_task(Path(tempfile.mkdtemp(prefix="bench-view-")), "view", instruction="x",
                                      test_py=TEST, verifier_timeout=30))
    one_episode(task, "image")  # warm caches outside the timing
    runs: dict[str, list[dict[str, float]]] = {"image": [], "full": []}
    for i in range(args.episodes):
        for view in (("image", "full") if i % 2 == 0 else ("full", "image")):
            runs[view].append(one_episode(task, view))
    for view, rows in runs.items():
        medians = {key: statistics.median(row[key] for row in rows) for key in rows[0]}
        print(f"{view:6s} " + "  ".join(f"{key} {value:7.1f} ms" for key, value in medians.items()))
    added = statistics.median(a["episode"] - b["episode"] for a, b in zip(runs["image"], runs["full"]))
    ratio = statistics.median(r["episode"] for r in runs["image"]) / statistics.median(r["episode"] for r in runs["full"])
    print(f"added {added:.1f} ms (ratio {ratio:.2f})")


if __name__ == "__main__":
    main()
