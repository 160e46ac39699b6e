"""Offline inference of trajectories: what each shell command read and wrote, from its text alone.

`depgpo credit --static`, the offline log loaders and the SFT importer use this when no sandbox trace exists.
Each command is parsed with tree-sitter-bash and walked by a small shell simulator that keeps what a trace would
have told us: the working directory, simple variables (`X=/app/out`), and the content of every file whose
content the text makes known (an `echo`, `printf` or heredoc written literally). Files written in ways the text
cannot reveal (`sed -i`, `python3 x.py > out`) get `content_after = None` and the hash `unknown:<command index>`,
so the credit core falls back to record level.

What static mode cannot see, and therefore leaves out: effects inside programs beyond the literal paths of a
Python script whose text is known (`scripts`), globs, variables set at run time, which branch of an `if` or
`||` ran (every branch counts as run), and whether a command failed. A command that does not parse (unclosed
quote, unterminated heredoc) gets no records at all.

The modules, from the bottom up:
  words       shell words, quoting and expansion; what echo and printf print
  commands    the command table: which program reads, inspects or runs which operands
  filesystem  what the simulation knows of each path, and one command's file records
  handlers    what each program does to the session
  simulator   the ShellSimulator, walking the tree-sitter tree
  infer       one command's records, or a whole trajectory's
  scripts     the file effects of Python scripts and Codex patches, from their text
  tool_calls  non-shell tools (file editors, write / edit / read tools) as shell equivalents; the tool tally
  agent_logs  fenced-action logs (mini-swe-agent), Terminal-Bench 1 trial directories, file-editor tool calls
  harbor_logs Harbor trial directories and ATIF trajectories (Terminal-Bench 2.0 runs)
  other_logs  OpenHands event streams and Gemini CLI sessions
  task_text   E from the task text: absolute paths and ports, and relative file names at the working directory
  reading     what a reading understood and what not, per trajectory
  formats     trajectories from files: trajectory.json, chat messages, Terminus-2 logs, and the others above
E, the verifier's records, comes from `depgpo.env.judging.verifier_source` (and `task_text` for a task's text).
"""

from depgpo.inference.formats import from_conversation, load_trajectories, num_turns, trajectory_sources
from depgpo.inference.infer import infer_command_effects, infer_trajectory
from depgpo.inference.simulator import DEFAULT_WORKDIR, ShellSimulator

__all__ = ["DEFAULT_WORKDIR", "ShellSimulator", "from_conversation", "infer_command_effects", "infer_trajectory",
           "load_trajectories", "num_turns", "trajectory_sources"]
