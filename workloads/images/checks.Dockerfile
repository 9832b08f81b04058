# The `checks` image of the registry plan (infra/versions.py): the GPU node check, run by a
# daemon set on every GPU node. Python, NVIDIA's NVML bindings and nothing else. NVML itself
# (libnvidia-ml.so) comes from the node's driver: the NVIDIA container runtime mounts it
# into any container started with NVIDIA_VISIBLE_DEVICES set. Build from the repository root:
#
#   docker build -f workloads/images/checks.Dockerfile \
#     --build-arg BASE_IMAGE=<registry>/mlplat/<env>/mirror/python:3.11.7-slim-bookworm@sha256:<pin> \
#     -t <registry>/mlplat/<env>/checks:<version>-<commit> .
#
# BASE_IMAGE has no default: the base always comes from the in-region mirror by digest
# (infra/versions.py image_uri("python", ...); deploy-environment.yml passes it). The
# Python the project is tested with.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}

# pip and setuptools past the base's (23.2.1 and 65.5.1), and without its wheel (0.42 when it
# was built): advisories name all three. As in every virtualenv the tests run and audit
# (Makefile VENV_TOOLS; the venv module puts no wheel there); nothing here builds with wheel.
RUN pip install --no-cache-dir pip==26.3 setuptools==84.2.1 && pip uninstall --yes wheel

# Same pin as the project's `workloads` extra in pyproject.toml.
RUN pip install --no-cache-dir nvidia-ml-py==13.615.71
# The bounded reader of --readings (workloads/inputs.py) parses YAML and JSON with PyYAML.
RUN pip install --no-cache-dir pyyaml==6.0.3

WORKDIR /opt/mlplat
COPY infra/__init__.py infra/catalog.py infra/
COPY workloads/__init__.py workloads/inputs.py workloads/arguments.py workloads/
COPY workloads/gpucheck workloads/gpucheck
ENV PYTHONPATH=/opt/mlplat \
    PYTHONDONTWRITEBYTECODE=1 \
    NVIDIA_DRIVER_CAPABILITIES=utility

RUN useradd --uid 10001 --user-group --no-create-home --home-dir /tmp --shell /usr/sbin/nologin checks
USER 10001:10001
ENTRYPOINT ["python", "-m", "workloads.gpucheck"]
