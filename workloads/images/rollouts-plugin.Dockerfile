# The `rollouts-gatewayapi-plugin` image of the registry plan (infra/versions.py): Argo
# Rollouts' Gateway API traffic-router plugin (argoproj-labs/rollouts-plugin-trafficrouter-
# gatewayapi, Apache-2.0), a single static binary. The controller loads plugins from a URL
# or a file when it starts; an init container of the controller's pod copies the binary
# from this image into a shared volume (components/rollout_values.py), so a controller
# restart never reaches outside the region. Build from the repository root:
#
#   docker build -f workloads/images/rollouts-plugin.Dockerfile \
#     --build-arg BASE_IMAGE=<registry>/mlplat/<env>/mirror/node-debug:1.37.0@sha256:<pin> \
#     -t <registry>/mlplat/<env>/rollouts-gatewayapi-plugin:<version>-<commit> .
#
# BASE_IMAGE has no default: the base (busybox, for `cp`) comes from the in-region mirror by
# digest. The download is checked against the release's sha256 (an independent public pin
# of this release's linux-amd64 asset): a different file fails the build. The controller
# checks the same sum again when it loads the plugin (PLUGIN_SHA256 in
# components/rollout_values.py).
ARG BASE_IMAGE
FROM ${BASE_IMAGE}

ADD --checksum=sha256:e44baf9271d087466c7fec35e704758b9f3d26b32b490089a06e6be44bdc9978 \
    --chmod=0555 \
    https://github.com/argoproj-labs/rollouts-plugin-trafficrouter-gatewayapi/releases/download/v0.6.0/gatewayapi-plugin-linux-amd64 \
    /plugins/gatewayapi

USER 65532:65532
ENTRYPOINT ["cp", "/plugins/gatewayapi", "/shared/gatewayapi"]
