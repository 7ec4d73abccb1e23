"""Fake hosts for multi-host tests: Linux network namespaces joined by veth pairs.

:func:`netns_hosts` builds, in the root namespace, a bridge with the address
``10.231.X.1/24`` (the "learner host") and ``n`` network namespaces
``jaxsrl-<pid>-h<i>`` ("actor hosts"), each with ``lo`` up and an ``eth0`` addressed
``10.231.X.(10+i)/24`` whose veth peer ``jsv<pid>h<i>`` is a port of the bridge. A
process started with ``ip netns exec <ns> ...`` (an actor group's ``launch_prefix``)
reaches the learner only through its veth pair, so every byte it exchanges with the
learner crosses a real interface and shows in that interface's counters.

Names carry this process's pid and ``X`` is a third octet no interface of the root
namespace uses yet, so concurrent test runs do not clash. Everything is torn down on
exit from the context manager, also when the test fails; leftovers of killed earlier
runs (names with a pid that no longer runs) are removed first.

Needs root and iproute2 (Debian package ``iproute2``); without them, or where
``ip netns add`` is not allowed (an unprivileged container), the calling test is
skipped with the reason.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator

import pytest

NETNS_PREFIX = "jaxsrl-"
SUBNET_PREFIX = "10.231"


def _ip(*args: str, netns: str | None = None) -> str:
    """Run ``ip ARGS`` (inside ``netns`` if given); returns stdout.

    Raises:
      subprocess.CalledProcessError: ``ip`` failed (its stderr is in the exception).
    """
    cmd = ["ip", *(("netns", "exec", netns, "ip") if netns else ()), *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=30).stdout


def _quiet(*args: str) -> None:
    """``ip ARGS``, ignoring failure (teardown of things that may be gone already)."""
    subprocess.run(["ip", *args], check=False, capture_output=True, timeout=30)


@dataclasses.dataclass(frozen=True)
class Host:
    """One fake actor host: a namespace and its link to the learner host."""

    netns: str  # namespace name, for ``ip netns exec``
    ip: str  # address of its eth0
    veth: str  # the root-namespace end of its veth pair (a bridge port)

    @property
    def launch_prefix(self) -> list[str]:
        """Command prefix that runs a process on this host."""
        return ["ip", "netns", "exec", self.netns]

    def counters(self) -> dict[str, int]:
        """Bytes through the root end of the link: ``rx`` = sent by this host, ``tx`` =
        received by it (``/sys/class/net/<veth>/statistics``)."""
        base = f"/sys/class/net/{self.veth}/statistics"
        out = {}
        for key in ("rx_bytes", "tx_bytes"):
            with open(os.path.join(base, key)) as f:
                out[key.split("_")[0]] = int(f.read())
        return out

    def connections(self) -> list[tuple[str, str]]:
        """``(local, peer)`` of this host's established TCP connections (``ss``)."""
        out = subprocess.run(["ip", "netns", "exec", self.netns, "ss", "-tnH", "state", "established"],
                             check=True, capture_output=True, text=True, timeout=30).stdout
        pairs = []
        for line in out.splitlines():
            fields = line.split()
            if len(fields) >= 4:
                pairs.append((fields[-2], fields[-1]))
        return pairs

    def cut(self) -> None:
        """Cut this host off the network: its link goes down at the learner's end."""
        _ip("link", "set", self.veth, "down")

    def reconnect(self) -> None:
        _ip("link", "set", self.veth, "up")


@dataclasses.dataclass(frozen=True)
class Hosts:
    server_ip: str  # the bridge's address: where servers bind
    bridge: str
    hosts: tuple

    def __getitem__(self, i: int) -> Host:
        return self.hosts[i]

    def __len__(self) -> int:
        return len(self.hosts)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> None:
    """Remove namespaces and links of earlier runs whose process is gone."""
    names = subprocess.run(["ip", "netns", "list"], check=False, capture_output=True, text=True,
                           timeout=30).stdout.split()
    for name in names:
        m = re.fullmatch(rf"{NETNS_PREFIX}(\d+)-h\d+", name)
        if m and not _pid_alive(int(m.group(1))):
            _kill_namespace_processes(name)
            _quiet("netns", "del", name)
    links = subprocess.run(["ip", "-o", "link", "show"], check=False, capture_output=True, text=True,
                           timeout=30).stdout
    for m in re.finditer(r"^\d+: (js[bv](\d+)(?:h\d+)?)[@:]", links, re.MULTILINE):
        if not _pid_alive(int(m.group(2))):
            _quiet("link", "del", m.group(1))


def _free_octet(start: int) -> int:
    """A third octet X such that no root-namespace address lies in ``10.231.X.0/24``."""
    used = set(re.findall(rf"inet {re.escape(SUBNET_PREFIX)}\.(\d+)\.",
                          subprocess.run(["ip", "-4", "-o", "addr", "show"], check=True, capture_output=True,
                                         text=True, timeout=30).stdout))
    for k in range(254):
        x = (start + k) % 254 + 1
        if str(x) not in used:
            return x
    raise RuntimeError(f"no free {SUBNET_PREFIX}.X.0/24 subnet")


def _kill_namespace_processes(netns: str) -> None:
    """SIGKILL the processes still living in ``netns`` (started by this test run)."""
    out = subprocess.run(["ip", "netns", "pids", netns], check=False, capture_output=True, text=True,
                         timeout=30)
    for pid in out.stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def _skip_unless_possible() -> None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    if shutil.which("ip") is None:
        pytest.skip("needs iproute2 (`ip`; Debian: apt-get install iproute2)")


@contextlib.contextmanager
def netns_hosts(n: int) -> Iterator[Hosts]:
    """Build ``n`` fake actor hosts behind a bridge; tear them down on exit.

    Args:
      n: number of actor hosts, 1..200.

    Yields:
      :class:`Hosts`: ``server_ip`` (bind servers there) and one :class:`Host` each.

    Raises:
      ValueError: ``n`` out of range.
      pytest.skip.Exception: not root, no ``ip``, or the kernel/container refuses to
        create namespaces, bridges or veth pairs (the reason is in the message).
    """
    if not 1 <= n <= 200:
        raise ValueError(f"n={n} hosts: need 1..200")
    _skip_unless_possible()
    pid = os.getpid()
    remove_stale()
    x = _free_octet(pid % 254)
    bridge = f"jsb{pid}"
    hosts = tuple(Host(f"{NETNS_PREFIX}{pid}-h{i + 1}", f"{SUBNET_PREFIX}.{x}.{11 + i}",
                       f"jsv{pid}h{i + 1}") for i in range(n))
    made_ns: list[str] = []
    try:
        try:
            for h in hosts:
                _ip("netns", "add", h.netns)
                made_ns.append(h.netns)
        except subprocess.CalledProcessError as exc:
            pytest.skip(f"`ip netns add` failed (no CAP_SYS_ADMIN?): {exc.stderr.strip()}")
        try:
            _ip("link", "add", bridge, "type", "bridge")
            _ip("addr", "add", f"{SUBNET_PREFIX}.{x}.1/24", "dev", bridge)
            _ip("link", "set", bridge, "up")
            for h in hosts:
                _ip("link", "add", h.veth, "type", "veth", "peer", "name", f"{h.veth}p")
                _ip("link", "set", f"{h.veth}p", "netns", h.netns)
                _ip("link", "set", f"{h.veth}p", "name", "eth0", netns=h.netns)
                _ip("addr", "add", f"{h.ip}/24", "dev", "eth0", netns=h.netns)
                _ip("link", "set", "eth0", "up", netns=h.netns)
                _ip("link", "set", "lo", "up", netns=h.netns)
                _ip("link", "set", h.veth, "master", bridge)
                _ip("link", "set", h.veth, "up")
        except subprocess.CalledProcessError as exc:
            pytest.skip(f"could not build the bridge / veth pairs: {' '.join(exc.cmd)}: "
                        f"{exc.stderr.strip()}")
        yield Hosts(f"{SUBNET_PREFIX}.{x}.1", bridge, hosts)
    finally:
        for h in hosts:
            _quiet("link", "del", h.veth)  # deletes its peer too
        _quiet("link", "del", bridge)
        for name in made_ns:
            _kill_namespace_processes(name)
            _quiet("netns", "del", name)
