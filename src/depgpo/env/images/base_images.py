"""Base images from distribution packages, for building task images where no registry is reachable.

A task's Dockerfile starts `FROM python:3.13-slim`; a cluster pulls that image, but CI and air-gapped machines reach
only the Debian archive and PyPI. There we bootstrap a root with `mmdebstrap` from the Debian archive and import it
into the container runtime's store under the name the FROM line resolves to, so `podman build` runs the Dockerfile
unchanged on top of it. What such a base is, and how it differs from the official image, is a `BaseRecipe`:

    debian:12, debian:bookworm-slim      Debian's own minbase of that release (the official image is the same kind)
    python:3.13-slim(-trixie|-bookworm)  the Debian release whose python3 is that version, with pip, `python`, and
                                         no EXTERNALLY-MANAGED marker, as in the official image (whose Python is
                                         built from source into /usr/local: declared as a difference)
    ubuntu:24.04                         approximated by the Debian release of its time: no Ubuntu archive key is
                                         among Debian's packages, so the Ubuntu archive cannot be verified (declared)

Each recipe has a key (a hash of what it installs); the imported image carries it as a label, so a changed recipe
is rebuilt and an image pulled from a registry is never mistaken for one of ours.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from depgpo.env.images.cache_locks import base_lock, locked

RECIPE_LABEL = "org.depgpo.base-recipe"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBIAN_RELEASES = {"11": "bullseye", "12": "bookworm", "13": "trixie"}
DEBIAN_PYTHON = {"bullseye": "3.9", "bookworm": "3.11", "trixie": "3.13"}  # each release's python3
LATEST_DEBIAN = "trixie"          # debian:latest and the python images' default release since mid-2025
# Ubuntu release -> the Debian release it was cut from (glibc, gcc and Python close to it).
UBUNTU_AS_DEBIAN = {"20.04": "bullseye", "22.04": "bookworm", "24.04": "trixie", "24.10": "trixie",
                    "25.04": "trixie", "latest": "trixie", "noble": "trixie", "jammy": "bookworm"}
ENV_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What every official python image has beyond the slim Debian minbase.
# The official images ship Python's headers too (a task's pip install may compile a C extension).
PYTHON_PACKAGES = ("python3", "python3-pip", "python3-venv", "python3-dev", "python-is-python3", "ca-certificates",
                   "netbase")
# The non-slim python images are built on buildpack-deps: compilers, git, curl.
BUILDPACK_PACKAGES = ("build-essential", "git", "curl", "wget", "procps", "libssl-dev", "zlib1g-dev")
# Terminal-Bench-1's base images add tmux and asciinema (the harness's recorder) to a slim image.
TB1_PACKAGES = ("tmux", "asciinema")
_SLIM_EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*")
_PYTHON_TAG = re.compile(r"(?P<version>3\.\d+)(?:\.\d+)?(?P<variants>(?:-[a-z0-9.]+)*)")


class BaseImageError(RuntimeError):
    """A base image that can be neither found nor bootstrapped, with what to do about it."""


@dataclass(frozen=True)
class BaseRecipe:
    reference: str                     # the fully qualified name FROM resolves to; the imported image's tag
    release: str                       # the Debian release bootstrapped
    packages: tuple[str, ...] = ()     # beyond minbase
    env: tuple[tuple[str, str], ...] = (("PATH", ENV_PATH),)
    python_image: bool = False         # `python` and pip as the official python images have them
    slim: bool = True                  # docs, man pages and locales left out, as in the -slim images
    differences: tuple[str, ...] = ()  # how it differs from the image the name stands for
    approximated: bool = False         # another distribution stands in (ubuntu): reported as approximated
    python_source: str | None = None   # the release whose pythonX.Y source package is built into /usr/local

    @property
    def key(self) -> str:
        fields = [self.reference, self.release, self.packages, self.env, self.python_image, self.slim, DEBIAN_MIRROR,
                  self.python_source, SOURCE_BUILD]
        return hashlib.sha256(json.dumps(fields).encode()).hexdigest()[:16]


def qualified(reference: str) -> str:
    """`python:3.13` -> docker.io/library/python:3.13, `user/img:1` -> docker.io/user/img:1 (as Docker resolves
    short names; podman refuses them without a registries.conf alias). Already qualified names stay."""
    name = reference.strip()
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return name
    if not rest:
        return f"docker.io/library/{name}"
    return f"docker.io/{name}"


def recipe_for(reference: str) -> BaseRecipe | None:
    """How to bootstrap the base `reference` names, or None when it is nothing we can build from Debian packages."""
    full = qualified(reference)
    repository, _, tag = full.rpartition("/")[2].partition(":")
    tag = tag or "latest"
    if "@" in full:
        return None  # a digest names one exact image: no bootstrap is that image
    owner = full.rsplit("/", 1)[0]
    if owner == "docker.io/library" and repository == "debian":
        return _debian(full, tag)
    if owner == "docker.io/library" and repository == "python":
        return _python(full, tag)
    if owner == "docker.io/library" and repository == "ubuntu":
        return _ubuntu(full, tag)
    if owner == "ghcr.io/laude-institute/t-bench":  # python-3-13, ubuntu-24-04 (Terminal-Bench-1)
        inner = {"python-3-13": "python:3.13-slim-bookworm", "ubuntu-24-04": "ubuntu:24.04"}.get(repository)
        if inner is None:
            return None
        base = recipe_for(inner)
        return dataclasses.replace(base, reference=full, packages=base.packages + TB1_PACKAGES)
    return None


def _debian(full: str, tag: str) -> BaseRecipe | None:
    words = tag.split("-")
    release = DEBIAN_RELEASES.get(words[0].split(".")[0], words[0])
    if words[0] in ("latest", "stable"):
        release = LATEST_DEBIAN
    if release not in DEBIAN_PYTHON or any(w not in ("slim",) for w in words[1:]):
        return None
    return BaseRecipe(full, release, slim="slim" in words[1:])


def _python(full: str, tag: str) -> BaseRecipe | None:
    match = _PYTHON_TAG.fullmatch(tag)
    if not match:
        return None
    version = match["version"]
    variants = [v for v in match["variants"].split("-") if v]
    if any(v in ("alpine", "windowsservercore", "nanoserver") or v.startswith("alpine") for v in variants):
        return None
    named = next((v for v in variants if v in DEBIAN_PYTHON), None)
    slim = "slim" in variants
    matching = [release for release, python in DEBIAN_PYTHON.items() if python == version]
    differences = [f"Python {version} is Debian's python{version} package in /usr/bin (the official image builds "
                   "it from source into /usr/local)"]
    if matching and named in DEBIAN_PYTHON and named not in matching:
        # python:3.13-slim-bookworm: the named release, with CPython built from the Debian source package of the
        # release that ships it, into /usr/local, as the official image builds it from python.org's tarball.
        env = (("PATH", ENV_PATH), ("LANG", "C.UTF-8"), ("PYTHON_VERSION", version))
        return BaseRecipe(full, named, SOURCE_BUILD_PACKAGES, env, python_image=True, slim=slim,
                          differences=(f"CPython {version} built here from Debian {matching[-1]}'s python{version} "
                                       "source package into /usr/local; its compilers and headers are kept",),
                          python_source=matching[-1])
    if matching:
        release = named if named in matching else matching[-1]
        if named and named != release:
            differences.append(f"Debian {release} instead of {named}: {named}'s python3 is "
                               f"{DEBIAN_PYTHON[named]}, not {version}")
    else:  # no Debian release ships this Python: the nearest one that does, declared
        release = min(DEBIAN_PYTHON, key=lambda r: abs(_minor(DEBIAN_PYTHON[r]) - _minor(version)))
        differences[0] = (f"Python {DEBIAN_PYTHON[release]} (Debian {release}) stands in for {version}, which no "
                          "Debian release ships")
    packages = PYTHON_PACKAGES + (() if slim else BUILDPACK_PACKAGES)
    env = (("PATH", ENV_PATH), ("LANG", "C.UTF-8"), ("PYTHON_VERSION", DEBIAN_PYTHON[release]))
    # Another release than the tag names is an approximation too: its tools differ (OpenSSL 3.5 vs 3.0 prints
    # `CN=x`, not `CN = x`), which a test can see.
    return BaseRecipe(full, release, packages, env, python_image=True, slim=slim, differences=tuple(differences),
                      approximated=not matching or (named is not None and named != release))


# CPython's build dependencies (the official python image's list, in Debian's names), kept in the image.
SOURCE_BUILD_PACKAGES = ("ca-certificates", "netbase", "tzdata", "build-essential", "libbz2-dev", "libexpat1-dev",
                         "libffi-dev", "libgdbm-dev", "liblzma-dev", "libncursesw5-dev", "libreadline-dev",
                         "libsqlite3-dev", "libssl-dev", "uuid-dev", "xz-utils", "zlib1g-dev")
# Run in the bootstrapped root: fetch pythonX.Y's source package from RELEASE through apt (signed like every
# package), build it into /usr/local with pip, and leave no trace of the source or its apt list.
SOURCE_BUILD = r"""set -e
echo "deb-src {mirror} {release} main" > /etc/apt/sources.list.d/depgpo-python-source.list
apt-get update -qq
mkdir -p /usr/src/python && cd /usr/src/python
apt-get source --download-only -qq python{version}
tar -xf "$(ls python{version}_*.orig.tar.* | grep -v '\.asc$' | head -n 1)"
cd Python-{version}.*
./configure --prefix=/usr/local --enable-shared --with-ensurepip=install LDFLAGS=-Wl,-rpath=/usr/local/lib >/dev/null
make -j"$(nproc)" -s >/dev/null 2>&1
make install -s >/dev/null 2>&1
cd / && rm -rf /usr/src/python /etc/apt/sources.list.d/depgpo-python-source.list /var/lib/apt/lists/*
ln -sf python3 /usr/local/bin/python && ln -sf pip3 /usr/local/bin/pip
"""


def _ubuntu(full: str, tag: str) -> BaseRecipe | None:
    release = UBUNTU_AS_DEBIAN.get(tag)
    if release is None:
        return None
    return BaseRecipe(full, release, ("ca-certificates",), slim=False, approximated=True, differences=(
        f"Debian {release} stands in for Ubuntu {tag}: Debian's packages include no Ubuntu archive key, so the "
        "Ubuntu archive cannot be verified here; package names mostly agree, versions differ",))


def _python_version(recipe: BaseRecipe) -> str:
    return dict(recipe.env)["PYTHON_VERSION"]


def _minor(version: str) -> int:
    return int(version.split(".")[1])


@dataclass
class BaseImage:
    """A base image in the runtime's store, and where it came from."""

    reference: str
    source: str                       # local | pulled | bootstrapped | approximated
    recipe: BaseRecipe | None = None
    notes: list[str] = field(default_factory=list)


def ensure_base(reference: str, runtime: str, pull: bool = True) -> BaseImage:
    """Make `reference` present in `runtime`'s store: as it is, pulled, or bootstrapped from its recipe."""
    full = qualified(reference)
    with locked(base_lock(full)):  # checked and bootstrapped by one process at a time: the others then find it
        return _ensure_base(reference, full, runtime, pull)


def _ensure_base(reference: str, full: str, runtime: str, pull: bool) -> BaseImage:
    recipe = recipe_for(full)
    labels = _labels(full, runtime)
    if labels is not None and (recipe is None or labels.get(RECIPE_LABEL) in (None, recipe.key)):
        ours = recipe is not None and labels.get(RECIPE_LABEL) == recipe.key
        return BaseImage(full, _bootstrapped(recipe) if ours else "local", recipe if ours else None,
                         list(recipe.differences) if ours else [])
    pull_error = ""
    if pull and labels is None:
        result = subprocess.run([runtime, "pull", "-q", full], capture_output=True, text=True)
        if result.returncode == 0:
            return BaseImage(full, "pulled")
        pull_error = (result.stderr or result.stdout).strip().splitlines()[-1:] or [""]
        pull_error = pull_error[0]
    if recipe is None:
        raise BaseImageError(f"FROM {reference}: not in {runtime}'s store, "
                             f"{'not pullable (' + pull_error + ')' if pull else 'pulling is off'}, and not a base "
                             "this project bootstraps from Debian packages (debian:*, python:3.X[-slim]*, ubuntu:*); "
                             f"load it first (`{runtime} load -i image.tar`) or run where a registry is reachable")
    bootstrap(recipe, runtime)
    return BaseImage(full, _bootstrapped(recipe), recipe, list(recipe.differences))


def _bootstrapped(recipe: BaseRecipe) -> str:
    return "approximated" if recipe.approximated else "bootstrapped"


def _labels(reference: str, runtime: str) -> dict | None:
    """The image's labels, or None when it is not in the store."""
    result = subprocess.run([runtime, "image", "inspect", "--format", "{{json .Labels}}", reference],
                            capture_output=True, text=True)
    if result.returncode != 0:
        return None
    return json.loads(result.stdout.strip() or "null") or {}


def bootstrap(recipe: BaseRecipe, runtime: str, mirror: str = DEBIAN_MIRROR) -> None:
    """mmdebstrap the recipe's root into a tarball and import it into `runtime`'s store as `recipe.reference`."""
    if shutil.which("mmdebstrap") is None:
        raise BaseImageError(f"bootstrapping {recipe.reference} needs mmdebstrap (Debian: apt-get install "
                             "mmdebstrap; envs/setup.sh test installs it)")
    hooks = []
    if recipe.python_source:
        script = SOURCE_BUILD.format(mirror=mirror, release=recipe.python_source, version=_python_version(recipe))
        hooks.append(f'chroot "$1" sh -c {shlex.quote(script)}')
    elif recipe.python_image:  # as in the official image: pip installs system-wide, `python` is python3
        hooks += ['rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED',
                  'ln -sf /usr/bin/python3 "$1"/usr/local/bin/python', 'ln -sf /usr/bin/pip3 "$1"/usr/local/bin/pip']
    argv = ["mmdebstrap", "--variant=minbase", "--format=tar", "--quiet"]
    if recipe.packages:
        argv.append("--include=" + ",".join(recipe.packages))
    if recipe.slim:
        argv += [f"--dpkgopt=path-exclude={p}" for p in _SLIM_EXCLUDES]
    argv += [f"--customize-hook={hook}" for hook in hooks]
    with tempfile.TemporaryDirectory(prefix="depgpo-base-") as tmp:
        tar = Path(tmp) / "root.tar"
        result = subprocess.run([*argv, recipe.release, str(tar), mirror], capture_output=True, text=True)
        if result.returncode != 0:
            raise BaseImageError(f"bootstrapping {recipe.reference} (Debian {recipe.release} from {mirror}) failed: "
                                 f"{(result.stderr or result.stdout).strip()[-800:]}")
        changes = [f"ENV {name}={value}" for name, value in recipe.env]
        changes += [f"LABEL {RECIPE_LABEL}={recipe.key}", 'CMD ["bash"]']
        imported = subprocess.run([runtime, "import", *(f"--change={c}" for c in changes), str(tar),
                                   recipe.reference], capture_output=True, text=True)
        if imported.returncode != 0:
            raise BaseImageError(f"importing {recipe.reference} into {runtime} failed: "
                                 f"{imported.stderr.strip()[-800:]}")
