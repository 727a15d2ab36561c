#!/usr/bin/env bash
# Builds the two local Valkey images the project tests against, offline from Debian packages
# (no image registry is reachable here):
#
#   ${VALKEY_IMAGE:-valkey-operator/valkey:8.0}   bookworm-backports valkey-server/valkey-tools 8.0.x
#   ${VALKEY9_IMAGE:-valkey-operator/valkey:9.1}  sid valkey-server/valkey-tools 9.1.x
#
# Each also holds Debian's prometheus-redis-exporter of the same suite (bookworm's 1.45 in the
# 8.0 image, sid's in the 9.1 image): the operator runs it as the optional metrics sidecar of
# a node (ValkeyConfig spec.exporter), from the node's own image, so it needs no image of its
# own and nothing to pull.
#
# Both are root filesystems made of the valkey .debs plus the library .debs they link against,
# unpacked with `dpkg -x` and built FROM scratch (each image carries its own libc, so the sid
# packages never touch the host). Package lists live in a private apt state directory, apart from
# the system's, so nothing is installed on or changed in the host's apt configuration.
#
# Idempotent: an image that `docker image inspect` already finds is skipped (FORCE=1 rebuilds),
# but only if it carries this script's recipe stamp (the label valkey-operator.recipe, the
# SHA-256 of this file): an image built by an older version of the script (say, without the
# exporter) is rebuilt, so `make valkey-image` brings a developer's machine up to date.
# Both images hold /usr/bin/valkey-server, /usr/bin/valkey-cli,
# /usr/bin/prometheus-redis-exporter and busybox (as sh, sleep and date, for the exporter's
# supervisor), default to uid/gid 999 and
# work directory /data (writable by 999), and take plain server arguments, e.g.
#   docker run --rm valkey-operator/valkey:8.0 valkey-server --port 6379 --cluster-enabled yes
set -euo pipefail

VALKEY_IMAGE="${VALKEY_IMAGE:-valkey-operator/valkey:8.0}"
VALKEY9_IMAGE="${VALKEY9_IMAGE:-valkey-operator/valkey:9.1}"
WORK="${VALKEY_IMAGE_WORKDIR:-/var/tmp/valkey-image-build}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

log() { echo "valkey-image: $*" >&2; }

RECIPE="$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)"

# have_image TAG: the image exists and was built by this very recipe (FORCE=1: never).
have_image() {
	[[ "${FORCE:-0}" != 1 ]] &&
		[[ "$(docker image inspect --format '{{index .Config.Labels "valkey-operator.recipe"}}' "$1" 2>/dev/null)" == "$RECIPE" ]]
}

# apt_private NAME SOURCES... : an apt configuration of its own under $WORK/NAME/apt.
apt_private() {
	local name="$1"; shift
	local dir="$WORK/$name/apt"
	mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/etc/preferences.d"
	printf '%s\n' "$@" >"$dir/sources.list"
	APT_OPTS=(
		-o "Dir::Etc::SourceList=$dir/sources.list"
		-o "Dir::Etc::SourceParts=/dev/null"
		-o "Dir::Etc::Preferences=/dev/null"
		-o "Dir::Etc::PreferencesParts=$dir/etc/preferences.d"
		-o "Dir::State::Lists=$dir/lists"
		-o "Dir::Cache=$dir/cache"
		-o "APT::Get::List-Cleanup=0"
		-o "Acquire::Languages=none"
		-o "APT::Sandbox::User=root"
	)
	# Refresh the private lists unless they were fetched within the last day.
	if [[ -z "$(find "$dir/lists" -maxdepth 1 -name '*Packages*' -mmin -1440 2>/dev/null | head -n1)" ]]; then
		log "apt-get update ($name)"
		apt-get "${APT_OPTS[@]}" -qq update >&2
	fi
}

# make_rootfs NAME PACKAGE... : downloads the packages (PACKAGE may be pkg/release) with the
# private apt configuration and unpacks them into $WORK/NAME/rootfs.
make_rootfs() {
	local name="$1"; shift
	local debs="$WORK/$name/debs" rootfs="$WORK/$name/rootfs"
	rm -rf "$debs" "$rootfs"
	mkdir -p "$debs" "$rootfs"
	log "downloading ${#@} packages ($name)"
	(cd "$debs" && apt-get "${APT_OPTS[@]}" -qq download "$@" >&2)
	for deb in "$debs"/*.deb; do dpkg -x "$deb" "$rootfs"; done
	# bookworm's busybox-static installs /bin/busybox, the only file outside /usr: move it in,
	# so that /bin can point at /usr/bin below.
	if [[ -f "$rootfs/bin/busybox" ]]; then
		mv "$rootfs/bin/busybox" "$rootfs/usr/bin/busybox" && rmdir "$rootfs/bin"
	fi
	# Merged-/usr layout: make /lib, /lib64, /bin point into /usr when the packages used /usr only.
	for d in lib lib64 bin sbin; do
		if [[ ! -e "$rootfs/$d" && -d "$rootfs/usr/$d" ]]; then ln -s "usr/$d" "$rootfs/$d"; fi
	done
	# busybox-static is one static binary; the exporter sidecar's supervisor is a POSIX shell
	# script (render.ExporterSupervisor) that needs sh, sleep and date, so those three names
	# point at it (its other applets stay unlinked).
	for applet in sh sleep date; do
		[[ -e "$rootfs/usr/bin/$applet" ]] || ln -s busybox "$rootfs/usr/bin/$applet"
	done
	for bin in valkey-server valkey-cli prometheus-redis-exporter busybox sh sleep date; do
		[[ -e "$rootfs/usr/bin/$bin" ]] || { log "missing /usr/bin/$bin in $name rootfs"; exit 1; }
	done
	mkdir -p "$rootfs/data" "$rootfs/tmp" "$rootfs/etc/valkey/acl" "$rootfs/etc/valkey/tls"
	chmod 1777 "$rootfs/tmp"
	chown 999:999 "$rootfs/data"
	printf 'root:x:0:0:root:/root:/nonexistent\nvalkey:x:999:999:valkey:/data:/nonexistent\n' >"$rootfs/etc/passwd"
	printf 'root:x:0:\nvalkey:x:999:\n' >"$rootfs/etc/group"
	# Every shared library must resolve inside the rootfs itself (it carries its own loader).
	local missing
	missing="$(chroot "$rootfs" /lib64/ld-linux-x86-64.so.2 --list /usr/bin/valkey-server 2>&1 | grep 'not found' || true)"
	missing+="$(chroot "$rootfs" /lib64/ld-linux-x86-64.so.2 --list /usr/bin/valkey-cli 2>&1 | grep 'not found' || true)"
	missing+="$(chroot "$rootfs" /lib64/ld-linux-x86-64.so.2 --list /usr/bin/prometheus-redis-exporter 2>&1 | grep 'not found' || true)"
	if [[ -n "$missing" ]]; then
		log "$name rootfs lacks libraries:"; echo "$missing" >&2; exit 1
	fi
	chroot --userspec=999:999 "$rootfs" /usr/bin/valkey-server --version >&2
	chroot --userspec=999:999 "$rootfs" /usr/bin/prometheus-redis-exporter -version >&2
	chroot --userspec=999:999 "$rootfs" /usr/bin/sh -c 'sleep 0; date +%s' >&2
}

# build_image NAME TAG : FROM scratch image of $WORK/NAME/rootfs. `docker import` keeps the
# rootfs ownership (/data owned by 999) and works without BuildKit.
build_image() {
	local name="$1" tag="$2"
	log "importing $tag"
	tar -C "$WORK/$name/rootfs" --numeric-owner -cf - . |
		docker import \
			--change 'USER 999:999' \
			--change 'WORKDIR /data' \
			--change 'ENV PATH=/usr/bin:/bin' \
			--change 'EXPOSE 6379 16379 9121' \
			--change 'CMD ["valkey-server"]' \
			--change "LABEL valkey-operator.recipe=$RECIPE" \
			- "$tag" >/dev/null
	docker run --rm --user 999:999 "$tag" valkey-server --version
	docker run --rm --user 999:999 "$tag" valkey-cli --version
	docker run --rm --user 999:999 "$tag" prometheus-redis-exporter -version
}

LIBS_COMMON=(libc6 libsystemd0 libjemalloc2 liblzf1 libatomic1 libcap2 libgcc-s1 libstdc++6
	libzstd1 liblz4-1 liblzma5 libgcrypt20 libgpg-error0 zlib1g)

command -v docker >/dev/null || { log "docker not found"; exit 1; }
if ! have_image "$VALKEY_IMAGE" || ! have_image "$VALKEY9_IMAGE"; then
	command -v dpkg >/dev/null && command -v apt-get >/dev/null || { log "needs a Debian host (apt-get, dpkg)"; exit 1; }
fi

if have_image "$VALKEY_IMAGE"; then
	log "$VALKEY_IMAGE present (recipe $RECIPE), skipping"
else
	apt_private bookworm \
		"deb $MIRROR bookworm main" \
		"deb $MIRROR bookworm-updates main" \
		"deb $MIRROR bookworm-backports main"
	make_rootfs valkey8 valkey-server/bookworm-backports valkey-tools/bookworm-backports \
		prometheus-redis-exporter busybox-static libssl3 "${LIBS_COMMON[@]}"
	build_image valkey8 "$VALKEY_IMAGE"
fi

if have_image "$VALKEY9_IMAGE"; then
	log "$VALKEY9_IMAGE present (recipe $RECIPE), skipping"
else
	apt_private sid "deb $MIRROR sid main"
	make_rootfs valkey9 valkey-server valkey-tools prometheus-redis-exporter busybox-static libssl3t64 "${LIBS_COMMON[@]}"
	build_image valkey9 "$VALKEY9_IMAGE"
fi
