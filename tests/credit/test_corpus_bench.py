"""bench/credit_corpus.py on a corpus of this project's fixtures in the real shapes (the public corpus stays out of
the repository): its walk, its counts, and the edges each salience rule removes."""

from __future__ import annotations

import json
import shutil
import sys

from tests.helpers import REPO

sys.path.insert(0, str(REPO / "bench"))
import credit_corpus  # noqa: E402

OFFLINE = REPO / "tests" / "data" / "offline"


def test_the_bench_reads_every_shape_and_counts_what_the_rules_remove(tmp_path):
    corpus = tmp_path / "corpus"
    shutil.copytree(OFFLINE / "harbor", corpus / "harbor")
    (corpus / "chat").mkdir()
    shutil.copy(OFFLINE / "chat_batch.jsonl", corpus / "chat")
    (corpus / "chat" / "ls_clock.json").write_text(json.dumps([
        {"role": "user", "content": "Write a pattern for the error lines of /app/log.txt to /app/pattern.txt"},
        {"role": "assistant", "tool_calls": [{"id": "1", "function": {"name": "bash", "arguments": json.dumps(
            {"command": "ls -la /app"})}}]},
        {"role": "tool", "tool_call_id": "1", "content": "-rw-r--r-- 1 root root 310 Dec  1 08:05 log.txt\n"},
        {"role": "assistant", "tool_calls": [{"id": "2", "function": {"name": "bash", "arguments": json.dumps(
            {"command": "echo '^05 ERROR' > /app/pattern.txt"})}}]},
        {"role": "tool", "tool_call_id": "2", "content": ""}]))
    report = credit_corpus.run(corpus, examples=1)
    assert report["exceptions"] == []
    # two ATIF trials and one of chat messages (TMax's shape); the malformed trial is unreadable
    assert report["sources"]["harbor"]["trajectories"] == 3 and report["sources"]["harbor"]["unreadable"] == 1
    assert report["sources"]["chat"]["trajectories"] == 4
    assert report["trajectories"] == 7 and sum(report["fallbacks"].values()) == 7
    assert report["ms_per_trajectory"]["median"] > 0
    removed = report["candidate_edges"]["without ls_long"]
    assert removed["default removes"] == 1  # ls's 05 no longer supports the pattern
    assert removed["examples removed"][0]["source"] == "ls -la /app" and removed["examples removed"][0]["tokens"] == [
        "05"]
