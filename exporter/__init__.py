"""GPU Reclaimer's exporter: per-GPU and per-process metrics from NVML and /proc."""

__version__ = "0.1.0"
