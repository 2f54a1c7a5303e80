#!/usr/bin/env bash
# Walks a docs page as its reader would: every fenced ```bash block, in
# order, in one shell (variables carry from block to block), in a fresh
# temporary directory with the built dflow on PATH. A block whose preceding
# line is `<!-- docs-test: skip (REASON) -->` is skipped, saying so (GPU
# launches, real checkpoints). Fails when a block fails or when none ran.
#   tests/docs/tutorial_test.sh DFLOW_BINARY docs/<page>.md
set -euo pipefail
dflow_binary=$(realpath "$1")
page=$(realpath "$2")
work=$(mktemp -d "${TMPDIR:-/tmp}/dflow-docs-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/bin"
ln -s "$dflow_binary" "$work/bin/dflow"

# The page's bash blocks as one script; skipped blocks as messages.
{
echo 'trap '"'"'echo "[docs-test] block $docs_block failed: $BASH_COMMAND" >&2'"'"' ERR'
awk -v page="$page" '
  /^<!-- docs-test: skip/ { marked = 1; why = $0; sub(/^<!-- docs-test: skip */, "", why); sub(/ *-->$/, "", why); next }
  /^```bash$/ && !inside { inside = 1; n++
    if (marked) { printf "echo \"[docs-test] block %d (%s:%d) skipped: %s\"\n", n, page, NR, why; skipping = 1 }
    else { ran++; printf "docs_block=\"%d (%s:%d)\"; echo \"[docs-test] block $docs_block\"\n", n, page, NR; skipping = 0 }
    marked = 0; next }
  /^```$/ && inside { inside = 0; next }
  inside && !skipping { print; next }
  !inside && NF { marked = 0 }  # the marker holds for the block right below it only
  END { printf "ran=%d\n", ran + 0 }
' "$page"
} > "$work/steps.sh"
if ! grep -q '^ran=[1-9]' "$work/steps.sh"; then
  echo "[docs-test] $page: no bash block ran (every one was skipped, or the page has none)" >&2
  exit 1
fi
cd "$work"
PATH="$work/bin:$PATH" bash -euo pipefail "$work/steps.sh"
echo "[docs-test] $page: $(sed -n 's/^ran=//p' "$work/steps.sh") blocks ran"
