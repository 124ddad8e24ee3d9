#!/usr/bin/env bash
# Checks that every C++ / CUDA source of the repository is formatted as .clang-format says.
# usage: tools/check_format.sh [CLANG_FORMAT]   (default: $CLANG_FORMAT, else clang-format on PATH)
# The format depends on clang-format's version: the one pinned in pyproject.toml's [test] extra is the
# reference (the README's test command installs it into build/venv). --fix rewrites the files instead.
set -euo pipefail
cd "$(dirname "$0")/.."
fix=0
if [[ "${1:-}" == "--fix" ]]; then fix=1; shift; fi
tool="${1:-${CLANG_FORMAT:-clang-format}}"
want="18.1.8"
version="$("$tool" --version | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -1)"
if [[ "$version" != "$want" ]]; then
  echo "check_format: $tool is clang-format $version; the format is defined by $want (pip install clang-format==$want)" >&2
  exit 2
fi
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.cuh' '*.h')
if [[ $fix == 1 ]]; then
  "$tool" -i "${files[@]}"
else
  "$tool" --dry-run --Werror "${files[@]}"
  echo "check_format: ${#files[@]} files formatted as .clang-format says"
fi
