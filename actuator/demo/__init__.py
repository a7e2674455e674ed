"""`gpu-reclaimer demo`: the whole loop on this machine, on simulated GPUs.

- `stack.py`: the one place that starts and stops the parts (simulated node, exporter,
  actuator, Prometheus, Alertmanager) on loopback, from the same deploy/ and alert-rules/
  files docker-compose uses, with time windows compressed.
- `cast.py`: the demo's workloads and the outcome each one must reach.
- `observe.py`: what each part sees (Prometheus alerts, actuator cases, exporter memory).
- `view.py`: the live terminal table; `cli.py`: the `demo` sub-command.
"""
