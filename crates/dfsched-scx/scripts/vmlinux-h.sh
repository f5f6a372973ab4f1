#!/usr/bin/env bash
# Writes the vmlinux.h that the BPF scheduler of dfsched-scx is compiled against: the C types of the
# sched_ext kernel, dumped from the BTF inside its bzImage. No VM boot is needed: a bzImage holds the
# compressed vmlinux ELF, whose .BTF section is the same data the guest shows at /sys/kernel/btf/vmlinux.
#
# Usage: vmlinux-h.sh [BZIMAGE] [OUT]
#   BZIMAGE  default: $DFSCHED_SCX_KERNEL, else the newest image the VM bench built and cached
#            (crates/dfsched-vmbench/scx-kernel/build.sh, run by `cargo run -p dfsched-vmbench --
#            scx-kernel` or `run --scx`: $DFSCHED_VMBENCH_CACHE or <workspace>/target/vmbench, then
#            scx-kernel/*/bzImage)
#   OUT      default: <workspace>/target/scx/<BZIMAGE's folder>-<BZIMAGE's name>/vmlinux.h
#            (git-ignored; 3.4 MB, never committed), one per kernel image, so a header never serves
#            another kernel
# Needs: bpftool (Debian: apt-get install bpftool), gzip/xz/zstd for the kernel's compression.
# Cached: OUT is rewritten only when BZIMAGE is newer than it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
image=${1:-${DFSCHED_SCX_KERNEL:-}}
if [ -z "$image" ]; then
  cached=${DFSCHED_VMBENCH_CACHE:-$root/target/vmbench}/scx-kernel
  image=$(ls -t "$cached"/*/bzImage 2>/dev/null | head -n 1 || true)
  [ -n "$image" ] || {
    echo "vmlinux-h.sh: no sched_ext kernel image: none cached in $cached; build one with" \
      "\`cargo run -p dfsched-vmbench -- scx-kernel\` (≈ 30-40 min) or set DFSCHED_SCX_KERNEL=BZIMAGE" >&2
    exit 1
  }
fi
out=${2:-$root/target/scx/$(basename "$(dirname "$image")")-$(basename "$image")/vmlinux.h}
[ -f "$image" ] || { echo "vmlinux-h.sh: no kernel image at $image (build one with \`cargo run -p dfsched-vmbench -- scx-kernel\`)" >&2; exit 1; }
if [ -s "$out" ] && [ "$out" -nt "$image" ]; then echo "$out"; exit 0; fi
bpftool=$(command -v bpftool || echo /usr/sbin/bpftool)
[ -x "$bpftool" ] || { echo "vmlinux-h.sh: bpftool not found (apt-get install bpftool)" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# The compressed payload starts at its format's magic somewhere after the boot stub (the kernel's own
# scripts/extract-vmlinux does the same search). Try each magic at each offset until an ELF comes out.
try() { # $1 = magic as grep -P bytes, $2 = decompressor
  local off
  for off in $(LC_ALL=C grep -obUaP "$1" "$image" | cut -d: -f1); do
    tail -c +$((off + 1)) "$image" | $2 > "$tmp/vmlinux" 2>/dev/null || true
    if [ "$(head -c 4 "$tmp/vmlinux" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ]; then return 0; fi
  done
  return 1
}
try '\x1f\x8b\x08' 'gzip -dc' || try '\xfd7zXZ\x00' 'xz -dc' || try '\x28\xb5\x2f\xfd' 'zstd -dc' || {
  echo "vmlinux-h.sh: found no compressed vmlinux in $image" >&2; exit 1; }
"$bpftool" btf dump file "$tmp/vmlinux" format c > "$tmp/vmlinux.h"
grep -q 'struct sched_ext_ops {' "$tmp/vmlinux.h" || { echo "vmlinux-h.sh: $image has no sched_ext (struct sched_ext_ops missing from its BTF)" >&2; exit 1; }
mv "$tmp/vmlinux.h" "$out"
echo "$out"
