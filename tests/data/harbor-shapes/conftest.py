# The fixture tasks' own test files check a sandbox's /app, not this project: never collect them here.
collect_ignore_glob = ["*"]
