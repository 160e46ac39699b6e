#!/usr/bin/env bash
# Set up a fresh Debian 12 machine for depgpo: system tools for the traced sandbox, then a virtualenv in .venv.
# Idempotent: rerunning it only installs what is missing.
#   bash envs/setup.sh        what the pipeline needs
#   bash envs/setup.sh test   also what the tests need: a real single-node Slurm (with accounting) for tests/workflow/test_slurm.py,
#                             podman and mmdebstrap for the image backend's tests (tests/env/test_image_backend.py,
#                             tests/env/test_harbor_shapes.py)
set -euo pipefail
cd "$(dirname "$0")/.."

# strace + bubblewrap: the sandbox and its tracer; python3-pytest: verifiers run pytest inside episodes, offline;
# util-linux provides unshare/setpriv/prlimit; iproute2 gives `ip` inside tasks; curl for tasks that use it locally.
DEBIAN_PACKAGES="strace bubblewrap util-linux python3 python3-pytest iproute2 procps curl"
if [ "${1:-}" = "test" ]; then
  # slurmctld/slurmd/slurmdbd + MariaDB (sacct needs accounting) + munge: the test cluster of tests/helpers/slurm_cluster.py
  DEBIAN_PACKAGES="$DEBIAN_PACKAGES munge slurmctld slurmd slurm-client slurmdbd mariadb-server"
  # podman builds and unpacks task images (agent.environment.backend=image); mmdebstrap bootstraps their bases from
  # the Debian archive where no registry is reachable (src/depgpo/env/base_images.py)
  DEBIAN_PACKAGES="$DEBIAN_PACKAGES podman mmdebstrap"
fi
missing=$(for p in $DEBIAN_PACKAGES; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
if [ -n "$missing" ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# torch first and pinned: a bare `torch` requirement would pull a multi-GB CUDA build.
.venv/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0" 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[verl,workflow,test]" 2>&1 \
  | grep -v "^WARNING: Location" || true
.venv/bin/python -c "import depgpo, torch, verl.trainer.ppo.core_algos, verl.experimental.agent_loop.agent_loop" \
  || { echo "envs/setup.sh: the virtualenv is incomplete (see pip output above)" >&2; exit 1; }
