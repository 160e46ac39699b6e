#!/bin/bash
# Fetch uv, run the checks under a pinned pytest, and turn the outcome into the reward (1 = every check passed).
apt-get update && apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh
source "$HOME/.local/bin/env"

if [ "$PWD" = "/" ]; then
    echo "the image sets no WORKDIR; refusing to run from /" >&2
    exit 1
fi

mkdir -p /logs/verifier
uvx -p 3.13 -w pytest==8.4.1 pytest /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
