#!/usr/bin/env bash
# Shows that the VM bench catches a broken home rule: in a temporary git
# worktree of HEAD, dfsched-core's home::choose is patched to ignore cache
# domains (every fresh home is the whole machine, straddling every LLC), the
# release binaries are built from it, and the bench runs on a preset with
# several LLCs. The patch never reaches the library anyone ships: it exists
# only in the temporary worktree, removed on exit.
#
# Usage: scripts/vmbench-broken-home.sh [PRESET] [dfsched-vmbench run flags…]
#   default: 4llc-16 --only df-groups-one-llc-each
# Exit status: 0 if the bench failed as it must, 1 if it passed (the bench
# does not catch the broken rule), 2 if the patch or the build failed.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
preset=${1:-4llc-16}
shift || true
flags=("$@")
[ ${#flags[@]} -eq 0 ] && flags=(--only df-groups-one-llc-each)

tmp=$(mktemp -d /tmp/dfsched-broken-home.XXXXXX)
cleanup() { git -C "$root" worktree remove --force "$tmp/wt" >/dev/null 2>&1; rm -rf "$tmp"; }
trap cleanup EXIT
git worktree add --detach -q "$tmp/wt" HEAD || exit 2

# The broken rule: a fresh home is the root domain, whatever the caches.
home="$tmp/wt/crates/dfsched-core/src/home.rs"
python3 - "$home" <<'PY' || exit 2
import sys
p = sys.argv[1]
s = open(p).read()
# The first line of home::choose's body (the rest of it changes with the
# engine; this line has not).
start = s.index("pub(crate) fn choose(")
anchor = "    let shape = shape.at_least_one();\n"
assert s.find(anchor, start) > 0, "home::choose changed: update this script"
s = s[:start] + s[start:].replace(anchor, anchor + "    if shape.near.is_none() {\n        return topo.root(); // BROKEN on purpose: ignores LLC boundaries\n    }\n", 1)
open(p, "w").write(s)
PY
echo "patched $home:"
git -C "$tmp/wt" diff --stat
git -C "$tmp/wt" diff | sed -n '/^@@/,$p'

# Its own target dir, seeded from the bench's (only the workspace rebuilds).
target="$root/target/vmbench/cargo-broken"
if [ ! -d "$target" ] && [ -d "$root/target/vmbench/cargo" ]; then
    cp -a "$root/target/vmbench/cargo" "$target"
fi
( cd "$tmp/wt" && CARGO_TARGET_DIR="$target" cargo build --release --locked -q \
    -p dfsched-cli --bin dfsched -p dfsched-rt --lib -p dfsched-vmbench --bins ) || exit 2

echo "running: dfsched-vmbench run --preset $preset ${flags[*]} (broken binaries)"
# The bench's own cache (kernel, tools) is shared; the binaries are the broken ones.
if RUST_BACKTRACE=0 DFSCHED_VMBENCH_CACHE="$root/target/vmbench" "$target/release/dfsched-vmbench" run \
    --preset "$preset" --bin-dir "$target/release" "${flags[@]}"; then
    echo "BAD: the bench passed with a home rule that ignores LLC boundaries"
    exit 1
fi
echo "GOOD: the bench failed with the broken home rule, as it must"
