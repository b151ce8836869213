#!/usr/bin/env bash
# fuzz_merge_bundles.sh - merges repro bundles from many instances or machines into one
# directory, one bundle per finding signature.
#
#   scripts/fuzz_merge_bundles.sh [-n] TARGET SOURCE...
#
# Every directory holding a case.json under each SOURCE (at any depth: a crashes/ dir,
# an AFL++ sync dir, a tree rsync'ed from several machines) is a bundle, except those in a
# .raw/ directory (stored as found, since replaced by their minimized bundle). Its name is
# <kind>-<signature> as recorded in its case.json (read with python3 when available;
# otherwise the directory name is trusted, which is what attnfuzz writes). A bundle
# whose signature is already in TARGET - under that name - is a duplicate and skipped;
# a bundle whose directory name disagrees with its case.json is stored under the
# case.json name. Copies are atomic (temporary name, then rename), so several merges
# into one TARGET may run at once. -n: only report what would be copied.
#
# Prints the counts: bundles seen, copied, duplicates, renamed, unreadable.
set -euo pipefail

dry=0
if [ "${1:-}" = "-n" ]; then dry=1; shift; fi
if [ $# -lt 2 ]; then
    sed -n '2,17p' "$0" >&2
    exit 2
fi
target=$1
shift
mkdir -p "$target"

have_python=0
command -v python3 >/dev/null 2>&1 && have_python=1

# name_of DIR: <kind>-<16 hex digits> from DIR/case.json, or "" when it cannot be read
name_of() {
    if [ "$have_python" = 1 ]; then
        python3 - "$1/case.json" <<'EOF' 2>/dev/null || true
import json, re, sys
j = json.load(open(sys.argv[1]))
kind, sig = j.get("kind"), j.get("signature")
if isinstance(kind, str) and isinstance(sig, str) and re.fullmatch(r"[a-z_]+", kind) and re.fullmatch(r"[0-9a-f]{16}", sig):
    print("%s-%s" % (kind, sig))
EOF
    fi
}

seen=0 copied=0 dups=0 renamed=0 bad=0
while IFS= read -r -d '' json; do
    src=$(dirname "$json")
    base=$(basename "$src")
    case $base in .tmp* | *.tmp.*) continue ;; esac # a bundle still being written
    case $src in */.raw/*) continue ;; esac         # stored as found, replaced by its minimized bundle
    # the target itself may lie under a source
    [ "$(cd "$src/.." && pwd -P)" = "$(cd "$target" && pwd -P)" ] && continue
    seen=$((seen + 1))
    name=$(name_of "$src")
    if [ -z "$name" ]; then
        if [[ $base =~ ^[a-z_]+-[0-9a-f]{16}$ ]]; then
            name=$base
        else
            echo "unreadable: $src (no kind/signature in case.json, name not <kind>-<signature>)" >&2
            bad=$((bad + 1))
            continue
        fi
    fi
    if [ -e "$target/$name" ]; then
        dups=$((dups + 1))
        continue
    fi
    [ "$name" != "$base" ] && renamed=$((renamed + 1))
    if [ "$dry" = 1 ]; then
        echo "would copy $src -> $target/$name"
    else
        tmp="$target/.tmp-$name.$$"
        rm -rf "$tmp"
        cp -a "$src" "$tmp"
        # rename fails when another merge stored the same signature meanwhile: a duplicate
        if mv -T "$tmp" "$target/$name" 2>/dev/null; then :; else rm -rf "$tmp"; dups=$((dups + 1)); continue; fi
    fi
    copied=$((copied + 1))
done < <(for s in "$@"; do find "$s" -name case.json -type f -print0; done)

echo "merge: $seen bundles seen, $copied copied, $dups duplicates, $renamed renamed to their case.json signature, $bad unreadable -> $target ($(find "$target" -mindepth 1 -maxdepth 1 -type d ! -name '.*' | wc -l) bundles)"
