#!/bin/sh
# make_man.sh BIN DIR - write the man pages animegan.1 and animegan-COMMAND.1 into DIR from
# the commands' own --help (each lists every option of the command's option table:
# tests/test_cli.c's test_help_lists_option_table), so the pages cannot drift from the
# binary. Used by `make install`; needs only sh, sed and awk.
set -eu
bin=$1
dir=$2
mkdir -p "$dir"
version=$("$bin" --version | sed -n '1s/^animegan //p')

# help text on stdin -> roff on stdout. Sections: "Options:" lines; items: lines indented
# 1-6 spaces ("  -o, --output PATH   what"), their continuations indented deeper.
to_roff() { # NAME TITLE
    awk -v name="$1" -v title="$2" -v version="$version" '
    function esc(s) {
        gsub(/\\/, "\\e", s); gsub(/-/, "\\-", s)
        if (s ~ /^[.'\'']/) s = "\\&" s
        return s
    }
    BEGIN {
        printf ".TH %s 1 \"\" \"animegan %s\" \"animegan manual\"\n", toupper(title), version
    }
    NR == 1 && /^Usage: / {
        sub(/^Usage: /, "")
        print ".SH NAME"; usage = $0; next
    }
    !named && NF {
        line = $0; sub(/\. .*/, "", line); sub(/\.$/, "", line)
        printf "%s \\- %s\n.SH SYNOPSIS\n.nf\n%s\n.fi\n.SH DESCRIPTION\n", esc(name), esc(line), esc(usage)
        named = 1
    }
    !named { next }
    /^[A-Z][A-Za-z ()]*:$/ {
        section = toupper(substr($0, 1, length($0) - 1))
        printf ".SH %s\n", section
        if (section ~ /^EXAMPLE/) print ".nf"
        next
    }
    section ~ /^EXAMPLE/ { print esc($0); next }
    /^$/ { print ".PP"; next }
    match($0, /^ +[^ ]/) && RLENGTH <= 7 {
        line = $0; sub(/^ +/, "", line)
        if (match(line, /  +/)) {
            tag = substr(line, 1, RSTART - 1); text = substr(line, RSTART + RLENGTH)
        } else { tag = line; text = "" }
        printf ".TP\n.B %s\n", esc(tag)
        if (text != "") print esc(text)
        next
    }
    { line = $0; sub(/^ +/, "", line); print esc(line) }
    END { if (section ~ /^EXAMPLE/) print ".fi" }'
}

"$bin" --help | to_roff animegan animegan >"$dir/animegan.1"
for command in convert restore upscale fuse faces models bench serve; do
    "$bin" "$command" --help | to_roff "animegan-$command" "animegan-$command" \
        >"$dir/animegan-$command.1"
done
