"""Helpers shared by the tests, and the paths they use."""

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
DATA = TESTS / "data"  # fixtures written for these tests (task directories, offline trajectories)
