# The `training` image of the registry plan (infra/versions.py): the trainer, the collective
# bandwidth check and the GPU check it runs before training. NVIDIA's PyTorch container plus
# the EFA user-space stack (libfabric with the EFA provider, and the aws-ofi-nccl plugin
# that lets NCCL use it). Build from the repository root:
#
#   docker build -f workloads/images/training.Dockerfile \
#     --build-arg BASE_IMAGE=<registry>/mlplat/<env>/mirror/pytorch:26.01-py3@sha256:<pin> \
#     -t <registry>/mlplat/<env>/training:<version>-<commit> .
#
# BASE_IMAGE has no default: the base always comes from the in-region mirror by digest
# (infra/versions.py image_uri("pytorch", ...); deploy-environment.yml passes it), and the
# cluster only ever pulls the finished image from in-region ECR.
# The base brings its own PyTorch build; the trainer uses only stable APIs (DDP,
# fully_shard, torch.distributed.checkpoint), tested against torch 2.13.0.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}

# EFA installer 1.51.0 (October 2026) carries libfabric 2.7.0amzn2.0 and aws-ofi-nccl 1.22.0.
# --skip-kmod: the kernel module belongs to the node (the EKS GPU AMI loads it); a container
#   cannot load one. --skip-limit-conf: limits come from the container runtime, not
#   /etc/security. Package signatures are checked (no --no-verify), and the tarball itself
#   against AWS's published GPG key. Any aws-ofi-nccl the base image carries in
#   /opt/amazon/aws-ofi-nccl is removed, so the installer's pinned plugin is the only one.
ARG EFA_INSTALLER_VERSION=1.51.0
RUN set -eux; \
    apt-get update; \
    apt-get install -y --no-install-recommends curl gnupg libhwloc-dev; \
    cd /tmp; \
    base=https://efa-installer.amazonaws.com; \
    curl -fsSLO "${base}/aws-efa-installer.key"; \
    curl -fsSLO "${base}/aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz"; \
    curl -fsSLO "${base}/aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz.sig"; \
    export GNUPGHOME="$(mktemp -d)"; \
    gpg --batch --import aws-efa-installer.key; \
    gpg --batch --verify "aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz.sig" \
        "aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz"; \
    tar -xzf "aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz"; \
    cd aws-efa-installer; \
    ./efa_installer.sh -y --skip-kmod --skip-limit-conf; \
    cd /; rm -rf /tmp/aws-efa-installer* /tmp/aws-efa-installer.key "$GNUPGHOME"; \
    rm -rf /opt/amazon/aws-ofi-nccl; \
    apt-get clean; rm -rf /var/lib/apt/lists/*; \
    ldconfig

# The installer registers /opt/amazon/efa/lib and /opt/amazon/ofi-nccl/lib with ldconfig;
# putting them first on the search path as well means NCCL cannot pick up another plugin.
ENV LD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib:/opt/amazon/efa/lib:${LD_LIBRARY_PATH} \
    PATH=/opt/amazon/efa/bin:${PATH}

# NVML bindings for the GPU check (same pin as the project's `workloads` extra).
RUN pip install --no-cache-dir nvidia-ml-py==13.615.71
# The MLflow client and the checkpoints bucket (workloads/tracking): same pins as pyproject.
RUN pip install --no-cache-dir mlflow-skinny==3.17.2 requests==2.34.2 boto3==1.44.8
# The golden path's steps in this image (workloads/pipeline: tokens, train, evaluate,
# register, export to ONNX for Triton, canary: it reads the Rollout, promote): same pins as pyproject.
RUN pip install --no-cache-dir pydantic==2.14.3 PyYAML==6.0.3 pyarrow==26.0.1 onnx==1.22.0 onnxruntime==1.31.1 \
    kubernetes==36.0.0

# The platform's own code: the workloads and the instance catalog they read (pure data).
WORKDIR /opt/mlplat
COPY infra/__init__.py infra/catalog.py infra/
COPY workloads/__init__.py workloads/hashing.py workloads/inputs.py workloads/arguments.py workloads/
COPY workloads/train workloads/train
COPY workloads/tracking workloads/tracking
COPY workloads/collectives workloads/collectives
COPY workloads/gpucheck workloads/gpucheck
COPY workloads/pipeline workloads/pipeline
COPY workloads/serve workloads/serve
ENV PYTHONPATH=/opt/mlplat \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp

# Runs as an unprivileged UID that belongs to no user on the host (the pods set the same).
# It gets a passwd entry because getpass, and with it torch.compile's cache path, needs
# one. The pod mounts /tmp, /dev/shm and the data as volumes, so the root file system
# stays read-only.
RUN useradd --uid 10001 --user-group --no-create-home --home-dir /tmp --shell /usr/sbin/nologin trainer
USER 10001:10001
ENTRYPOINT []
CMD ["python", "-m", "workloads.train", "--help"]
