"""DepGPO: dependency-aware credit assignment for LLM terminal agents.

Data flows one way through the subpackages:
tasks -> env (sandboxed, traced episode: trajectory.json) -> credit -> algos (per-token advantages, losses)
-> train -> evaluate -> report.
"""

__version__ = "0.1.0"
