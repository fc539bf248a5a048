#!/bin/sh
# update_api_options.sh - rewrite the option table of docs/api.md ("## Command line") from
# the server's own table: `animegan serve --options-markdown` (server/config.c). The
# hardening test fails when the two disagree, so run this after changing an option.
set -eu
cd "$(dirname "$0")/.."
bin=${BUILD:-build}/animegan
table=$(mktemp)
trap 'rm -f "$table"' EXIT
"$bin" serve --options-markdown >"$table"
# Replace the lines from the table's header to the blank line after it.
awk -v table="$table" '
    !done && /^\| option \| default \| meaning \|$/ { while ((getline l < table) > 0) print l; skip = 1; next }
    skip && /^$/ { skip = 0; done = 1 }
    !skip { print }
' docs/api.md >docs/api.md.new
mv docs/api.md.new docs/api.md
