"""Replaying recorded command sequences in their task's sandbox, and the counterfactuals that check the credit.

DepGPO claims that a trajectory's outcome depends on the commands it credits. A sandbox that replays commands from
the task's initial state checks that claim against ground truth: remove a command, replay the rest, and see whether
the verifier's verdict changes (docs/replay.md).

The modules, from the bottom up:
  source          a SOURCE (our trajectory.json, a command list, any agent log the inference adapters read) as the
                  commands to replay, the logged reward and observations, and what the log holds that a replay
                  cannot reproduce (keystrokes into a running program, waits, tool calls that are not shell)
  run             one replay through the Episode machinery, with its fidelity check against the log
  perturb         generated tasks redrawn with other values for what a credited read revealed
  counterfactual  the plan (as is, without each command, credited only, perturbed reads), run side by side
  cli             `depgpo replay` and `depgpo counterfactual`
"""
