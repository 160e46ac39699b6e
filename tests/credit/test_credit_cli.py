"""`depgpo credit` through its `run(args)`: table, JSON, the graph figure, and one-line errors on bad input."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from depgpo.cli import main
from tests.helpers.credit_examples import BN_FIT_MODIFY, CONSTRAINTS_SCHEDULING, COUNT_DATASET_TOKENS


def credit_cli(*argv: object) -> int:
    """`depgpo credit ARGV` as the `depgpo` command parses it, in this process."""
    return main(["credit", *map(str, argv)])


def saved(tmp_path: Path, name: str, trajectory: object) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(trajectory))
    return path


def test_table_lists_every_command_with_role_and_credit(tmp_path, capsys):
    assert credit_cli(saved(tmp_path, "count.json", COUNT_DATASET_TOKENS.trajectory)) == 0
    out = capsys.readouterr().out
    assert "supporting read" in out and "read with no downstream use" in out
    row = next(line for line in out.splitlines() if "python3 <<'EOF'" in line)
    assert row.split()[0] == "17" and row.endswith("0.50")
    assert "t17=6.67" in out and "t18=13.33" in out
    assert "fallback: none" in out and "positive_read_commands=1" in out


def test_json_gives_one_object_per_trajectory(tmp_path, capsys):
    files = [saved(tmp_path, "bn.json", BN_FIT_MODIFY.trajectory),
             saved(tmp_path, "ics.json", CONSTRAINTS_SCHEDULING.trajectory)]
    assert credit_cli(*files, "--format", "json") == 0
    objects = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [entry["source"] for entry in objects] == [str(path) for path in files]
    assert [(c["turn"], c["role"], c["credit"]) for c in objects[0]["commands"]] == [
        (2, "no recorded dependency", 0.0), (3, "indirect write", 1.0), (4, "direct write", 1.0)]
    assert objects[0]["step_factors"] == [0.0, 0.0, 0.0, 2.5, 2.5]
    assert objects[0]["fallback"] is None and objects[0]["diagnostics"]["positive_writes_with_indirect"] == 1
    assert objects[1]["graph"]["dependency_edges"] == [[0, 1], [0, 2], [3, 4]]


def test_beta_and_variant_options(tmp_path, capsys):
    path = saved(tmp_path, "count.json", COUNT_DATASET_TOKENS.trajectory)
    for options, expected in ((["--beta", "0.25"], 0.25), (["--variant", "no_read_credit"], 0.0)):
        assert credit_cli(path, "--format", "json", *options) == 0
        assert json.loads(capsys.readouterr().out)["commands"][0]["credit"] == expected


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_graph_is_drawn(tmp_path, suffix):
    target = tmp_path / f"graph{suffix}"
    assert credit_cli(saved(tmp_path, "ics.json", CONSTRAINTS_SCHEDULING.trajectory), "--graph", target) == 0
    head = target.read_bytes()[:200]
    assert head.startswith(b"\x89PNG") if suffix == ".png" else b"<svg" in target.read_bytes()
    assert target.stat().st_size > 1000


def test_several_trajectories_get_numbered_graphs(tmp_path):
    files = [saved(tmp_path, f"{example.name}.json", example.trajectory)
             for example in (COUNT_DATASET_TOKENS, BN_FIT_MODIFY)]
    assert credit_cli(*files, "--graph", tmp_path / "g.png") == 0
    assert sorted(path.name for path in tmp_path.glob("g-*.png")) == ["g-1.png", "g-2.png"]


def test_bad_input_is_one_line_per_file_and_the_rest_is_processed(tmp_path, capsys):
    no_turn = json.loads(json.dumps(COUNT_DATASET_TOKENS.trajectory))
    del no_turn["commands"][1]["turn"]
    (tmp_path / "broken.json").write_text("{not json")
    files = [tmp_path / "absent.json", tmp_path / "broken.json", saved(tmp_path, "no_turn.json", no_turn),
             saved(tmp_path, "good.json", BN_FIT_MODIFY.trajectory)]
    assert credit_cli(*files, "--format", "json") == 2
    captured = capsys.readouterr()
    errors = captured.err.splitlines()
    assert len(errors) == 3
    assert "absent.json" in errors[0]
    assert "broken.json" in errors[1] and "JSON" in errors[1]
    assert "no_turn.json" in errors[2] and "commands[1].turn" in errors[2]
    assert json.loads(captured.out)["source"] == str(files[3])


def test_unknown_graph_format_is_refused(tmp_path, capsys):
    path = saved(tmp_path, "count.json", COUNT_DATASET_TOKENS.trajectory)
    assert credit_cli(path, "--graph", tmp_path / "graph.pdf") == 2
    assert "graph.pdf" in capsys.readouterr().err


def test_a_mixed_static_batch_prints_the_good_ones_and_exits_2(tmp_path, capsys):
    """A real log's `printf '%d'` without its argument once raised TypeError in the static parser and the whole
    batch printed nothing; now each trajectory stands on its own."""
    def chat(command: str) -> dict:
        return {"messages": [
            {"role": "user", "content": "Write the count to /app/count.txt"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": json.dumps(
                    {"command": command})}}]},
            {"role": "tool", "tool_call_id": "c1", "content": ""}]}

    batch = tmp_path / "batch.jsonl"
    batch.write_text("\n".join(json.dumps(chat(text)) for text in (
        "printf '%d items\\n' > /app/count.txt", "printf '%5.2f|%x|%99999999d' 1.5 > /app/count.txt",
        "echo 3 > /app/count.txt")) + "\n")
    (tmp_path / "unreadable.json").write_bytes(b"\xff\xfe not text")
    (tmp_path / "malformed.json").write_text('{"role": 3}')
    files = [batch, tmp_path / "unreadable.json", tmp_path / "malformed.json"]
    assert credit_cli(*files, "--static", "--format", "json") == 2
    captured = capsys.readouterr()
    objects = [json.loads(line) for line in captured.out.splitlines()]
    assert [entry["source"] for entry in objects] == [f"{batch}[{k}]" for k in range(3)]
    assert [entry["commands"][0]["role"] for entry in objects] == ["direct write"] * 3
    errors = captured.err.splitlines()
    assert len(errors) == 2 and "unreadable.json" in errors[0] and "malformed.json" in errors[1]


def test_every_knob_is_a_key_value_override_and_is_reported(tmp_path, capsys):
    path = saved(tmp_path, "count.json", COUNT_DATASET_TOKENS.trajectory)
    assert credit_cli(path, "--format", "json", "beta=0.25", "credit.reveal_once=false",
                      "incidental_rules=[date,clock_time]", "factor_floor=0.1") == 0
    entry = json.loads(capsys.readouterr().out)
    assert entry["commands"][0]["credit"] == 0.25
    assert entry["config"]["reveal_once"] is False and entry["config"]["factor_floor"] == 0.1
    assert entry["config"]["incidental_rules"] == ["date", "clock_time"]
    assert credit_cli(path, "prefer_computed=false") == 0
    header = capsys.readouterr().out.split("\n\n")[0]
    assert header.startswith("credit config: beta=0.5 ") and "prefer_computed=false" in header


@pytest.mark.parametrize(("override", "message"), [
    ("beta=high", "credit.beta: expected int or float, got 'high'"),
    ("reveal=false", "unknown credit config keys ['reveal']"),
    ("incidental_rules=[clock]", "unknown incidental_rules ['clock']; valid: version_banner"),
    ("beta=2", "beta must lie in [0, 1]"),
])
def test_a_bad_override_is_one_line_naming_the_key(tmp_path, capsys, override, message):
    assert credit_cli(saved(tmp_path, "count.json", COUNT_DATASET_TOKENS.trajectory), override) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1


def test_a_closed_pipe_ends_quietly(tmp_path):
    files = [saved(tmp_path, f"t{k}.json", COUNT_DATASET_TOKENS.trajectory) for k in range(30)]
    result = subprocess.run(f"{shlex.quote(sys.executable)} -m depgpo credit {' '.join(map(str, files))} | head -1",
                            shell=True, capture_output=True, text=True, timeout=120)
    assert result.stdout.startswith("credit config:")
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr, result.stderr
