# Worker Gateway: a static gateway binary on a minimal base, run as non-root.
# (Docker is not available on the machines this project is developed on; the
# file is kept simple and conventional.)
FROM golang:1.26 AS build
# go.mod requires go 1.27.3: the base image's go fetches it through the module proxy.
ENV GOTOOLCHAIN=go1.27.3
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The build context has no .git: the release and revision come as build
# arguments (docker build --build-arg VERSION=$(git describe --tags --always --dirty)
# --build-arg REVISION=$(git rev-parse HEAD) .) and are stamped by the linker.
ARG VERSION=
ARG REVISION=
RUN LDFLAGS="-s -w -X github.com/worker-gateway/gateway/internal/buildinfo.Version=${VERSION} -X github.com/worker-gateway/gateway/internal/buildinfo.Revision=${REVISION}" \
 && CGO_ENABLED=0 go build -trimpath -ldflags="$LDFLAGS" -o /out/gateway ./server/cmd/gateway \
 && CGO_ENABLED=0 go build -trimpath -ldflags="$LDFLAGS" -o /out/worker ./workerclient/cmd/worker \
 && mkdir -p /out/data/pki /out/data/artifacts

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gateway /out/worker /usr/local/bin/
# Data directories the non-root user owns (distroless has no shell to mkdir
# here): a named volume mounted on one starts with its owner, so the user can
# write certificates and artifacts there (scripts/docker/docker-compose.yml).
COPY --from=build --chown=65532:65532 /out/data/ /var/lib/gateway/
USER nonroot:nonroot
EXPOSE 8443
# The image probes itself: `gateway healthcheck` asks /readyz on loopback
# (the port from GATEWAY_LISTEN, 8443 by default). The server certificate
# is the deployment's, unknown here, hence -insecure-skip-verify — allowed
# for loopback only; compose files that know the CA pass -ca-file instead.
# Containers of this image that serve nothing (setup, worker) disable it.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["/usr/local/bin/gateway", "healthcheck", "-insecure-skip-verify", "-timeout", "3s"]
ENTRYPOINT ["/usr/local/bin/gateway"]
CMD ["serve"]
