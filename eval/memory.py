"""This process's resident memory, read from /proc: what the bench and the ANN
comparison report beside their timings (Linux only)."""

from __future__ import annotations


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def rss_mb() -> float:
    return round(_status_kb("VmRSS") / 1024, 1)


def peak_rss_mb() -> float:
    return round(_status_kb("VmHWM") / 1024, 1)


def reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False
