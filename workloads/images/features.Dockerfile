# The `features` image of the registry plan (infra/versions.py): the Feast SDK and feature
# server with the platform's checks and IAM-authenticated online store, started as
# `python -m workloads.features <verb>` by the tenants' feature servers and materialization
# CronJobs (components/features_spec.py). Build from the repository root:
#
#   docker build -f workloads/images/features.Dockerfile \
#     --build-arg BASE_IMAGE=<registry>/mlplat/<env>/mirror/python:3.11.7-slim-bookworm@sha256:<pin> \
#     -t <registry>/mlplat/<env>/features:<version>-<commit> .
#
# BASE_IMAGE has no default: the base always comes from the in-region mirror by digest.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}

# pip and setuptools past the base's (23.2.1 and 65.5.1), and without its wheel (0.42 when it
# was built): advisories name all three. As in every virtualenv the tests run and audit
# (Makefile VENV_TOOLS; the venv module puts no wheel there); nothing here builds with wheel.
RUN pip install --no-cache-dir pip==26.3 setuptools==84.2.1 && pip uninstall --yes wheel

# The same pins as the tests' Feast (Makefile FEATURES_PINS).
RUN pip install --no-cache-dir "feast[redis,aws]==0.66.0" s3fs==2026.9.0 mlflow-skinny==3.17.2

WORKDIR /opt/mlplat
COPY workloads/__init__.py workloads/hashing.py workloads/inputs.py workloads/arguments.py workloads/
COPY workloads/features workloads/features
COPY workloads/tracking workloads/tracking
# The golden path's features steps (materialize, dataset) run here as well.
COPY workloads/pipeline workloads/pipeline
ENV PYTHONPATH=/opt/mlplat \
    PYTHONDONTWRITEBYTECODE=1

RUN useradd --uid 10001 --user-group --no-create-home --home-dir /tmp --shell /usr/sbin/nologin feast
USER 10001:10001
EXPOSE 6566 8000
ENTRYPOINT ["python", "-m", "workloads.features"]
