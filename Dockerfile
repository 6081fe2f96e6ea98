# Worker Gateway: a static gateway binary on a minimal base, run as non-root.
# (Docker is not available on the machines this project is developed on; the
# file is kept simple and conventional.)
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/gateway ./server/cmd/gateway \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/worker ./workerclient/cmd/worker

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gateway /out/worker /usr/local/bin/
USER nonroot:nonroot
EXPOSE 8443
ENTRYPOINT ["/usr/local/bin/gateway"]
CMD ["serve"]
