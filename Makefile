# fleetlimit: `make help` lists every target.

GO          ?= go
BIN         := $(CURDIR)/bin
STATICCHECK := $(BIN)/staticcheck
STATICCHECK_VERSION := v0.8.2
PG_IMAGE    ?= fleetlimit/postgres:15
FUZZTIME    ?= 30s
BENCHTIME   ?= 1s
# BUILDVCS: stamp fleetctl with the commit (auto); false where git cannot
# read the checkout (e.g. one owned by another user).
BUILDVCS    ?= auto

.DEFAULT_GOAL := help

.PHONY: help
help: ## List every target.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: demo
demo: ## Run the demo: a fleet sharing a simulated provider through a throwaway Postgres.
	@if [ ! -d cmd/fleetctl ]; then echo "make demo: fleetctl demo is not built yet"; exit 1; fi
	$(GO) run ./cmd/fleetctl demo

.PHONY: test
test: ## Run every test with the race detector against real Postgres, then the examples module's.
	$(GO) test -race -count=1 -timeout 30m ./...
	cd examples && $(GO) test -race -count=1 -timeout 10m ./...

.PHONY: test-short
test-short: ## Run the fast tests only (go test -short: no long searches or runs; tests that find Postgres still use it).
	$(GO) test -short -count=1 ./...

.PHONY: bench
bench: ## Run the benchmarks (BENCHTIME=1s).
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./...

.PHONY: report
report: ## Regenerate docs/benchmarks.md: all eight sections (about 45 minutes on 2 cores).
	cd bench && $(GO) run ./cmd/report -out ../docs

.PHONY: test-bench
test-bench: ## Vet and test the benchmark suite's own module (bench/).
	cd bench && $(GO) vet ./... && $(GO) test -count=1 ./...

.PHONY: fuzz
fuzz: ## Fuzz the limiter's estimate for FUZZTIME (default 30s).
	$(GO) test -run '^$$' -fuzz FuzzEstimate -fuzztime $(FUZZTIME) ./adaptive/

.PHONY: spec
spec: ## Model-check spec/ with spin: safety exhaustively, then every mutant must be refuted, and the rate model (about 13 minutes).
	spec/run.sh

.PHONY: spec-full
spec-full: ## Model-check spec/'s larger configuration with spin (exhaustive, about 12 minutes, 10 GB).
	spec/run.sh full

.PHONY: spec-live
spec-live: ## Model-check spec/'s liveness claims with spin under weak fairness (about 9 minutes, 3 GB).
	spec/run.sh live

.PHONY: spec-traces
spec-traces: ## Regenerate spec/traces/ from spin's random simulation (replayed by TestSpecReplay).
	spec/traces.sh

.PHONY: lint
lint: $(STATICCHECK) ## gofmt, go vet, staticcheck, and synctest only through internal/bubble.
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@out=$$(git grep --untracked -nE '^[^/]*synctest\.Test\(' -- '*.go' ':!internal/bubble/'); \
	  if [ -n "$$out" ]; then echo "call bubble.Test, not synctest.Test (see internal/bubble):"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...
	cd examples && $(GO) vet ./... && $(STATICCHECK) ./...
	cd bench && $(GO) vet ./... && $(STATICCHECK) ./...

$(STATICCHECK):
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

.PHONY: pg-image
pg-image: ## Build the offline Postgres image (PG_IMAGE, default fleetlimit/postgres:15) from Debian packages (needs Docker).
	scripts/build-pg-image.sh $(PG_IMAGE)

.PHONY: build
build: ## Build fleetctl into ./bin.
	$(GO) build -buildvcs=$(BUILDVCS) -o $(BIN)/fleetctl ./cmd/fleetctl

.PHONY: clean
clean: ## Remove build outputs.
	rm -rf $(BIN)
