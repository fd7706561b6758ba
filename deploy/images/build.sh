#!/usr/bin/env bash
# Build (and with --push, push) the catalog's images listed in matrix.yaml, in its order: an
# image built FROM another one comes after it. Needs docker with buildx, python3 with PyYAML,
# and a reachable registry for the public bases (docs/images.md). PYTHON picks the python.
#
#   deploy/images/build.sh [--dry-run] [--push] [--platform linux/amd64] [TAG ...]
#
# --dry-run prints the commands instead of running them; TAGs pick some images of the matrix.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dry_run=0
push=0
platform="linux/amd64"
wanted=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --push) push=1 ;;
    --platform) shift; platform="$1" ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    -*) echo "build.sh: unknown option $1" >&2; exit 2 ;;
    *) wanted+=("$1") ;;
  esac
  shift
done

# One "tag<TAB>dockerfile" line per image, in the matrix's order.
rows="$("${PYTHON:-python3}" - "$here/matrix.yaml" <<'PY'
import sys

import yaml

for image in yaml.safe_load(open(sys.argv[1]))["images"]:
    print(f"{image['tag']}\t{image['dockerfile']}")
PY
)"

known=" $(cut -f1 <<<"$rows" | tr '\n' ' ')"
for tag in "${wanted[@]+"${wanted[@]}"}"; do
  case "$known" in
    *" $tag "*) ;;
    *) echo "build.sh: $tag is not in matrix.yaml" >&2; exit 2 ;;
  esac
done

output="--load"
[ "$push" = 1 ] && output="--push"
built=0
while IFS=$'\t' read -r tag dockerfile; do
  if [ "${#wanted[@]}" -gt 0 ] && [[ " ${wanted[*]} " != *" $tag "* ]]; then
    continue
  fi
  command=(docker buildx build --platform "$platform" "$output"
    --tag "$tag" --file "$here/$dockerfile" "$here")
  if [ "$dry_run" = 1 ]; then
    printf '%q ' "${command[@]}"
    printf '\n'
  else
    echo "build.sh: building $tag" >&2
    "${command[@]}"
  fi
  built=$((built + 1))
done <<<"$rows"
echo "build.sh: $built image(s)$([ "$dry_run" = 1 ] && echo ' (dry run)')" >&2
