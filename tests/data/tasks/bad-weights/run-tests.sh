#!/bin/bash
# Bring uv and a pinned pytest, then run the checks; the harness reads pytest's -rA summary.
curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh
source "$HOME/.local/bin/env"
uv venv .tests-venv
source .tests-venv/bin/activate
uv pip install pytest==8.4.1
uv run pytest "$TEST_DIR/test_outputs.py" -rA
