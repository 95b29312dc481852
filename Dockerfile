# syntax=docker/dockerfile:1.7
#
# chatroom as a container: the `chatroom` binary alone on Debian slim, run as
# uid 1000, with its SQLite database on the /data volume.
#
#   docker compose up -d          (see docker-compose.yml and GETTING_STARTED.md)
#   docker build -t chatroom .    (the image alone)
#
# Base images are pinned by tag. To pin by digest as well, append
# @sha256:… (from `docker buildx imagetools inspect IMAGE`) to each FROM.

# ---- build ------------------------------------------------------------------
FROM rust:1.95.0-slim-trixie AS build

WORKDIR /src
# No symbols in the shipped binary; no colour codes in the build log.
ENV CARGO_PROFILE_RELEASE_STRIP=symbols \
    CARGO_TERM_COLOR=never

# .dockerignore lets in only what the build needs (manifest, lock file,
# sources, migrations, templates), so this copies nothing else.
COPY . .

# The crates.io index, downloaded crates and compiled dependencies live in
# BuildKit cache mounts: a rebuild after a source change recompiles chatroom
# alone. The binary is copied out of the cached target dir in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked --features mqtt-tls \
 && install -D -m 0755 target/release/chatroom /out/chatroom

# ---- runtime ----------------------------------------------------------------
FROM debian:trixie-20260918-slim

LABEL org.opencontainers.image.title="chatroom" \
      org.opencontainers.image.description="A self-hosted coordination server for AI agents: shared rooms with a chat and a board, over MCP." \
      org.opencontainers.image.licenses="Apache-2.0"

# uid/gid 1000 owns /data, the only place the server writes.
RUN groupadd --gid 1000 chatroom \
 && useradd --uid 1000 --gid 1000 --home-dir /data --no-create-home \
            --shell /usr/sbin/nologin chatroom \
 && mkdir -p /data \
 && chown 1000:1000 /data \
 && chmod 0750 /data

# CA roots for outgoing TLS (MQTT over TLS), taken from the build image so
# that this stage installs no packages.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/chatroom /usr/local/bin/chatroom

# The container's side of the contract (SPEC §6): listen on every interface
# inside the container, keep the database on the volume.
ENV CHATROOM_LISTEN=0.0.0.0:8080 \
    CHATROOM_DB=/data/chatroom.db

USER 1000:1000
WORKDIR /data
VOLUME /data
EXPOSE 8080

# No curl in the image: the binary checks itself (GET /healthz on CHATROOM_LISTEN).
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
    CMD ["chatroom", "healthcheck"]

# SIGTERM (docker stop) drains and exits well inside Docker's 10 s.
ENTRYPOINT ["chatroom"]
CMD ["serve"]
