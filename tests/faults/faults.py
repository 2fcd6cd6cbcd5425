"""Helpers shared by the fault suites: the integration harness, a corrald on a small tmpfs of its
own, filling a file system, small sandbox specs."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from harness import Corrald, TmpfsStateCorrald, mounts_under  # noqa: E402,F401

# Small sandboxes: this VM's pid table (kernel.pid_max 32768) holds hundreds of them.
SMALL = {"cpu": "250m", "memory": "128Mi", "pids": "32"}
TINY_REQ = {"cpu": "10m", "memory": "8Mi"}


def spec(**kw):
    s = {"image": {"uri": "host"}, "entrypoint": ["sleep", "infinity"],
         "resourceLimits": SMALL, "resourceRequests": TINY_REQ, "timeout": 900}
    s.update(kw)
    return s


def fill(path):
    """Write path until its file system is full (1 MiB, then 4 KiB, then 512 B writes)."""
    with open(path, "wb", buffering=0) as f:
        for chunk in (1 << 20, 4096, 512):
            buf = b"\0" * chunk
            try:
                while True:
                    f.write(buf)
            except OSError as e:
                if e.errno != 28:  # ENOSPC
                    raise


class SmallTmpfsCorrald(TmpfsStateCorrald):
    """corrald whose state dir is a tmpfs of 48m of its own, which a test may fill."""
    TMPFS_SIZE = "48m"
    TMPFS_NAME = "corral-faults-state"
