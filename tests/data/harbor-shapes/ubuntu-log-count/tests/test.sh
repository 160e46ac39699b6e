#!/bin/bash
# No Python in ubuntu:24.04: the check is the shell's own.
if [ "$(cat /app/errors.txt 2>/dev/null)" = "$(grep -c ERROR /app/server.log)" ] && [ -f /etc/os-release ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
