# Multi-stage build: a static kgate binary on a distroless, non-root base.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/kgate ./cmd/kgate && \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/kgate-probe ./cmd/kgate-probe

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/kgate /out/kgate-probe /usr/local/bin/
USER nonroot:nonroot
EXPOSE 9092 8080
ENTRYPOINT ["/usr/local/bin/kgate"]
