# GPU Reclaimer: one image for the `exporter` and `actuator` services of docker-compose.yml
# (and for `gpu-reclaimer agent` on other nodes). NVML (libnvidia-ml.so.1) is not in the
# image: the NVIDIA Container Toolkit injects the host driver's copy into containers that
# reserve a GPU. See docs/deployment.md.
# PYTHON_IMAGE: another base of the same Python (make compose-test builds on a local stand-in).
ARG PYTHON_IMAGE=python:3.11-slim
FROM ${PYTHON_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
# Only what the package build needs (pyproject.toml: readme, packages exporter* actuator*).
COPY pyproject.toml README.md ./
COPY exporter ./exporter
COPY actuator ./actuator
# One image for every role (exporter, agent, actuator): the package with all its extras.
RUN pip install ".[all]" \
    && rm -rf /src \
    && gpu-reclaimer --version

WORKDIR /
# 9838 exporter, 9836 actuator, 9837 node agent.
EXPOSE 9838 9836 9837
ENTRYPOINT ["gpu-reclaimer"]
CMD ["exporter", "--listen", "0.0.0.0:9838"]
