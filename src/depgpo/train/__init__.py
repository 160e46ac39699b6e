"""Training stages: SFT data from oracle episodes, SFT, four-attempt filtering, RL (CLI in depgpo.stages)."""
