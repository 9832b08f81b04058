# The `serving` image of the registry plan (infra/versions.py): the model export (checkpoint
# -> parity-checked ONNX -> Triton model repository) and the smoke client, for a job next
# to the checkpoints or a CI runner; and the inference request logger and the scheduled
# drift check (workloads/monitor), which the cluster layer runs beside Triton. Triton itself runs the mirrored `tritonserver` image.
# Build from the repository root:
#
#   docker build -f workloads/images/serving.Dockerfile \
#     --build-arg BASE_IMAGE=<registry>/mlplat/<env>/mirror/pytorch:26.01-py3@sha256:<pin> \
#     -t <registry>/mlplat/<env>/serving:<version>-<commit> .
#
# The base brings PyTorch (the export is tested against torch 2.13.0). Publishing to the
# models bucket uses the AWS CLI, which the image leaves out: in-cluster it writes to a
# mounted repository, and CI uploads with its own CLI.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}

# The project's `serve` extra, plus the gRPC and protobuf releases the Triton client and the
# generated ModelConfig are used with (pyproject.toml).
RUN pip install --no-cache-dir onnx==1.22.0 onnxscript==0.7.2 onnxruntime==1.31.1 tritonclient==2.65.0 \
    grpcio==1.85.1 protobuf==5.29.6 \
    mlflow-skinny==3.17.2 requests==2.34.2 boto3==1.44.8 pyarrow==26.0.1 \
    evidently==0.7.23 pandas==2.3.3 prometheus-client==0.26.0 xds-protos==1.68.1

WORKDIR /opt/mlplat
COPY infra/__init__.py infra/catalog.py infra/
COPY workloads/__init__.py workloads/hashing.py workloads/inputs.py workloads/arguments.py workloads/
COPY workloads/train workloads/train
COPY workloads/serve workloads/serve
COPY workloads/tracking workloads/tracking
COPY workloads/monitor workloads/monitor
ENV PYTHONPATH=/opt/mlplat \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp

RUN useradd --uid 10001 --user-group --no-create-home --home-dir /tmp --shell /usr/sbin/nologin serving
USER 10001:10001
ENTRYPOINT []
CMD ["python", "-m", "workloads.serve", "--help"]
