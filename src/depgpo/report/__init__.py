"""`depgpo report`: the paper's tables and figures from a results tree (docs/pipeline.md).

load.py reads the tree into pandas frames, tables.py and figures.py build one output each, and cli.py writes
them with an index.md of what was produced and what was missing. Nothing is imported here, so that building the
`depgpo` parser stays cheap.
"""
