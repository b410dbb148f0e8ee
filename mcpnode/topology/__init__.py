"""Discovery: sysfs (and later NVML, netlink) -> the frozen model in `model.py`."""
