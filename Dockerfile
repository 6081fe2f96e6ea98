# Worker Gateway: a static gateway binary on a minimal base, run as non-root.
# (Docker is not available on the machines this project is developed on; the
# file is kept simple and conventional.)
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/gateway ./server/cmd/gateway \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/worker ./workerclient/cmd/worker \
 && mkdir -p /out/data/pki /out/data/artifacts

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gateway /out/worker /usr/local/bin/
# Data directories the non-root user owns (distroless has no shell to mkdir
# here): a named volume mounted on one starts with its owner, so the user can
# write certificates and artifacts there (scripts/docker/docker-compose.yml).
COPY --from=build --chown=65532:65532 /out/data/ /var/lib/gateway/
USER nonroot:nonroot
EXPOSE 8443
ENTRYPOINT ["/usr/local/bin/gateway"]
CMD ["serve"]
