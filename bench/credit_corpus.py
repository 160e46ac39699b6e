"""Static credit over a corpus of real public agent trajectories: exceptions (must be 0), fallback rate, credited
fractions, ms per trajectory, and the information edges each salience rule removes (docs/credit-decisions.md).

    .venv/bin/python bench/credit_corpus.py assemble --mirror DIR [--mirror DIR ...] --out CORPUS
    .venv/bin/python bench/credit_corpus.py run CORPUS [--json OUT.json] [--examples N]

`assemble` copies the trajectories of SOURCES, at their pinned commits, out of git checkouts or bare clones of
their repositories (`git clone https://github.com/OWNER/NAME`) into CORPUS, a directory outside the repository
(under /tmp, say): the logs belong to their authors, some show benchmark files with their canary, and none may be
committed here. `run` reads CORPUS the way `depgpo credit --static` reads files: every file or trial directory
through `load_trajectories`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from depgpo.credit import CreditConfig, compute_credit  # noqa: E402
from depgpo.credit.read_credit import candidate_edges  # noqa: E402
from depgpo.credit.records import TrajectoryError, parse_episode  # noqa: E402
from depgpo.credit.salience import INCIDENTAL_RULES, revealing_tokens, salient_tokens  # noqa: E402
from depgpo.inference import load_trajectories, trajectory_sources  # noqa: E402
from depgpo.inference.infer import INFERENCE_FAILED  # noqa: E402


@dataclass(frozen=True)
class Source:
    name: str  # the directory under CORPUS
    repository: str  # github owner/name
    commit: str
    pattern: str  # files to copy, as a regex over the repository's paths
    agent: str
    log_format: str
    licence: str


SOURCES = (
    Source("tb1-mini-swe-agent-claude-sonnet-4", "laude-institute/terminal-bench-leaderboard",
           "8e1925a397d7ed859c027cc19b3a3d90c16ef8df",
           r"results/terminal-bench-core@0\.1\.1/20250825_swe-agent-mini_claude-4-sonnet/[^/]+/[^/]+/[^/]+/"
           r"(?:results\.json|sessions/agent\.log)$",
           "mini-swe-agent 1.7 + Claude Sonnet 4 on Terminal-Bench 1 (core 0.1.1)",
           "Terminal-Bench 1 trial directories (tmux pane log + results.json)", "none stated"),
    Source("swebench-mini-swe-agent-gemini-3-pro", "gruckion/mini-swe-agent",
           "d12a71affd95403b036b2bdbd827349b77bfffb9",
           r"swebench_results/20251118_gemini-3-pro-74pct/trajs/[^/]+/[^/]+\.traj\.json$",
           "mini-swe-agent 1.15 + Gemini 3 Pro on SWE-bench Verified (bash only)",
           "mini-swe-agent .traj.json (chat messages, one ```bash block per reply)", "MIT (repository)"),
    Source("swebench-openhands-claude-3.5-sonnet", "gsmoon97/swe-agent-eval",
           "2b8d930540ddaf0ae1290e718f1bd0741c70005e",
           r"evaluation/python/verified/20250329_OpenHands_Claude-3\.5-Sonnet\(Oct\)/trajs/[^/]+/[^/]+\.json$",
           "OpenHands CodeAct + Claude 3.5 Sonnet on SWE-bench Verified",
           "OpenHands completion log (OpenAI tool calls: execute_bash, str_replace_editor)", "none stated"),
)


# ---- assemble ----------------------------------------------------------------------------------------------------

def _git(repo: Path, *args: str) -> bytes:
    git_dir = repo / ".git" if (repo / ".git").exists() else repo
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True).stdout


def assemble(mirrors: list[Path], out: Path) -> dict[str, int]:
    counts = {}
    for source in SOURCES:
        repo = next((m for m in mirrors if source.repository.replace("/", "+") in str(m)
                     or str(m).rstrip("/").endswith(source.repository.split("/")[1])), None)
        if repo is None:
            print(f"{source.name}: no clone of {source.repository} among --mirror; skipped", file=sys.stderr)
            continue
        revision = source.commit
        try:
            _git(repo, "cat-file", "-e", f"{revision}^{{commit}}")
        except subprocess.CalledProcessError:
            print(f"{source.name}: {source.repository} lacks commit {revision[:12]} (a shallow clone?); using HEAD, "
                  "so the counts may differ from docs/benchmarks.md", file=sys.stderr)
            revision = "HEAD"
        paths = [p for p in _git(repo, "ls-tree", "-r", "--name-only", revision).decode().splitlines()
                 if re.search(source.pattern, p)]
        logs = {p.removesuffix("sessions/agent.log") for p in paths if p.endswith("sessions/agent.log")}
        # A trial whose agent never started has a verdict but no log: not a trajectory.
        paths = [p for p in paths if not p.endswith("results.json") or p.removesuffix("results.json") in logs
                 or not logs]
        for path in paths:
            target = out / source.name / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(_git(repo, "show", f"{revision}:{path}"))
        counts[source.name] = len(paths)
    return counts


# ---- run ---------------------------------------------------------------------------------------------------------

def corpus_items(corpus: Path) -> list[tuple[str, Path]]:
    """(source name, file or trial directory) of every trajectory log under CORPUS, sorted."""
    return [(source_dir.name, item) for source_dir in sorted(p for p in corpus.iterdir() if p.is_dir())
            for item in trajectory_sources(source_dir)]


def rule_configs() -> dict[str, CreditConfig]:
    """The default, each incidental rule left out, none of them, and prefer_computed off."""
    every = tuple(INCIDENTAL_RULES)
    configs = {"default": CreditConfig(), "no incidental rule": CreditConfig(incidental_rules=())}
    configs |= {f"without {name}": CreditConfig(incidental_rules=tuple(r for r in every if r != name))
                for name in every}
    configs["prefer_computed=false"] = CreditConfig(prefer_computed=False)
    return configs


def run(corpus: Path, examples: int) -> dict:
    configs = rule_configs()
    per_source: dict[str, Counter] = {}
    load_errors, exceptions, timings, fractions = [], [], [], []
    fallbacks: Counter = Counter()
    edges: dict[str, set] = {name: set() for name in configs}
    candidates: dict[str, set] = {name: set() for name in configs}
    loaded: list[tuple[str, dict]] = []
    for source, item in corpus_items(corpus):
        counts = per_source.setdefault(source, Counter())
        started = time.perf_counter()
        try:
            trajectories = load_trajectories(item, static=True)
        except ValueError as error:
            load_errors.append(f"{item}: {error}")
            counts["unreadable"] += 1
            continue
        except Exception as error:  # noqa: BLE001 - counted: must be 0
            exceptions.append(f"{item}: load: {type(error).__name__}: {error}")
            continue
        load_s = (time.perf_counter() - started) / max(len(trajectories), 1)
        for position, trajectory in enumerate(trajectories):
            key = f"{item}[{position}]"
            exceptions += [f"{key}: {e}" for e in trajectory.get("errors", []) if INFERENCE_FAILED in e]
            counts["trajectories"] += 1
            counts["commands"] += len(trajectory["commands"])
            for name, config in configs.items():
                started = time.perf_counter()
                try:
                    result = compute_credit(trajectory, config, trajectory.get("num_turns"))
                except TrajectoryError as error:
                    load_errors.append(f"{key}: {error}")
                    break
                except Exception as error:  # noqa: BLE001 - counted: must be 0
                    exceptions.append(f"{key}: credit ({name}): {type(error).__name__}: {error}")
                    break
                edges[name] |= {(key, r, c) for r, c in result.information_edges}
                candidates[name] |= {(key, r, c) for r, c in
                                     candidate_edges(parse_episode(trajectory, config, trajectory.get("num_turns")),
                                                     config)}
                if name != "default":
                    continue
                timings.append(1000 * (load_s + time.perf_counter() - started))
                fallbacks[(result.fallback or "none").split(":")[0]] += 1
                counts["usable"] += result.fallback is None
                if result.fallback is None and result.commands:
                    fractions.append(sum(c.q > 0 for c in result.commands) / len(result.commands))
            loaded.append((key, trajectory))
    return {"corpus": str(corpus), "sources": {k: dict(v) for k, v in per_source.items()},
            "trajectories": len(timings), "exceptions": exceptions, "unreadable": load_errors,
            "fallbacks": dict(fallbacks), "credited_fraction": _spread(fractions),
            "ms_per_trajectory": {"median": statistics.median(timings), "p99": _quantile(timings, 0.99),
                                  "max": max(timings)},
            "information_edges": _edge_report(edges, dict(loaded), examples),
            "candidate_edges": _edge_report(candidates, dict(loaded), examples)}


def _edge_report(edges: dict[str, set], trajectories: dict[str, dict], examples: int) -> dict:
    default = edges["default"]
    report = {"default": len(default)}
    for name, found in edges.items():
        if name == "default":
            continue
        removed, added = found - default, default - found  # what the default removes and adds relative to `name`
        report[name] = {"edges": len(found), "default removes": len(removed), "default adds": len(added),
                        "examples removed": [_example(trajectories, edge) for edge in sorted(removed)[:examples]],
                        "examples added": [_example(trajectories, edge) for edge in sorted(added)[:examples]]}
    return report


def _example(trajectories: dict[str, dict], edge: tuple[str, int, int]) -> dict:
    key, r, c = edge
    commands = trajectories[key]["commands"]
    source, user = commands[r], commands[c]
    shown = revealing_tokens(source["observation"], source["text"], CreditConfig(incidental_rules=()))
    used = salient_tokens(user["text"], CreditConfig())
    return {"trajectory": key, "source": source["text"][:120], "user": user["text"][:120],
            "tokens": sorted(shown & used)[:6]}


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _spread(values: list[float]) -> dict:
    return {"n": len(values), "mean": statistics.fmean(values) if values else None,
            "median": statistics.median(values) if values else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    making = sub.add_parser("assemble")
    making.add_argument("--mirror", type=Path, action="append", required=True)
    making.add_argument("--out", type=Path, required=True)
    running = sub.add_parser("run")
    running.add_argument("corpus", type=Path)
    running.add_argument("--json", type=Path)
    running.add_argument("--examples", type=int, default=3)
    args = parser.parse_args()
    if args.verb == "assemble":
        print(json.dumps(assemble(args.mirror, args.out), indent=1))
        return
    report = run(args.corpus, args.examples)
    report["sources_described"] = [dataclasses.asdict(s) for s in SOURCES]
    text = json.dumps(report, indent=1, default=str)
    if args.json:
        args.json.write_text(text)
    summary = {k: report[k] for k in ("sources", "trajectories", "fallbacks", "credited_fraction",
                                      "ms_per_trajectory")}
    summary["exceptions"] = len(report["exceptions"])
    summary["unreadable"] = len(report["unreadable"])
    for kind in ("information_edges", "candidate_edges"):
        summary[kind] = {k: v if isinstance(v, int) else {x: v[x] for x in ("edges", "default removes", "default adds")}
                         for k, v in report[kind].items()}
    print(json.dumps(summary, indent=1))
    sys.exit(1 if report["exceptions"] else 0)


if __name__ == "__main__":
    main()
