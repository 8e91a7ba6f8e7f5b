"""How much memory the engine may still take: what the device has free, or less under a budget.

In-process, a run may use what the machine has free. A server shares one engine among its callers
and must keep answering, so it sets a budget for its whole process (`memory_budget_gb`): the
headroom is then the budget less the process's resident memory, and never more than the machine
has free. Requests are sized against the headroom before any work (the KV cache of a sampled row
at its longest, a training micro-batch's activations, a new adapter's state), and sampling
decodes fewer rows at once where many would not fit. Over the headroom is a clear error naming
what was needed, what is left and the setting to change, never the kernel's OOM killer.
"""

import os
from dataclasses import dataclass
from pathlib import Path

import torch

_CGROUP = Path("/sys/fs/cgroup")
DEFAULT_SERVER_SHARE = 0.8  # of the machine's (or its container's) memory, when the server is given no budget


@dataclass
class MemoryBudget:
    """`limit_bytes` None: no budget beyond the device's free memory (in-process runs)."""

    limit_bytes: int | None = None

    def headroom(self, device: torch.device) -> int | None:
        """Bytes the engine may still take on `device`; None where that cannot be read."""
        free = available_memory_bytes(device)
        if self.limit_bytes is None or device.type != "cpu":
            return free
        left = max(self.limit_bytes - resident_bytes(), 0)
        return left if free is None else min(free, left)

    def describe(self, device: torch.device) -> str:
        """Where the headroom comes from, for an error message."""
        if self.limit_bytes is None or device.type != "cpu":
            return f"free on {device}"
        return (f"left of the server's memory budget of {self.limit_bytes / 2**30:.1f} GiB "
                f"({resident_bytes() / 2**30:.1f} GiB in use; the server's memory_budget_gb sets it)")


def server_budget(memory_budget_gb: float) -> MemoryBudget:
    """The server's budget: `memory_budget_gb`, or 0 for `DEFAULT_SERVER_SHARE` of the machine's memory."""
    if memory_budget_gb > 0:
        return MemoryBudget(int(memory_budget_gb * 2**30))
    total = machine_memory_bytes()
    return MemoryBudget(None if total is None else int(total * DEFAULT_SERVER_SHARE))


def resident_bytes() -> int:
    """This process's resident memory."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def machine_memory_bytes() -> int | None:
    """The memory this process can ever have: the machine's, or its container's limit if lower."""
    known = [value for value in (_meminfo("MemTotal"), _cgroup_limit()) if value is not None]
    return min(known) if known else None


def available_memory_bytes(device: torch.device) -> int | None:
    """Memory free for new tensors on `device`, in bytes; None where it cannot be read.

    On the CPU: the kernel's `MemAvailable`, capped by the headroom under a cgroup memory limit
    (a container's limit is what the OOM killer enforces).
    """
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type != "cpu":
        return None
    known = [value for value in (_meminfo("MemAvailable"), _cgroup_headroom()) if value is not None]
    return min(known) if known else None


def _meminfo(field: str) -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024  # the kernel reports kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_files() -> list[tuple[str, str]]:
    return [("memory.max", "memory.current"),  # cgroup v2
            ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")]  # v1


def _cgroup_limit() -> int | None:
    for limit_file, _ in _cgroup_files():
        try:
            limit = (_CGROUP / limit_file).read_text().strip()
            # v1 says "no limit" with a huge number
            return None if limit == "max" or int(limit) >= 2**60 else int(limit)
        except (OSError, ValueError):
            continue
    return None


def _cgroup_headroom() -> int | None:
    for limit_file, usage_file in _cgroup_files():
        try:
            limit = (_CGROUP / limit_file).read_text().strip()
            usage = int((_CGROUP / usage_file).read_text().strip())
            return None if limit == "max" else max(int(limit) - usage, 0)
        except (OSError, ValueError):
            continue
    return None
