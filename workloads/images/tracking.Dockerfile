# The `tracking` image of the registry plan (infra/versions.py): MLflow's tracking server
# with its basic-auth app, started by workloads/tracking/server.py, which reads the
# database and user credentials from Secrets Manager (Pod Identity). Build from the
# repository root:
#
#   docker build -f workloads/images/tracking.Dockerfile \
#     --build-arg BASE_IMAGE=<registry>/mlplat/<env>/mirror/python:3.11.7-slim-bookworm@sha256:<pin> \
#     -t <registry>/mlplat/<env>/tracking:<version>-<commit> .
#
# BASE_IMAGE has no default: the base always comes from the in-region mirror by digest.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}

# pip and setuptools past the base's (23.2.1 and 65.5.1), and without its wheel (0.42 when it
# was built): advisories name all three. As in every virtualenv the tests run and audit
# (Makefile VENV_TOOLS; the venv module puts no wheel there); nothing here builds with wheel.
RUN pip install --no-cache-dir pip==26.3 setuptools==84.2.1 && pip uninstall --yes wheel

# The same pins as the tests' server (Makefile TRACKING_PINS), less moto.
RUN pip install --no-cache-dir "mlflow[auth]==3.17.2" "psycopg[binary]==3.3.2" boto3==1.44.8
# The RDS certificate authorities of the region, which the server verifies the database
# against (sslmode=verify-full); AWS publishes them, the build fetches them.
ARG REGION=me-central-1
ADD https://truststore.pki.rds.amazonaws.com/${REGION}/${REGION}-bundle.pem /etc/ssl/rds/global-bundle.pem

WORKDIR /opt/mlplat
COPY workloads/__init__.py workloads/hashing.py workloads/inputs.py workloads/arguments.py workloads/
COPY workloads/tracking workloads/tracking
ENV PYTHONPATH=/opt/mlplat \
    PYTHONDONTWRITEBYTECODE=1

RUN useradd --uid 10001 --user-group --no-create-home --home-dir /tmp --shell /usr/sbin/nologin mlflow
USER 10001:10001
EXPOSE 5000
ENTRYPOINT ["python", "-m", "workloads.tracking.server"]
