#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Writes a help2man include file whose SUBCOMMANDS section holds `TOOL SUB --help` for each SUB,
# as preformatted roff. Usage: man-subcommands.sh TOOL OUTPUT SUB...
set -eu
tool=$1
out=$2
shift 2
name=$(basename "$tool")
{
  echo "[SUBCOMMANDS]"
  for sub in "$@"; do
    printf '.SS "%s %s"\n.nf\n' "$name" "$sub"
    # roff: a backslash is \e, and a line may not start with a control character.
    # Run by name, so the usage line shows the name and not this build's path.
    PATH="$(dirname "$tool"):$PATH" "$name" "$sub" --help | sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"
    printf '.fi\n'
  done
} > "$out.tmp"
mv "$out.tmp" "$out"
