"""A real single-node Slurm cluster for tests: munged, MariaDB + slurmdbd (so that sacct works, as on real
clusters), slurmctld and slurmd, with two fake GPUs as gres. Debian's packages, started as root in a temporary
directory, no systemd, no cgroups. Why it is set up so: docs/cluster.md#tests-on-a-real-slurm.

    with SlurmCluster(tmp_path) as cluster:   # exports SLURM_CONF while it runs
        subprocess.run(["sbatch", "--gpus=1", "--wrap", "true"], env=cluster.env)
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd")


def missing_programs() -> list[str]:
    return [p for p in ("sbatch", "sacct", *DAEMONS[:1], "mariadb-install-db", *DAEMONS[1:])
            if shutil.which(p) is None and not Path(f"/usr/sbin/{p}").exists()]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmCluster:
    def __init__(self, root: Path, cpus: int | None = None, memory_mb: int = 8000):
        self.root = Path(root)
        self.host = socket.gethostname().split(".")[0]
        self.cpus = cpus or os.cpu_count() or 2
        self.memory_mb = memory_mb
        self.ports = {name: _free_port() for name in ("db", "dbd", "ctld", "slurmd")}
        self.processes: list[subprocess.Popen] = []
        self.env = dict(os.environ, SLURM_CONF=str(self.root / "etc/slurm.conf"))

    # ------------------------------------------------------------------ configuration
    def _write_config(self) -> None:
        r = self.root
        for d in ("etc", "state", "spool", "run", "log", "dev", "mysql", "munge"):
            (r / d).mkdir(parents=True, exist_ok=True)
        for i in range(2):  # gres files must be character devices
            subprocess.run(["mknod", str(r / f"dev/nvidia{i}"), "c", "1", "3"], check=True)
        (r / "etc/gres.conf").write_text(f"AutoDetect=off\nNodeName={self.host} Name=gpu File={r}/dev/nvidia[0-1]\n")
        (r / "etc/slurm.conf").write_text(f"""\
ClusterName=depgpotest
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={self.ports['ctld']}
SlurmdPort={self.ports['slurmd']}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=500
ReturnToService=2
MinJobAge=600
KillWait=5
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageTRES=gres/gpu
AccountingStorageHost=127.0.0.1
AccountingStoragePort={self.ports['dbd']}
JobAcctGatherType=jobacct_gather/linux
GresTypes=gpu
NodeName={self.host} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={self.memory_mb} Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes={self.host} Default=YES MaxTime=INFINITE State=UP
""")
        dbd = r / "etc/slurmdbd.conf"
        dbd.write_text(f"""\
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={self.ports['dbd']}
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={self.ports['db']}
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
PidFile={r}/run/slurmdbd.pid
LogFile={r}/log/slurmdbd.log
""")
        dbd.chmod(0o600)

    # ------------------------------------------------------------------ daemons
    def _spawn(self, argv: list[str], log: str) -> subprocess.Popen:
        with open(self.root / "log" / log, "ab") as out:
            process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                       start_new_session=True)
        self.processes.append(process)
        return process

    def _wait(self, what: str, ready, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready():
                return
            time.sleep(0.2)
        logs = "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted((self.root / "log").glob("*")))
        raise RuntimeError(f"test Slurm cluster: {what} did not come up in {timeout_s} s\n{logs}")

    def _ok(self, argv: list[str]) -> bool:
        return subprocess.run(argv, env=self.env, capture_output=True).returncode == 0

    def start(self) -> SlurmCluster:
        r = self.root
        self._write_config()
        # Slurm's clients look for munged at its default socket only, so the cluster shares the machine's munged
        # there, or starts one with the machine's key.
        if not self._ok(["munge", "-n"]):
            Path("/run/munge").mkdir(parents=True, exist_ok=True)
            self._spawn(["munged", "--foreground", "--force", f"--pid-file={r}/run/munged.pid",
                         f"--log-file={r}/log/munged.log", f"--seed-file={r}/munge/seed"], "munged.out")
            self._wait("munged", lambda: self._ok(["munge", "-n"]))
        subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={r}/mysql/data", "--user=root",
                        "--auth-root-authentication-method=normal", "--skip-test-db"],
                       check=True, capture_output=True)
        sock = r / "mysql/mysqld.sock"
        self._spawn(["mariadbd", "--no-defaults", "--user=root", f"--datadir={r}/mysql/data", f"--socket={sock}",
                     "--bind-address=127.0.0.1", f"--port={self.ports['db']}", f"--pid-file={r}/run/mariadbd.pid",
                     "--innodb-buffer-pool-size=32M", "--skip-log-bin"], "mariadbd.out")
        self._wait("mariadbd", lambda: self._ok(["mariadb", "-S", str(sock), "-uroot", "-e", "select 1"]))
        subprocess.run(["mariadb", "-S", str(sock), "-uroot", "-e",
                        "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmpw'; CREATE DATABASE slurm_acct_db; "
                        "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"], check=True)
        self._spawn(["slurmdbd", "-D"], "slurmdbd.out")
        self._wait("slurmdbd", lambda: self._ok(["sacctmgr", "-i", "add", "cluster", "depgpotest"]) or
                   self._ok(["sacctmgr", "-n", "show", "cluster", "depgpotest"]))
        self._spawn(["slurmctld", "-D", "-i"], "slurmctld.out")
        self._spawn(["slurmd", "-D"], "slurmd.out")
        self._wait("the node", lambda: "idle" in subprocess.run(
            ["sinfo", "-h", "-o", "%t"], env=self.env, capture_output=True, text=True).stdout)
        return self

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in reversed(self.processes):
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    def sacct(self) -> list[dict]:
        """Every job the cluster ran: id, name, state, allocated resources."""
        out = subprocess.run(["sacct", "-X", "-n", "-P", "-a", "-o", "JobID,JobName,State,AllocTRES"],
                             env=self.env, capture_output=True, text=True, check=True).stdout
        return [dict(zip(("id", "name", "state", "tres"), line.split("|"))) for line in out.splitlines() if line]

    def job(self, job_id: str, states: tuple[str, ...] = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"),
            timeout_s: float = 60) -> dict:
        """The job's sacct record once it is in one of `states` (slurmctld reports to slurmdbd asynchronously)."""
        deadline = time.monotonic() + timeout_s
        while True:
            record = next((job for job in self.sacct() if job["id"] == job_id), None)
            if record and record["state"].split()[0] in states or time.monotonic() > deadline:
                return record or {"id": job_id, "state": "not in sacct", "name": "", "tres": ""}
            time.sleep(1)

    def __enter__(self) -> SlurmCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()
