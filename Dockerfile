# The operator's image: a static binary, non-root. No registry is needed: the binary is built on
# the host (`make image` runs `make build` first) and the base defaults to scratch; pass
# --build-arg BASE_IMAGE=gcr.io/distroless/static:nonroot (or any local image) to change it.
ARG BASE_IMAGE=scratch
FROM ${BASE_IMAGE}
COPY bin/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
