# Worker Gateway — the two front-door commands are `make run` and `make test`.

# The approved toolchain (go.mod says go 1.27.3): the go command fetches it through the module
# proxy. Exported, so every go command make starts, tests' own included, uses it.
export GOTOOLCHAIN := go1.27.3

STATE_DIR ?= .dev
GO ?= go
BIN := $(STATE_DIR)/bin

.PHONY: run test generate check-generated check-spec fuzz-short build vet lint faults ts-deps check-ts check-alerts check-helm

## run: start a complete system (private PostgreSQL, migrations, dev PKI, demo data, gateway, reference worker)
run: build
	$(BIN)/gateway dev -state-dir $(STATE_DIR) -worker-bin $(abspath $(BIN))/worker

# The release and revision, stamped into the binaries (internal/buildinfo) so that `gateway version`,
# `worker -version` and gateway_build_info name them; an image build passes them as build arguments.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X github.com/worker-gateway/gateway/internal/buildinfo.Version=$(VERSION) \
	-X github.com/worker-gateway/gateway/internal/buildinfo.Revision=$(REVISION)

build:
	$(GO) build -tags devstack -ldflags "$(LDFLAGS)" -o $(BIN)/gateway ./server/cmd/gateway
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/worker ./workerclient/cmd/worker

## test: every test, against a real PostgreSQL, real TLS and real HTTP. Most tests wait on
## gateways, timers and long-polls rather than compute, so four run at once per package
## (-parallel; the default is one per core).
test: check-generated check-spec vet lint vulncheck check-ts check-alerts check-helm
	$(GO) test -race -count=1 -p 3 -parallel 4 -timeout 20m $(LONGEST_TESTS_FIRST) ./...
	$(MAKE) fuzz-short

## LONGEST_TESTS_FIRST: the packages whose tests take longest, started first (go test starts
## packages in the order named; ./... then adds the rest once each): the run ends when its
## longest package does, so that one should not start last.
LONGEST_TESTS_FIRST = ./tests/security ./tests/controlplane ./tests/faults ./tests/identity \
	./server/cmd/gateway ./tests/dispatch ./tests/workerprotocol ./tests/netfaults ./tests/operations ./store

vet:
	$(GO) vet ./...
	$(GO) vet -tags devstack ./server/cmd/gateway

## lint: golangci-lint, the version pinned in tools/lint/go.mod, with .golangci.yml (layering, errors, imports)
lint:
	$(GO) -C tools/lint build -o $(abspath $(BIN))/golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint
	$(BIN)/golangci-lint run ./...

## vulncheck: govulncheck, the version pinned in tools/vulncheck/go.mod, against a vulnerability database
## built from the golang.org/x/vulndb module the Go module proxy serves (cached per version in
## $(STATE_DIR)/vulndb); fails when the code can reach a known vulnerability. VULNDB is pinned so a
## test run is reproducible; `make vulncheck VULNDB=latest` checks against the newest advisories.
.PHONY: vulncheck
VULNDB ?= v0.0.0-20261105234957-e22db6528018
vulncheck:
	$(GO) -C tools/vulncheck build -o $(abspath $(BIN))/govulncheck golang.org/x/vuln/cmd/govulncheck
	db=$$($(GO) -C tools/vulncheck run ./vulndb -cache $(abspath $(STATE_DIR))/vulndb -version $(VULNDB)) && \
	$(BIN)/govulncheck -db file://$$db ./...

## check-alerts: promtool check rules and the alerts' unit tests (deploy/prometheus). promtool comes
## from Debian's prometheus package, installed when missing and root; skipped, saying so, otherwise.
check-alerts:
	@if ! command -v promtool >/dev/null 2>&1; then \
		if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then \
			echo "check-alerts: SKIPPED: promtool is missing and cannot be installed (needs root and apt-get; Debian package prometheus)"; exit 0; fi; \
		echo "check-alerts: installing promtool (Debian package prometheus)"; \
		if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }; then \
			echo "check-alerts: SKIPPED: apt-get could not install prometheus"; exit 0; fi; \
	fi; \
	promtool check rules deploy/prometheus/alerts.yml && promtool test rules deploy/prometheus/alerts_test.yml

## check-helm: helm lint, and helm template | kubeconform -strict against Kubernetes schemas generated
## offline from the k8s.io/api module (tools/helm pins helm, kubeconform and k8s.io/api)
HELM_CHART := deploy/helm/worker-gateway
check-helm:
	$(GO) -C tools/helm build -o $(abspath $(BIN))/helm helm.sh/helm/v4/cmd/helm
	$(GO) -C tools/helm build -o $(abspath $(BIN))/kubeconform github.com/yannh/kubeconform/cmd/kubeconform
	$(GO) -C tools/helm run ./k8sschema -out $(abspath $(STATE_DIR))/k8s-schemas
	$(BIN)/helm lint --strict $(HELM_CHART)
	$(BIN)/helm lint --strict $(HELM_CHART) -f $(HELM_CHART)/ci/full-values.yaml
	@for values in $(HELM_CHART)/values.yaml $(HELM_CHART)/ci/full-values.yaml; do \
		echo "kubeconform: helm template -f $$values"; \
		$(BIN)/helm template wg $(HELM_CHART) -f $$values | \
		$(BIN)/kubeconform -strict -summary -skip ServiceMonitor -schema-location '$(abspath $(STATE_DIR))/k8s-schemas/{{ .ResourceKind }}{{ .KindSuffix }}.json' || exit 1; \
	done

## faults: the long fault scenarios (kill -9 at commit failpoints, stale writers, clock skew with the
## history checker; PostgreSQL restarts, latency, resets and partitions); several minutes each. Also
## the long forms of the exactly-once load tests, whose short forms `make test` runs.
faults:
	FAULTS_LONG=1 $(GO) test -race -count=1 -timeout 60m -v ./tests/faults/... ./tests/netfaults/... ./tests/ha/... ./tests/upgrade/...
	FAULTS_LONG=1 $(GO) test -race -count=1 -timeout 20m -v -run 'ExactlyOnce$$' ./tests/workerprotocol

## generate: regenerate the server interface and Go client, and the TypeScript types
## (clients/typescript/src/schema.d.ts), from openapi.yaml
generate:
	$(GO) generate ./server/api ./workerclient/apiclient
	scripts/ts-client.sh generate

## check-generated: fail when generated code differs from what openapi.yaml produces
check-generated:
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	cp server/api/api.gen.go workerclient/apiclient/client.gen.go $$tmp/ && \
	$(GO) generate ./server/api ./workerclient/apiclient && \
	if ! cmp -s server/api/api.gen.go $$tmp/api.gen.go || ! cmp -s workerclient/apiclient/client.gen.go $$tmp/client.gen.go; then \
		echo "generated code is stale: run 'make generate' and commit the result"; \
		git --no-pager diff --stat -- server/api workerclient/apiclient; exit 1; fi
	@scripts/ts-client.sh check-generated

## ts-deps: node and npm (installed from Debian when missing and root), then `npm ci` for
## clients/typescript when node_modules is missing or stale; skipped, saying so, without node
ts-deps:
	@scripts/ts-client.sh deps

## check-ts: type-check the TypeScript client and the Node reference worker (tsc --noEmit) — also
## installs what the Node worker test (tests/operations/typescript_worker_test.go) runs
check-ts: ts-deps
	@scripts/ts-client.sh check

## check-spec: fail when openapi.yaml breaks the contract of the latest released version (tag v*)
check-spec:
	@tag=$$(git describe --tags --abbrev=0 --match 'v*' 2>/dev/null || true); \
	if [ -z "$$tag" ]; then echo "check-spec: no released version is tagged yet; nothing to compare against"; exit 0; fi; \
	tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	git show "$$tag:openapi.yaml" > $$tmp/released.yaml && \
	echo "check-spec: comparing openapi.yaml with $$tag" && \
	$(GO) tool oasdiff breaking $$tmp/released.yaml openapi.yaml --fail-on ERR

## fuzz-short: a short run of each fuzz target (the seed corpora run with every go test). A count,
## not a duration: a duration can end mid-input and fail with "context deadline exceeded".
FUZZTIME ?= 3000x
fuzz-short:
	$(GO) test ./server -run '^$$' -fuzz '^FuzzCheckJSON$$' -fuzztime $(FUZZTIME)
	$(GO) test ./server -run '^$$' -fuzz '^FuzzCanonicalChecksum$$' -fuzztime $(FUZZTIME)
	$(GO) test ./store -run '^$$' -fuzz '^FuzzParseWakeup$$' -fuzztime $(FUZZTIME)
	$(GO) test ./store -run '^$$' -fuzz '^FuzzDecodeCursor$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/pki -run '^$$' -fuzz '^FuzzParseCertificatePEM$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/pki -run '^$$' -fuzz '^FuzzSignCSR$$' -fuzztime $(FUZZTIME)
