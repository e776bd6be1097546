# mcpdrift: make run (the main job), make test (what CI runs), make demo, make check, make bench.
SHELL := /bin/bash
GO    ?= go
PKGS  := ./services/... ./proto/...
BIN   := bin

CMDS  := stack fingerprint drift audit notify proxy demoserver driftctl

.PHONY: run demo diff-releases images build test conformance deps check fmt vet lint bench scale fuzz fixtures proto proto-check help

help: ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

build: ## build every command into bin/
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ $(addprefix ./services/,$(CMDS))

run: build ## the main job: the whole pipeline on this machine (NATS, services, admin API, a proxy in front of a sample server); Ctrl-C stops it
	@scripts/run.sh

demo: build ## a scripted rug pull against the stack that make run started
	@scripts/demo.sh

images: ## the container image (docker or podman); without one, the same static binaries into .data/static
	@scripts/images.sh

diff-releases: build ## fingerprint two real releases of an MCP server and show what changed
	@scripts/diff-releases.sh

test: proto-check deps ## the test suite: generated code up to date, race detector, the proxy's lock order checked (lockcheck), shuffled order (CI runs this)
	$(GO) test -race -tags lockcheck -shuffle=on -count=1 -timeout 45m $(PKGS)

conformance: deps ## the MCP conformance suite directly and through the proxy, with its per-group table (docs/transparency.md); make test runs it too
	set -o pipefail; $(GO) test -count=1 -run '^TestConformance$$' -v ./services/e2e/ 2>&1 | grep -E '^(=== RUN|--- |ok|FAIL|PASS)|conformance_test.go'

deps: ## install what the tests need beyond Go (ClickHouse server, npm MCP peers, chDB); idempotent
	@scripts/deps.sh

check: fmt vet lint test ## gofmt, go vet, staticcheck, tests

fmt:
	@out=$$(gofmt -l services proto); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

lint:
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 $(PKGS)

bench: ## benchmarks, reported as ratios against baselines measured in the same run
	@scripts/bench.sh

scale: ## the scale simulation (docs/scale.md): a NATS hub cluster, 10 leaf nodes, the services and a simulated proxy fleet at four sizes up to 20,000 servers / 1,000 proxies; about 30 minutes
	@scripts/scale.sh $(SCALE_ARGS)

fuzz: ## run each fuzz target for FUZZTIME (default 30s)
	@scripts/fuzz.sh $${FUZZTIME:-30s}

proto: ## regenerate the Go code of the bus contract (proto/mcpdriftv1)
	@scripts/proto.sh

proto-check: ## fail when the committed generated code is out of date
	@scripts/proto.sh --check

fixtures: ## re-capture the real-world MCP server fixtures from npm
	@scripts/capture-fixtures.sh
