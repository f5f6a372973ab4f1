#!/usr/bin/env bash
# Builds (once) and caches the Linux kernel with sched_ext that `dfsched-vmbench run --scx` boots.
#
# Usage: build.sh [CACHE_DIR]        prints the cached bzImage's path as the last line of stdout
#   CACHE_DIR  default: $DFSCHED_VMBENCH_CACHE/scx-kernel, else target/vmbench/scx-kernel of this repository
#
# What it does:
#   - source: Debian's `linux-source-6.12` package (/usr/src/linux-source-6.12.tar.xz), with the build tools
#     (bc bison flex libelf-dev libssl-dev dwarves make gcc xz-utils); whatever is missing is installed with
#     apt-get when running as root (DFSCHED_VMBENCH_NO_INSTALL=1 forbids it), else the error names the command.
#   - config: x86_64 `defconfig` + `kvm_guest.config` + the fragment `scx.config` beside this script, then
#     `olddefconfig`; every line of the fragment must survive into the final .config or the build stops.
#   - cache key: the package's version and the fragment's SHA-256 (first 12 hex digits):
#     CACHE_DIR/<version>-<hash>/bzImage (+ config, build.log). A cached image is returned at once.
#   - one build at a time: an flock on CACHE_DIR/.lock; a second caller waits, then finds the image cached.
#   - builds out of tree under CACHE_DIR/build/ at `nice 19` / `ionice -c3` (DFSCHED_SCX_KERNEL_NICE=0 turns it
#     off), with `make -j$(nproc)` (DFSCHED_SCX_KERNEL_JOBS overrides); about 30-40 minutes on 2 cores.
#   - deletes the unpacked source and the objects after success (DFSCHED_SCX_KERNEL_KEEP=1 keeps them);
#     after a failure they are kept for a look and reused by the next attempt's unpack.
# Exit status: 0 with the path printed; 1 with a message saying which step failed and the log's tail.
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
fragment=$here/scx.config
package=linux-source-6.12
tarball=/usr/src/$package.tar.xz
tools=(bc bison flex libelf-dev libssl-dev dwarves make gcc xz-utils)

say() { echo "scx-kernel: $*" >&2; }
die() { say "error: $*"; exit 1; }

usage() { sed -n '2,/^set -Eeuo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
case ${1:-} in
  -h | --help) usage; exit 0 ;;
  -*) usage >&2; exit 2 ;;
esac
[ $# -le 1 ] || { usage >&2; exit 2; }
if [ -n "${1:-}" ]; then
  cache=$1
elif [ -n "${DFSCHED_VMBENCH_CACHE:-}" ]; then
  cache=$DFSCHED_VMBENCH_CACHE/scx-kernel
else
  cache=$(cd "$here/../../.." && pwd)/target/vmbench/scx-kernel
fi
[ -f "$fragment" ] || die "the config fragment $fragment is missing"
[ "$(uname -m)" = x86_64 ] || die "builds an x86_64 kernel and runs on x86_64 only (this is $(uname -m))"

# --- prerequisites -------------------------------------------------------------------------------------
missing=()
for p in "$package" "${tools[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || [ -n "${DFSCHED_VMBENCH_NO_INSTALL:-}" ]; then
    die "missing packages: ${missing[*]}; install them with: apt-get install --no-install-recommends ${missing[*]}"
  fi
  say "installing ${missing[*]} with apt-get (the kernel source is about 150 MB)"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2; then
    say "apt-get install failed; refreshing the package lists once (apt-get update) and trying again"
    apt-get update -qq >&2 || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 \
      || die "apt-get install --no-install-recommends ${missing[*]} failed (see above)"
  fi
fi
[ -f "$tarball" ] || die "$package is installed but $tarball is not there"

version=$(dpkg-query -W -f='${Version}' "$package")
hash=$(sha256sum "$fragment" | cut -c1-12)
key=${version//[^A-Za-z0-9.+-]/_}-$hash
dest=$cache/$key
if [ -f "$dest/bzImage" ]; then
  echo "$dest/bzImage"
  exit 0
fi

# --- one build at a time ----------------------------------------------------------------------------
mkdir -p "$cache"
exec 9>"$cache/.lock"
if ! flock -n 9; then
  say "another build holds $cache/.lock; waiting for it"
  flock 9
fi
if [ -f "$dest/bzImage" ]; then # built by the holder we waited for
  echo "$dest/bzImage"
  exit 0
fi

# --- build ------------------------------------------------------------------------------------------
work=$cache/build/$key
src=$work/src
obj=$work/obj
log=$work/build.log
mkdir -p "$work"
: >"$log"
step=start
on_error() {
  local rc=$?
  say "error: step '$step' failed (exit $rc); the build tree is kept in $work"
  if [ -s "$log" ]; then
    say "last lines of $log:"
    tail -n 30 "$log" >&2
  fi
  exit 1
}
trap on_error ERR

run() { # run STEP CMD...: logs the command's output; the ERR trap names STEP if it fails
  step=$1
  shift
  echo "+ $*" >>"$log"
  "$@" >>"$log" 2>&1
}
quiet=()
if [ "${DFSCHED_SCX_KERNEL_NICE:-19}" != 0 ]; then
  quiet=(nice -n "${DFSCHED_SCX_KERNEL_NICE:-19}")
  command -v ionice >/dev/null && quiet+=(ionice -c3)
fi
jobs=${DFSCHED_SCX_KERNEL_JOBS:-$(nproc)}
started=$(date +%s)

say "building Linux from $package $version with $(basename "$fragment") ($hash) in $work"
say "this takes about 30-40 minutes on 2 cores; progress: tail -f $log"
if [ ! -f "$src/Makefile" ]; then
  rm -rf "$src"
  mkdir -p "$src"
  run unpack "${quiet[@]}" tar -xf "$tarball" -C "$src" --strip-components=1
fi
mkdir -p "$obj"
run defconfig make -C "$src" O="$obj" defconfig
run kvm_guest.config make -C "$src" O="$obj" kvm_guest.config
run merge-fragment "$src/scripts/kconfig/merge_config.sh" -m -O "$obj" "$obj/.config" "$fragment"
run olddefconfig make -C "$src" O="$obj" olddefconfig

step=check-config
dropped=()
while IFS= read -r line; do
  case $line in
    CONFIG_*=*) grep -qxF "$line" "$obj/.config" || dropped+=("$line") ;;
    "# CONFIG_"*" is not set")
      opt=${line#\# }
      opt=${opt%% *}
      ! grep -q "^$opt=" "$obj/.config" || dropped+=("$line")
      ;;
  esac
done <"$fragment"
if [ ${#dropped[@]} -gt 0 ]; then
  trap - ERR
  die "olddefconfig did not keep these lines of $fragment (a dependency is missing): ${dropped[*]}"
fi

run bzImage "${quiet[@]}" make -C "$src" O="$obj" -j"$jobs" bzImage
step=install
kver=$(make -s -C "$src" O="$obj" kernelrelease 2>>"$log")
tmp=$cache/.tmp-$key
rm -rf "$tmp"
mkdir -p "$tmp"
cp "$obj/arch/x86/boot/bzImage" "$tmp/bzImage"
cp "$obj/.config" "$tmp/config"
cp "$log" "$tmp/build.log"
{
  echo "kernel $kver"
  echo "source $package $version"
  echo "fragment sha256 $(sha256sum "$fragment" | cut -d' ' -f1)"
  echo "built $(date -u +%FT%TZ) in $(($(date +%s) - started)) s"
} >"$tmp/BUILD-INFO"
rm -rf "$dest"
mv "$tmp" "$dest"
trap - ERR

size=$(du -sh "$work" | cut -f1)
if [ -n "${DFSCHED_SCX_KERNEL_KEEP:-}" ]; then
  say "kept the build tree $work ($size)"
else
  rm -rf "$work"
  rmdir "$cache/build" 2>/dev/null || true
  say "deleted the build tree ($size)"
fi
say "built $kver in $(($(date +%s) - started)) s: $dest/bzImage"
echo "$dest/bzImage"
