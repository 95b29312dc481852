#
# chatroom as a container: one statically linked `chatroom` binary on an
# empty base, run as uid 1000, with its SQLite database on the /data volume.
#
#   docker compose up -d          (see docker-compose.yml and GETTING_STARTED.md)
#   docker build -t chatroom .    (the image alone)
#
# No `# syntax=` line: the build uses the engine's built-in frontend, so a
# host without registry access that has the build image can build it.
# The build image is pinned by tag. To pin it by digest as well, append
# @sha256:… (from `docker buildx imagetools inspect IMAGE`) to its FROM.

# ---- build ------------------------------------------------------------------
FROM rust:1.95.0-slim-trixie AS build

# The final image's whole file system, assembled here: the user and group
# names for uid/gid 1000, the CA roots for outgoing TLS (MQTT over TLS),
# /data owned by uid 1000 (the only place the server writes) and a /tmp.
# Ahead of the sources, so a source change does not redo it.
RUN mkdir -p /rootfs/etc/ssl/certs /rootfs/usr/local/bin /rootfs/data /rootfs/tmp \
 && printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nchatroom:x:1000:1000:chatroom:/data:/usr/sbin/nologin\n' \
      > /rootfs/etc/passwd \
 && printf 'root:x:0:\nchatroom:x:1000:\n' > /rootfs/etc/group \
 && cp /etc/ssl/certs/ca-certificates.crt /rootfs/etc/ssl/certs/ \
 && chown 1000:1000 /rootfs/data \
 && chmod 0750 /rootfs/data \
 && chmod 1777 /rootfs/tmp

WORKDIR /src
# No colour codes in the build log.
ENV CARGO_TERM_COLOR=never

# .dockerignore lets in only what the build needs (manifest, lock file,
# sources, migrations, templates), so this copies nothing else.
COPY . .

# The crates.io index, downloaded crates and compiled dependencies live in
# BuildKit cache mounts: a rebuild after a source change recompiles chatroom
# alone. The binary is copied out of the cached target dir in the same step.
#
# glibc linked in statically (crt-static), so the binary needs no shared
# library and the final stage can be empty; host names (MQTT broker,
# PostgreSQL service) still resolve through /etc/hosts and DNS. The
# explicit --target keeps that flag off build scripts and proc macros.
#
# The symbols are stripped after the build (`install -s`), not by the
# profile: a profile setting changes every function's symbol name, and
# link/startup.order, which lays out start-up's functions together, names
# them as a release build with these flags and features does.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    triple="$(rustc --print host-tuple)" \
 && RUSTFLAGS='-C target-feature=+crt-static' \
    cargo build --release --locked --features mqtt-tls --target "$triple" \
 && install -s -m 0755 "target/$triple/release/chatroom" /rootfs/usr/local/bin/chatroom

# ---- runtime ----------------------------------------------------------------
# Nothing but the binary and the files above: no shell, no package manager.
# `docker compose exec chatroom chatroom admin …` runs the binary directly.
FROM scratch

LABEL org.opencontainers.image.title="chatroom" \
      org.opencontainers.image.description="A self-hosted coordination server for AI agents: shared rooms with a chat and a board, over MCP." \
      org.opencontainers.image.licenses="Apache-2.0"

# One layer; COPY --from keeps the owners and modes set in the build stage.
COPY --from=build /rootfs/ /

# The container's side of the contract (SPEC §6): listen on every interface
# inside the container, keep the database on the volume.
ENV PATH=/usr/local/bin \
    CHATROOM_LISTEN=0.0.0.0:8080 \
    CHATROOM_DB=/data/chatroom.db

USER 1000:1000
WORKDIR /data
VOLUME /data
EXPOSE 8080

# No curl in the image: the binary checks itself (GET /healthz on CHATROOM_LISTEN),
# every 10 s, so the container reports healthy soon after a start.
HEALTHCHECK --interval=10s --timeout=5s --start-period=15s --retries=3 \
    CMD ["chatroom", "healthcheck"]

# SIGTERM (docker stop) drains and exits well inside Docker's 10 s.
ENTRYPOINT ["chatroom"]
CMD ["serve"]
