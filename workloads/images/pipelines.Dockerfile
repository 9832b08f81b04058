# The `pipelines` image of the registry plan (infra/versions.py): Apache Airflow, the tenants'
# pipeline engine (docs/pipelines.md), with the golden-path DAG and the launcher that submits
# its steps as Jobs through Kueue. Started as `python -m workloads.pipeline engine <component>`
# by each tenant's engine pods (components/pipelines_spec.py). Build from the repository root:
#
#   docker build -f workloads/images/pipelines.Dockerfile \
#     --build-arg BASE_IMAGE=<registry>/mlplat/<env>/mirror/python:3.11.7-slim-bookworm@sha256:<pin> \
#     -t <registry>/mlplat/<env>/pipelines:<version>-<commit> .
#
# BASE_IMAGE has no default: the base always comes from the in-region mirror by digest.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}

# pip and setuptools past the base's (23.2.1 and 65.5.1), and without its wheel (0.42 when it
# was built): advisories name all three. As in every virtualenv the tests run and audit
# (Makefile VENV_TOOLS; the venv module puts no wheel there); nothing here builds with wheel.
RUN pip install --no-cache-dir pip==26.3 setuptools==84.2.1 && pip uninstall --yes wheel

# The same pins as the tests' engine (Makefile PIPELINES_PINS).
RUN pip install --no-cache-dir "apache-airflow[postgres]==3.3.2" kubernetes==36.0.0 boto3==1.44.8
# The RDS certificate authorities of the region, which the engine verifies its database
# against (sslmode=verify-full), as the tracking image does.
ARG REGION=me-central-1
ADD https://truststore.pki.rds.amazonaws.com/${REGION}/${REGION}-bundle.pem /etc/ssl/rds/global-bundle.pem

WORKDIR /opt/mlplat
COPY workloads/__init__.py workloads/hashing.py workloads/inputs.py workloads/arguments.py workloads/
COPY workloads/pipeline workloads/pipeline
COPY workloads/tracking workloads/tracking
ENV PYTHONPATH=/opt/mlplat \
    PYTHONDONTWRITEBYTECODE=1

RUN useradd --uid 10001 --user-group --no-create-home --home-dir /tmp --shell /usr/sbin/nologin airflow
USER 10001:10001
EXPOSE 8080 8974
ENTRYPOINT ["python", "-m", "workloads.pipeline"]
