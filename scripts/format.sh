#!/usr/bin/env bash
# The project's Swift style, held by the toolchain's `swift format` with the repository's .swift-format
# (4-space indentation, lines of at most 140 columns, trailing commas in multi-line collections; rules
# that would rewrite how the code is written, not how it is laid out, are off: see docs/development.md).
#
#   scripts/format.sh           format every Swift file git tracks, in place
#   scripts/format.sh --check   change nothing; list every file that differs and fail (the test command)
set -euo pipefail
cd "$(dirname "$0")/.."
mode=format
case "${1:-}" in
  "") ;;
  --check) mode=check ;;
  -h | --help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: scripts/format.sh [--check]" >&2; exit 2 ;;
esac
mapfile -d '' files < <(git ls-files -z -- '*.swift')
[ "${#files[@]}" -gt 0 ] || { echo "no Swift files tracked" >&2; exit 1; }
if [ "$mode" = format ]; then
  swift format format --in-place --parallel --configuration .swift-format "${files[@]}"
  exit 0
fi
# lint --strict reports what `format` would change as errors (and the lint-only rules that are on).
if ! swift format lint --strict --parallel --configuration .swift-format "${files[@]}"; then
  echo "scripts/format.sh --check: the files above are not formatted; run scripts/format.sh" >&2
  exit 1
fi
echo "format: ${#files[@]} Swift files as .swift-format says" >&2
