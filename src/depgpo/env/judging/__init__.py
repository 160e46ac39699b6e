"""The verifier as its own process tree: its run, E and the reward, the tampering rules read from its trace."""
