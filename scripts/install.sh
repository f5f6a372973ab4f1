#!/usr/bin/env bash
# Installs dfsched like any system tool:
#
#   scripts/install.sh [--prefix DIR] [--libdir DIR] [--no-build] [--bin FILE] [--lib FILE]
#
#   PREFIX/bin/dfsched                                 the command
#   LIBDIR/libdfsched.so.VERSION                       the library (SONAME libdfsched.so)
#   LIBDIR/libdfsched.so -> libdfsched.so.VERSION      the name programs link and load
#   PREFIX/include/dfsched.h                           the C header
#   LIBDIR/pkgconfig/dfsched.pc                        from dfsched.pc.in, for pkg-config
#   PREFIX/share/man/man1/dfsched*.1                   from the CLI definition (clap_mangen)
#   PREFIX/share/bash-completion/completions/dfsched   (and zsh, fish: clap_complete)
#   PREFIX/lib/systemd/user/dfsched-agent.service      the agent as a systemd user service
#
# PREFIX defaults to /usr/local and LIBDIR to PREFIX/lib. DESTDIR, if set,
# is prepended to every path written (for packaging); the files themselves
# name PREFIX only. By default the release build is made first
# (`cargo build --release`, which builds the command and libdfsched.so);
# --no-build installs what target/release holds, and --bin/--lib install
# other builds (the tests install their own debug build so).
#
# `dfsched run` finds the installed library as PREFIX/bin/../lib/libdfsched.so
# (with LIBDIR elsewhere, give it --lib or DFSCHED_LIB).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
prefix=/usr/local
libdir=
build=1
bin=
lib=

usage() {
    sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix="$2"; shift 2 ;;
        --prefix=*) prefix="${1#*=}"; shift ;;
        --libdir) libdir="$2"; shift 2 ;;
        --libdir=*) libdir="${1#*=}"; shift ;;
        --no-build) build=0; shift ;;
        --bin) bin="$2"; build=0; shift 2 ;;
        --lib) lib="$2"; build=0; shift 2 ;;
        -h|--help) usage 0 ;;
        *) echo "install.sh: unknown option $1" >&2; usage 2 ;;
    esac
done

case "$prefix" in
    /*) ;;
    *) echo "install.sh: --prefix must be an absolute path, not $prefix" >&2; exit 2 ;;
esac
prefix="${prefix%/}"
libdir="${libdir:-$prefix/lib}"
destdir="${DESTDIR:-}"

if [ "$build" = 1 ]; then
    (cd "$root" && cargo build --release --locked)
fi
bin="${bin:-$root/target/release/dfsched}"
lib="${lib:-$root/target/release/libdfsched.so}"
for f in "$bin" "$lib"; do
    [ -f "$f" ] || { echo "install.sh: $f is missing (build with cargo build --release)" >&2; exit 1; }
done

version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n 1)"
soname="libdfsched.so"

d() { printf '%s%s' "$destdir" "$1"; }

install -d "$(d "$prefix/bin")" "$(d "$libdir/pkgconfig")" "$(d "$prefix/include")" \
    "$(d "$prefix/share/man/man1")" "$(d "$prefix/share/bash-completion/completions")" \
    "$(d "$prefix/share/zsh/site-functions")" "$(d "$prefix/share/fish/vendor_completions.d")" \
    "$(d "$prefix/lib/systemd/user")"

install -m 0755 "$bin" "$(d "$prefix/bin/dfsched")"
install -m 0755 "$lib" "$(d "$libdir/$soname.$version")"
ln -sfn "$soname.$version" "$(d "$libdir/$soname")"
install -m 0644 "$root/include/dfsched.h" "$(d "$prefix/include/dfsched.h")"

sed -e "s|@PREFIX@|$prefix|" -e "s|@LIBDIR@|$libdir|" \
    -e "s|@INCLUDEDIR@|$prefix/include|" -e "s|@VERSION@|$version|" \
    "$root/dfsched.pc.in" > "$(d "$libdir/pkgconfig/dfsched.pc")"
chmod 0644 "$(d "$libdir/pkgconfig/dfsched.pc")"

"$bin" generate man "$(d "$prefix/share/man/man1")"
"$bin" generate completions bash > "$(d "$prefix/share/bash-completion/completions/dfsched")"
"$bin" generate completions zsh > "$(d "$prefix/share/zsh/site-functions/_dfsched")"
"$bin" generate completions fish > "$(d "$prefix/share/fish/vendor_completions.d/dfsched.fish")"

cat > "$(d "$prefix/lib/systemd/user/dfsched-agent.service")" <<EOF
# The dfsched agent of one user: enable with
#   systemctl --user enable --now dfsched-agent.service
# (dfsched run also starts one on demand when none listens.)
[Unit]
Description=dfsched agent: one load view for the user's programs under dfsched
Documentation=man:dfsched-agent(1)

[Service]
ExecStart=$prefix/bin/dfsched agent --foreground
ExecStop=$prefix/bin/dfsched agent --stop
Restart=on-failure

[Install]
WantedBy=default.target
EOF

echo "dfsched $version installed under $destdir$prefix"
