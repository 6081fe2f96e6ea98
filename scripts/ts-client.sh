#!/usr/bin/env bash
# ts-client.sh — the Makefile's steps for the TypeScript client in clients/typescript.
#
# Usage: scripts/ts-client.sh deps|generate|check-generated|check
#
#   deps             node and npm (as root on Debian: apt-get install nodejs npm when missing),
#                    then `npm ci` when node_modules is missing or older than package-lock.json
#   generate         regenerate src/schema.d.ts from openapi.yaml with the pinned openapi-typescript
#   check-generated  fail when src/schema.d.ts differs from what openapi.yaml produces
#   check            type-check the client and the Node worker (tsc --noEmit, strict JSDoc types)
#                    and run the client's own tests (node --test)
#
# Without node or npm (not root, or no apt-get) every step says so and is skipped (exit 0): the Go
# side of the project does not need them, and the TypeScript worker test skips itself likewise.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=clients/typescript

have_node() { command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; }

ensure_node() {
	have_node && return 0
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "ts-client: installing node and npm (Debian packages nodejs, npm)"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm
		have_node && return 0
	fi
	echo "ts-client: node and npm are not installed (and cannot be: not root, or no apt-get); skipping the TypeScript client ($1)"
	return 1
}

deps() {
	ensure_node "$1" || return 1
	if [ ! -f "$dir/node_modules/.package-lock.json" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
		echo "ts-client: npm ci in $dir"
		(cd "$dir" && npm ci --no-audit --no-fund)
	fi
}

case "${1:-}" in
deps)
	deps deps || true
	;;
generate)
	deps generate || exit 0
	(cd "$dir" && npx --no-install openapi-typescript ../../openapi.yaml --output src/schema.d.ts)
	;;
check-generated)
	deps check-generated || exit 0
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	(cd "$dir" && npx --no-install openapi-typescript ../../openapi.yaml --output "$tmp/schema.d.ts")
	if ! cmp -s "$dir/src/schema.d.ts" "$tmp/schema.d.ts"; then
		echo "generated TypeScript types are stale: run 'make generate' and commit $dir/src/schema.d.ts"
		diff -u "$dir/src/schema.d.ts" "$tmp/schema.d.ts" | head -40 || true
		exit 1
	fi
	;;
check)
	deps check || exit 0
	(cd "$dir" && npx --no-install tsc --noEmit -p . && node --test --test-reporter=spec test/*.test.js)
	;;
*)
	echo "usage: $0 deps|generate|check-generated|check" >&2
	exit 2
	;;
esac
