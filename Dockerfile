# syntax=docker/dockerfile:1
#
# icefeed container image.
#
#   docker build -t icefeed .
#   docker run --rm -p 8080:8080 \
#     -e ICEFEED_DATABASE_URL=postgres://icefeed:icefeed@db-host:5432/icefeed \
#     -e ICEFEED_CHANGE_STORE=s3://bucket/icefeed \
#     -e ICEFEED_AUTH__ADMIN_TOKEN="$(openssl rand -hex 32)" \
#     icefeed                      # = icefeed serve; also: icefeed migrate, icefeed openapi
#
# The image listens on all interfaces, so it needs an admin token (or, behind
# something else that authenticates clients, ICEFEED_AUTH__ALLOW_UNAUTHENTICATED=true):
# without either, `serve` refuses to start and says so.
#
# Builds need BuildKit (the default builder since Docker 23): the cargo registry
# and the target directory are cache mounts, so a rebuild after a source change
# recompiles only icefeed itself, not its dependencies.

FROM rust:1.95-bookworm AS builder
WORKDIR /src
# Queries are checked against the committed .sqlx/: no database at build time.
ENV SQLX_OFFLINE=true
COPY . .
RUN --mount=type=cache,id=icefeed-cargo-registry,target=/usr/local/cargo/registry \
    --mount=type=cache,id=icefeed-cargo-git,target=/usr/local/cargo/git \
    --mount=type=cache,id=icefeed-target,target=/src/target,sharing=locked \
    cargo build --release --locked \
    && install -m 0755 target/release/icefeed /usr/local/bin/icefeed

FROM debian:bookworm-slim
# ca-certificates: TLS to object stores, catalogs and PostgreSQL. Not pinned:
# Debian's security updates replace the version within bookworm.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 icefeed \
    && useradd --system --uid 10001 --gid icefeed --home-dir /var/lib/icefeed \
       --create-home --shell /usr/sbin/nologin icefeed \
    && install -d -o icefeed -g icefeed /var/lib/icefeed/changes
COPY --from=builder /usr/local/bin/icefeed /usr/local/bin/icefeed
# Numeric, so that runAsNonRoot-style checks can verify it.
USER 10001:10001
WORKDIR /var/lib/icefeed
# The default change store is a local directory: mount a volume there, or set an
# s3://, gs:// or az:// URL. ICEFEED_DATABASE_URL must be set at run time. Catalogs,
# object stores and OpenSearch on private addresses (a VPC, a cluster network) must be
# listed in ICEFEED_NETWORK__ALLOWED_HOSTS (e.g. 10.0.0.0/8,minio.internal).
ENV ICEFEED_LISTEN=0.0.0.0:8080 \
    ICEFEED_CHANGE_STORE=/var/lib/icefeed/changes
EXPOSE 8080
# No HEALTHCHECK: the slim image has no HTTP client; orchestrators should probe
# GET /healthz (liveness) and GET /readyz (readiness) on port 8080.
ENTRYPOINT ["icefeed"]
CMD ["serve"]
