# The Sluice service image: a static sluice binary on distroless's static
# image (CA certificates, time zone data, /etc/passwd with the nonroot
# user, and no shell or package manager), running `sluice serve`.
#
#   docker build -t sluice .
#   docker run -p 8080:8080 -p 8081:8081 -p 9090:9090 sluice
#
# The build context needs .git, so that the binary says which commit it is
# (sluice version); without it the binary says "(devel)".
# docs/operations.md, "Containers and Kubernetes", says what is tested.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The release build: static (CGO_ENABLED=0), -trimpath, stamped with the
# commit and no other time (scripts/release.sh).
RUN bash scripts/release.sh /out/sluice

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sluice /usr/local/bin/sluice
# The same binary as envoyproxy/ratelimit's /bin/ratelimit: run under that
# name it is `sluice serve --envoy-env`, so that Envoy Gateway's rate limit
# deployment, whose command is /bin/ratelimit, starts it unchanged
# (docs/envoy.md, "Replacing envoyproxy/ratelimit in Envoy Gateway").
COPY --from=build /out/sluice /bin/ratelimit
COPY deploy/sluice.yaml /etc/sluice/sluice.yaml
# nonroot (65532:65532) from distroless's /etc/passwd.
USER 65532:65532
# HTTP (decision API, forward-auth, proxy, /healthz, /readyz), Envoy's
# rate limit service (gRPC), admin (/metrics, status page, /v1/status).
EXPOSE 8080 8081 9090
# Health endpoints, on the HTTP port: liveness GET /healthz, readiness GET
# /readyz (503 while draining or while the store cannot decide). The image
# has no shell or HTTP client for a Docker HEALTHCHECK: orchestrators probe
# these paths themselves (deploy/kubernetes/deployment.yaml).
LABEL org.opencontainers.image.title="sluice" \
      org.opencontainers.image.description="Sluice rate limit service" \
      org.opencontainers.image.source="https://github.com/sluicehq/sluice" \
      io.sluice.health.liveness="http://:8080/healthz" \
      io.sluice.health.readiness="http://:8080/readyz"
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/sluice", "serve"]
CMD ["--config", "/etc/sluice/sluice.yaml", "--log-format", "json", "--drain-delay", "5s"]
