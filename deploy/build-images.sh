#!/usr/bin/env bash
# Builds ember's release binaries and the images ember-driver:TAG and ember-executor:TAG
# FROM scratch (no registry is needed: nothing is pulled).
#   deploy/build-images.sh [TAG]        (TAG defaults to $EMBER_IMAGE_TAG, else "dev")
# Binaries are taken from cargo's own target directory (`cargo metadata`: honours
# CARGO_TARGET_DIR and build.target-dir), TARGET below.
# EMBER_BUILD_PROFILE=dev builds the images from debug binaries instead (TARGET/debug):
# CI's compose test does, since `cargo test` has built those already and a release build
# of the daemons and every example costs about 11 minutes on 2 cores. Images for use are
# built with the default, release.
# Also builds the examples (job binaries run as clients from the host or a container).
# Prints each image's size. The build context is staged under TARGET and removed.
set -euo pipefail
cd "$(dirname "$0")/.."
tag="${1:-${EMBER_IMAGE_TAG:-dev}}"

# Where cargo puts its output: CARGO_TARGET_DIR, a config's build.target-dir, else target/.
target_dir=$(cargo metadata --format-version 1 --no-deps \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
[ -n "$target_dir" ] || { echo "build-images: cargo metadata named no target directory" >&2; exit 2; }
profile="${EMBER_BUILD_PROFILE:-release}"
case "$profile" in
  release) out="$target_dir/release" ;;
  dev) out="$target_dir/debug" ;;
  *) echo "build-images: EMBER_BUILD_PROFILE must be release or dev, not '$profile'" >&2; exit 2 ;;
esac
cargo build --profile "$profile" -p ember-driver -p ember-executor
cargo build --profile "$profile" --examples

ctx="$target_dir/deploy-context-$$"
rm -rf "$ctx"
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/bin" "$ctx/rootfs/etc" "$ctx/rootfs/tmp" "$ctx/state/work" "$ctx/state/binaries"
chmod 1777 "$ctx/rootfs/tmp"
# The executor's work dir: 0711, since its workers run as other uids (--worker-uids) that
# must pass through it (not list it); the driver's binaries stay private.
chmod 0711 "$ctx/state/work"
chmod 0700 "$ctx/state/binaries"
for b in ember-driver ember-executor; do
  cp "$out/$b" "$ctx/bin/$b"
  strip "$ctx/bin/$b"
done

# Exactly the shared libraries the daemons and the job binaries (which executors run
# as workers) link, at the paths the dynamic loader looks for them. (ldd heads each
# file's list with "PATH:", absolute when the target directory is: not a library.)
libs() { ldd "$@" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $1 !~ /:$/ { print $1 }' | sort -u; }
jobs=$(find "$out/examples" -maxdepth 1 -type f -executable ! -name '*-*')
for lib in $(libs "$out/ember-driver" "$out/ember-executor" $jobs); do
  mkdir -p "$ctx/rootfs$(dirname "$lib")"
  cp -L "$lib" "$ctx/rootfs$lib"
done

printf 'root:x:0:0:root:/:/sbin/nologin\nember:x:10001:10001:ember:/var/lib/ember:/sbin/nologin\n' > "$ctx/rootfs/etc/passwd"
printf 'root:x:0:\nember:x:10001:\n' > "$ctx/rootfs/etc/group"
# Resolve names from /etc/hosts first, then DNS (docker's embedded resolver).
printf 'hosts: files dns\n' > "$ctx/rootfs/etc/nsswitch.conf"

cp deploy/Dockerfile "$ctx/Dockerfile"
for target in driver executor; do
  docker build -q --target "$target" -t "ember-$target:$tag" "$ctx" >/dev/null
  size=$(docker image inspect -f '{{.Size}}' "ember-$target:$tag")
  echo "built ember-$target:$tag ($size bytes)"
done
