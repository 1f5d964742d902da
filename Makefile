# kgate developer targets. `make test` is what CI runs (via .ci/run).
GO        ?= go
PKGS_UNIT := ./protocol/ ./configs/ ./coordinator/ ./redisstore/ ./gateway/ ./internal/... ./cmd/...
FUZZTIME  ?= 100000x

.PHONY: all build test unit integration vet fmt fuzz bench run clean

all: build

build:
	$(GO) build -o bin/kgate ./cmd/kgate
	$(GO) build -o bin/kgate-bench ./cmd/kgate-bench
	$(GO) build -o bin/kgate-probe ./cmd/kgate-probe

run:
	$(GO) run ./cmd/kgate

## test: formatting, vet, unit tests (race), a short fuzz pass, integration tests (race) on real Redis.
test: vet unit fuzz-short integration

vet:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

unit:
	$(GO) test -race -count=1 -timeout 10m $(PKGS_UNIT)

integration:
	$(GO) test -race -count=1 -timeout 20m ./integration/

## fuzz-short: every fuzz target for a few seconds (the seeds also run as plain tests in `unit`).
## Counted in executions, not seconds: Go 1.26's fuzzing coordinator can fail a run whose -fuzztime
## duration ends while a worker is busy ("context deadline exceeded", no failing input; go.dev/issue/75804).
fuzz-short:
	$(GO) test -run '^$$' -fuzz '^FuzzParseRequest$$' -fuzztime 50000x ./protocol/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeBatches$$' -fuzztime 30000x ./protocol/

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseRequest$$' -fuzztime $(FUZZTIME) ./protocol/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeBatches$$' -fuzztime $(FUZZTIME) ./protocol/

## bench: kgate against the raw-Redis baseline in one run, plus the per-record micro-benchmarks and
## the append's Redis CPU per record against plain XADDs.
bench:
	$(GO) test -run '^$$' -bench . -skip AppendRedisCPU -benchmem ./protocol/ ./gateway/ ./redisstore/
	$(GO) test -run '^$$' -bench AppendRedisCPU -benchtime 100x ./redisstore/
	$(GO) run ./cmd/kgate-bench

clean:
	rm -rf bin
