"""Reusable test helpers (real Prometheus/Alertmanager on loopback ports)."""
