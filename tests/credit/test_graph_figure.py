"""The dependency-graph figure (`depgpo credit --graph`) stays readable at 40 commands: one row per command, every
label inside the figure and clear of its neighbours, every edge inside, the step factors shown, and the CLI says
where it wrote the file. Rendered for real with matplotlib's Agg canvas, from a 40-command agent log read by the
real offline inference."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from depgpo.cli import main
from depgpo.credit import CreditConfig, compute_credit
from depgpo.credit.explain import short_command
from depgpo.inference import load_trajectories

TASK = "Fix /app/report.py so that running it writes the total of /app/data/sales.csv to /app/out/total.txt."


def _call(number: int, command: str) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [{"id": f"c{number}", "type": "function", "function": {
        "name": "bash", "arguments": json.dumps({"command": command})}}]}


def agent_log(commands: list[str]) -> dict:
    """An OpenAI chat log (one tool call per assistant turn), as agents leave them."""
    messages: list[dict] = [{"role": "user", "content": TASK}]
    for number, command in enumerate(commands):
        messages += [_call(number, command), {"role": "tool", "tool_call_id": f"c{number}", "content": "ok"}]
    return {"messages": messages}


def forty_commands() -> list[str]:
    """What an agent does on such a task: look around, edit, run, check, clean up; 40 commands."""
    looks = ["ls -la /app", "cat /app/report.py", "head -5 /app/data/sales.csv", "wc -l /app/data/sales.csv",
             "grep -n total /app/report.py", "ls /app/out"]
    edits = [f"sed -i 's/row\\[{k}\\]/row[{k + 1}]/' /app/report.py" for k in range(6)]
    runs = ["python3 /app/report.py", "cat /app/out/total.txt"] * 6
    scratch = [f"echo 'try {k}' > /tmp/notes{k}.txt && cat /tmp/notes{k}.txt" for k in range(6)]
    tail = ["awk -F, '{s+=$2} END {print s}' /app/data/sales.csv > /tmp/check.txt",
            "diff /tmp/check.txt /app/out/total.txt", "cat <<'EOF' > /app/out/total.txt\n1234\nEOF",
            "python3 /app/report.py && cat /app/out/total.txt", "rm -f /tmp/notes*.txt",
            "printf '%s\\n' 'a very long command line that goes on and on past what a label of the figure can show'"
            " > /tmp/long.txt", "ls -la /app/out", "tail -1 /app/data/sales.csv", "cat /app/report.py",
            "echo $HOME $PATH"]
    commands = looks + [step for pair in zip(edits, scratch) for step in pair] + runs + tail
    assert len(commands) == 40
    return commands


@pytest.fixture(scope="module")
def log_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("log") / "agent.json"
    path.write_text(json.dumps(agent_log(forty_commands())))
    return path


@pytest.fixture(scope="module")
def result(log_file):
    trajectory = load_trajectories(log_file)[0]
    return compute_credit(trajectory, CreditConfig(), trajectory.get("num_turns"))


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_40_commands_make_a_page_not_a_strip(tmp_path, log_file, result, capsys):
    """At 38 commands the old left-to-right figure was 4101 x 363 px; rows keep it about as tall as wide."""
    assert len(result.commands) == 40 and result.fallback is None  # a graph worth drawing
    assert sum(command.q > 0 for command in result.commands) >= 3
    assert len(result.dependency_edges) >= 10 and result.verifier_edges
    target = tmp_path / "graph.png"
    assert main(["credit", str(log_file), "--graph", str(target)]) == 0
    width, height = png_size(target)
    assert 1000 <= width <= 2400 and 1200 <= height <= 2600, (width, height)
    assert f"written to {target}" in capsys.readouterr().err


def test_every_label_and_edge_lies_inside_the_figure_and_labels_do_not_overlap(result):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.patches import FancyArrowPatch
    from matplotlib.text import Text

    from depgpo.credit.graph_figure import graph_figure

    figure = graph_figure(result, title="forty")
    canvas = FigureCanvasAgg(figure)
    canvas.draw()  # lays the legend out
    renderer = canvas.get_renderer()
    frame = figure.bbox
    texts = [text for text in figure.findobj(Text) if text.get_text()]
    assert len(texts) > 200

    def inside(box) -> bool:
        return box.x0 >= frame.x0 - 0.5 and box.y0 >= frame.y0 - 0.5 and box.x1 <= frame.x1 + 0.5 and \
            box.y1 <= frame.y1 + 0.5

    cut = [text.get_text() for text in texts if not inside(text.get_window_extent(renderer))]
    assert cut == []
    arrows = [patch for patch in figure.axes[0].patches if isinstance(patch, FancyArrowPatch)]
    assert len(arrows) == len(result.dependency_edges) + len(result.information_edges)
    assert all(inside(arrow.get_window_extent(renderer)) for arrow in arrows)
    # Level texts (not the slanted record names) never overlap one another: a row's columns stay apart.
    level = [(text.get_text(), text.get_window_extent(renderer)) for text in texts if text.get_rotation() == 0]
    clashes = [(a, b) for k, (a, box) in enumerate(level) for b, other in level[k + 1:]
               if box.overlaps(other) and box.intersection(box, other).width > 1 and
               box.intersection(box, other).height > 1]
    assert clashes == []


def test_labels_are_whole_commands_and_step_factors_are_shown(result):
    from depgpo.credit.graph_figure import graph_figure

    shown = {text.get_text() for text in graph_figure(result).axes[0].texts}
    for command in result.commands:
        assert f"{command.index:<4} {short_command(command.text, 64)}" in shown
        assert f"{command.q:.2f}" in shown and command.role in shown
    # a one-line command up to 64 characters is shown whole (the long ones and the heredoc end in …)
    whole = [c for c in result.commands if "\n" not in c.text.strip() and len(c.text.strip()) <= 64]
    assert len(whole) >= 35 and all(f"{c.index:<4} {c.text.strip()}" in shown for c in whole)
    for turn in {command.turn for command in result.commands}:
        assert f"t{turn}" in shown and f"{result.step_factors[turn]:.2f}" in shown
    # shell's $ is not TeX: drawn as written
    assert any("$HOME $PATH" in text for text in shown)


def test_edge_lanes_never_share_a_row():
    from depgpo.credit.graph_figure import edge_lanes

    edges = [(0, 5), (1, 3), (3, 4), (2, 9), (5, 6), (0, 1), (4, 8), (6, 9)]
    lanes = edge_lanes(edges)
    for k, (low, high) in enumerate(edges):
        for j in range(k + 1, len(edges)):
            if lanes[j] == lanes[k]:
                other_low, other_high = edges[j]
                assert high < other_low or low > other_high, (edges[k], edges[j])
    assert lanes[edges.index((0, 1))] == 0  # short edges take the inner lanes


def test_the_installed_command_prints_where_it_wrote_the_svg(tmp_path, log_file):
    target = tmp_path / "nested" / "graph.svg"
    run = subprocess.run([sys.executable, "-m", "depgpo", "credit", str(log_file), "--format", "json", "--graph",
                          str(target)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["commands"]  # stdout stays one JSON object per line
    assert run.stderr.strip() == f"depgpo credit: graph of {log_file} written to {target}"
    assert b"<svg" in target.read_bytes()[:400]


def test_a_dense_graph_draws_its_most_telling_edges_and_counts_the_rest(tmp_path):
    """Each `cat` of a file appended to by every earlier command reads them all: ~3,700 edges at 120 commands."""
    from matplotlib.patches import FancyArrowPatch

    from depgpo.credit.graph_figure import MAX_EDGES, graph_figure

    path = tmp_path / "dense.json"
    path.write_text(json.dumps(agent_log([f"echo {k} >> /app/out/total.txt && cat /app/out/total.txt"
                                          for k in range(120)])))
    trajectory = load_trajectories(path)[0]
    result = compute_credit(trajectory, CreditConfig(), trajectory.get("num_turns"))
    assert len(result.dependency_edges) > 10 * MAX_EDGES
    started = time.perf_counter()
    figure = graph_figure(result)
    texts = [text.get_text() for text in figure.axes[0].texts]
    assert len([p for p in figure.axes[0].patches if isinstance(p, FancyArrowPatch)]) == MAX_EDGES
    assert f"{len(result.dependency_edges) - MAX_EDGES} edges of G not drawn (at most {MAX_EDGES}; the JSON " \
           "output has all)" in texts
    figure.savefig(tmp_path / "dense.png")
    assert time.perf_counter() - started < 60
    width, height = png_size(tmp_path / "dense.png")
    assert width <= 2400 and height > 120 * 0.24 * 150
