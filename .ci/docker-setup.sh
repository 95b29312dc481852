#!/usr/bin/env bash
# What tests/docker/smoke.sh needs to build chatroom's image and run its
# compose files: a Docker engine with the buildx and compose v2 plugins, and
# the base images the Dockerfile names. For Debian and Ubuntu; run as root.
# Idempotent: a second run only checks. .ci/run runs it.
#
#   bash .ci/docker-setup.sh [DOCKERFILE]     (default: Dockerfile)
#
# 1. The engine. One that answers `docker info` is used as it is. Otherwise
#    docker.io from the machine's own package archive, started by systemd
#    where systemd runs, else as a background dockerd in a session of its own
#    (it outlives this script; log /var/log/dockerd.log).
# 2. The buildx and compose v2 plugins, from the machine's archive
#    (docker-buildx, docker-compose-v2, or docker-compose when it is v2).
#    Debian 12 has neither: there they come from Debian 13's packages,
#    fetched by apt with the archive's signatures checked, and unpacked into
#    /usr/local/lib/docker/cli-plugins.
# 3. Every base image a FROM names that is not present: pulled where a
#    registry answers. Where none does (an air-gapped host, or
#    CHATROOM_DOCKER_PULL=0), made here from the Debian archive with
#    debootstrap, under the same name and for the same role:
#      debian:SUITE, debian:SUITE-slim   minbase SUITE with ca-certificates
#      rust:VERSION-slim-SUITE          the same with gcc and libc6-dev, and
#                                       Rust VERSION installed the way the
#                                       official image does it (rustup,
#                                       minimal profile, /usr/local/cargo);
#                                       with static.rust-lang.org out of reach
#                                       too, this machine's toolchain when it
#                                       is that version.
#    They trust the CAs this machine trusts (its CA bundle is copied in), so
#    a build behind a TLS-inspecting proxy reaches crates.io like the host.
set -euo pipefail

dockerfile=${1:-Dockerfile}
work=${CHATROOM_BASE_IMAGES_DIR:-${TMPDIR:-/tmp}/chatroom-base-images}
plugins=/usr/local/lib/docker/cli-plugins
started=$SECONDS

say() { echo "[docker-setup] $*"; }
die() {
  echo "[docker-setup] $*" >&2
  exit 1
}

[ "$(id -u)" = 0 ] || die "run as root: it installs packages and starts dockerd"
[ -f "$dockerfile" ] || die "no $dockerfile here"
command -v apt-get >/dev/null 2>&1 ||
  die "this script knows Debian and Ubuntu (apt). Elsewhere install Docker Engine with the buildx and compose plugins (https://docs.docker.com/engine/install/), then run tests/docker/smoke.sh"

apt_updated=0
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  if [ "$apt_updated" = 0 ]; then
    apt-get update -qq
    apt_updated=1
  fi
  say "apt-get install $*"
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
# has_candidate PACKAGE: the machine's archive offers PACKAGE.
has_candidate() {
  local c
  c=$(apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}')
  [ -n "$c" ] && [ "$c" != "(none)" ]
}
candidate_version() { apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}'; }

# The Debian mirror the machine's apt uses, or deb.debian.org (an Ubuntu host).
debian_mirror() {
  local m
  m=$(grep -h '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' |
    grep -E '/debian/?$' | head -1 || true)
  [ -n "$m" ] || m=$(grep -h '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk '{for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; exit}}' | grep -E '/debian/?$' | head -1 || true)
  echo "${m:-http://deb.debian.org/debian}"
}

# ---- 1. the engine ------------------------------------------------------------
if ! docker info >/dev/null 2>&1; then
  if ! command -v dockerd >/dev/null 2>&1; then
    [ "$apt_updated" = 1 ] || { apt-get update -qq; apt_updated=1; }
    has_candidate docker.io || die "the package archive has no docker.io: install Docker Engine (https://docs.docker.com/engine/install/)"
    # The CLI comes with it unless one is installed already.
    apt_install docker.io
  fi
  if [ -d /run/systemd/system ] && systemctl start docker 2>/dev/null; then
    say "started docker.service"
  else
    say "starting dockerd in the background (log /var/log/dockerd.log)"
    setsid nohup dockerd >>/var/log/dockerd.log 2>&1 </dev/null &
  fi
  for _ in $(seq 1 120); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  docker info >/dev/null 2>&1 || {
    tail -20 /var/log/dockerd.log 2>/dev/null
    die "dockerd did not answer within 60 s"
  }
fi

# ---- 2. the buildx and compose v2 plugins ---------------------------------------
have_buildx() { docker buildx version >/dev/null 2>&1; }
have_compose() { docker compose version >/dev/null 2>&1; }
if ! have_buildx || ! have_compose; then
  [ "$apt_updated" = 1 ] || { apt-get update -qq; apt_updated=1; }
  want=()
  if ! have_buildx && has_candidate docker-buildx; then want+=(docker-buildx); fi
  if ! have_compose; then
    if has_candidate docker-compose-v2; then
      want+=(docker-compose-v2)
    elif has_candidate docker-compose && [ "$(candidate_version docker-compose | cut -c1)" -ge 2 ] 2>/dev/null; then
      want+=(docker-compose)
    fi
  fi
  [ ${#want[@]} -eq 0 ] || apt_install "${want[@]}"
fi
if ! have_buildx || ! have_compose; then
  # Debian 12: the plugins from Debian 13, by an apt of its own (own sources
  # list, lists and cache), so the machine's apt state is not touched.
  side="$work/apt-trixie"
  keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  [ -f "$keyring" ] || apt_install debian-archive-keyring
  mkdir -p "$side/lists/partial" "$side/cache/archives/partial" "$side/parts" "$side/debs"
  echo "deb [signed-by=$keyring] $(debian_mirror) trixie main" >"$side/sources.list"
  side_apt=(-o "Dir::Etc::SourceList=$side/sources.list" -o "Dir::Etc::SourceParts=$side/parts"
    -o "Dir::State::Lists=$side/lists" -o "Dir::Cache=$side/cache" -o "APT::Get::List-Cleanup=0"
    -o "APT::Sandbox::User=root")
  say "buildx and compose plugins from Debian trixie ($(debian_mirror))"
  apt-get "${side_apt[@]}" update -qq
  (cd "$side/debs" && apt-get "${side_apt[@]}" download docker-buildx docker-compose >/dev/null)
  x=$(mktemp -d)
  for deb in "$side"/debs/*.deb; do dpkg-deb -x "$deb" "$x"; done
  mkdir -p "$plugins"
  install -m 0755 "$x"/usr/libexec/docker/cli-plugins/docker-buildx "$x"/usr/libexec/docker/cli-plugins/docker-compose "$plugins/"
  rm -rf "$x" "$side"
fi
have_buildx || die "docker buildx still does not answer"
have_compose || die "docker compose (v2) still does not answer"

# ---- 3. the base images -------------------------------------------------------
grep -qE '^[[:space:]]*FROM[^#]*\$' "$dockerfile" && die "$dockerfile has a FROM with a variable: name its images plainly"
# FROM [--platform=…] IMAGE [AS NAME]: the images, without the stage names.
froms=$(sed -nE 's/^[[:space:]]*FROM[[:space:]]+(--[^[:space:]]+[[:space:]]+)*([^[:space:]]+).*/\2/Ip' "$dockerfile")
stages=$(sed -nE 's/^[[:space:]]*FROM[[:space:]].*[[:space:]]AS[[:space:]]+([^[:space:]]+).*/\1/Ip' "$dockerfile")

# pull IMAGE: true when a registry gave it.
pull() {
  [ "${CHATROOM_DOCKER_PULL:-1}" != 0 ] || return 1
  say "docker pull $1"
  if timeout 600 docker pull -q "$1" >"$work/pull.log" 2>&1; then
    return 0
  fi
  say "no registry answered ($(tail -1 "$work/pull.log")): making $1 here"
  return 1
}

# in_root DIR COMMAND: COMMAND in the chroot DIR, with name resolution and /proc.
in_root() {
  cp /etc/resolv.conf "$1/etc/resolv.conf"
  mount -t proc proc "$1/proc"
  local rc=0
  chroot "$1" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root DEBIAN_FRONTEND=noninteractive bash -ec "$2" || rc=$?
  umount "$1/proc"
  : >"$1/etc/resolv.conf"
  return "$rc"
}

# rootfs SUITE DIR [PACKAGE,…]: a minbase SUITE at DIR with ca-certificates
# (and the packages), trusting this machine's CAs, apt lists dropped.
rootfs() {
  local suite=$1 dir=$2 extra=${3:-}
  command -v debootstrap >/dev/null 2>&1 || apt_install debootstrap
  [ -f /usr/share/keyrings/debian-archive-keyring.gpg ] || apt_install debian-archive-keyring
  rm -rf "$dir"
  mkdir -p "$dir"
  say "debootstrap $suite (minbase${extra:+ + $extra}) from $(debian_mirror)"
  debootstrap --variant=minbase --include="ca-certificates${extra:+,$extra}" \
    --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
    "$suite" "$dir" "$(debian_mirror)" >"$dir.debootstrap.log" 2>&1 ||
    { tail -20 "$dir.debootstrap.log"; die "debootstrap $suite failed (log above)"; }
  rm -f "$dir.debootstrap.log"
  cp /etc/ssl/certs/ca-certificates.crt "$dir/etc/ssl/certs/ca-certificates.crt"
  rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/*.bin "$dir"/var/cache/apt/archives/*.deb
}

# import DIR IMAGE [--change …]: the tree at DIR as IMAGE.
import() {
  local dir=$1 image=$2
  shift 2
  say "docker import $image"
  tar --numeric-owner -C "$dir" -c . | docker import --change 'CMD ["bash"]' "$@" - "$image" >/dev/null
  rm -rf "$dir"
}

# rust_into DIR VERSION: Rust VERSION in /usr/local/{rustup,cargo} of the tree DIR.
rust_into() {
  local dir=$1 version=$2 arch url
  arch=$(uname -m)
  url="https://static.rust-lang.org/rustup/dist/$arch-unknown-linux-gnu/rustup-init"
  if curl -fsS --max-time 60 -o "$dir/tmp/rustup-init" "$url" &&
    [ "$(curl -fsS --max-time 30 "$url.sha256" | awk '{print $1}')" = "$(sha256sum "$dir/tmp/rustup-init" | awk '{print $1}')" ]; then
    say "rustup: Rust $version, minimal profile"
    chmod +x "$dir/tmp/rustup-init"
    in_root "$dir" "RUSTUP_HOME=/usr/local/rustup CARGO_HOME=/usr/local/cargo \
      /tmp/rustup-init -y -q --no-modify-path --profile minimal --default-toolchain $version \
      && chmod -R a+w /usr/local/rustup /usr/local/cargo && rm /tmp/rustup-init" >"$dir.rustup.log" 2>&1 ||
      { tail -20 "$dir.rustup.log"; die "rustup could not install Rust $version (log above)"; }
    rm -f "$dir.rustup.log"
    return 0
  fi
  rm -f "$dir/tmp/rustup-init"
  local have sysroot
  have=$(rustc --version 2>/dev/null | awk '{print $2}' || true)
  [ "$have" = "$version" ] ||
    die "static.rust-lang.org does not answer and this machine's rustc is ${have:-missing}, not $version: cannot make rust:$version"
  sysroot=$(rustc --print sysroot)
  say "static.rust-lang.org does not answer: this machine's Rust $have ($sysroot)"
  mkdir -p "$dir/usr/local/rustup/toolchains/$version" "$dir/usr/local/cargo/bin"
  # rustc, cargo and the standard library; no docs, no sources.
  tar -C "$sysroot" --exclude=./share/doc --exclude=./lib/rustlib/src -c . |
    tar -C "$dir/usr/local/rustup/toolchains/$version" -x
  for tool in cargo rustc rustdoc; do
    ln -s "/usr/local/rustup/toolchains/$version/bin/$tool" "$dir/usr/local/cargo/bin/$tool"
  done
}

mkdir -p "$work"
for image in $(printf '%s\n' $froms | sort -u); do
  [ "$image" = scratch ] && continue
  grep -qxF "$image" <<<"$stages" && continue
  if docker image inspect "$image" >/dev/null 2>&1; then
    say "have $image"
    continue
  fi
  pull "$image" && continue
  case "$image" in
    debian:*)
      suite=$(sed -E 's/^debian:([a-z]+).*/\1/' <<<"$image")
      rootfs "$suite" "$work/$suite"
      import "$work/$suite" "$image" ;;
    rust:*-slim-*)
      suite=${image##*-slim-}
      version=$(sed -E 's/^rust:([0-9.]+)-.*/\1/' <<<"$image")
      tree="$work/rust-$suite"
      rootfs "$suite" "$tree" gcc,libc6-dev
      rust_into "$tree" "$version"
      import "$tree" "$image" \
        --change 'ENV RUSTUP_HOME=/usr/local/rustup' --change 'ENV CARGO_HOME=/usr/local/cargo' \
        --change 'ENV PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change "ENV RUST_VERSION=$version" ;;
    *) die "$image: no registry answers and there is no recipe for it here" ;;
  esac
done
rm -rf "$work"

say "ready in $((SECONDS - started)) s: engine $(docker version --format '{{.Server.Version}}'), buildx $(docker buildx version | awk '{print $2}'), compose $(docker compose version --short)"
