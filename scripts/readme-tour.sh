#!/usr/bin/env bash
# Runs README's tour as a new user would: in a clean clone of this
# repository (committed files only), every `$ ` line of each code block that
# follows a `<!-- tour: ... -->` marker, in order, in one shell, with the
# `brokk` built here first on PATH. A command that fails fails the script.
# Servers started with `&` get a moment to listen (a user types slower than
# a script); they are stopped at the end. Needs ports 8440 and 8441 free.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
# The workspace's binaries, as the tests build them: nothing compiled twice.
(cd "$repo" && cargo build --locked --quiet --workspace --bins)
work=$(mktemp -d)
git clone --quiet "$repo" "$work/brokk"
commands=$(awk '
  /<!-- tour:/ { marked = 1; next }
  marked && /^```/ { if (inside) { inside = 0; marked = 0 } else inside = 1; next }
  inside && /^\$ / { sub(/^\$ /, ""); print }
' "$repo/README.md")
[ -n "$commands" ] || { echo "readme-tour: no tour found in README.md" >&2; exit 1; }
script="$work/tour.sh"
{
  echo 'set -euo pipefail'
  echo "export PATH=\"$repo/target/debug:\$PATH\""
  echo 'trap '\''kill $(jobs -p) 2>/dev/null || true'\'' EXIT'
  while IFS= read -r line; do
    printf 'echo %q\n' "\$ $line"
    printf '%s\n' "$line"
    case "$line" in
      *'&'|*'& '*'#'*) echo 'sleep 2' ;;
    esac
  done <<<"$commands"
} >"$script"
cd "$work/brokk"
bash "$script"
status=$?
rm -rf "$work"
echo "readme-tour: every command of the tour ran"
exit $status
