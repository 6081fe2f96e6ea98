#!/usr/bin/env bash
# curl-worker.sh — one task through the whole worker protocol, with nothing but bash, curl and jq.
#
# It leases one task (long-poll), marks it running, renews its lease, posts one result batch
# (Idempotency-Key "<attempt>:1"), appends a log line, uploads a small artifact through an upload
# session (open → PUT to the returned URL with the returned headers → commit) and completes the
# attempt "succeeded". When no task comes within the wait it says so and exits 0.
#
# With --tasks N it works through up to N tasks, one request fewer per task: each completion but
# the last asks for the next lease in the same call ("next": {"max_tasks": 1}) and goes on with the
# lease it brings; it polls again only when a completion brings none.
#
# Usage: scripts/curl-worker.sh [ENV_FILE] [--wait SECONDS] [--tasks N] [--manual] [--capabilities JSON]
#
#   ENV_FILE            (export) KEY=VALUE lines as `make run` writes them (default: $STATE_DIR/env, then
#                       .dev/env). Read are GATEWAY_URL, CA_CERT, WORKER_CERT, WORKER_KEY and
#                       MANUAL_WORKER_CERT / MANUAL_WORKER_KEY.
#   --wait N            long-poll wait in seconds (env WAIT_SECONDS, default 20)
#   --tasks N           work through up to N tasks (env TASKS, default 1)
#   --manual            act as the hand-driven worker (MANUAL_WORKER_CERT/KEY) and advertise
#                       {"manual": true}, so tasks made for it in the README walkthrough are leased
#                       here and not by the running reference worker (env USE_MANUAL_WORKER=1)
#   --capabilities J    capabilities to advertise, a JSON object (env CAPABILITIES, default {})
#
# Variables already set in the environment win over the file: GATEWAY_URL, CA_CERT, WORKER_CERT,
# WORKER_KEY. E.g. WORKER_CERT=.dev/pki/manual-worker.pem WORKER_KEY=.dev/pki/manual-worker-key.pem.
set -euo pipefail

die() { echo "curl-worker: $*" >&2; exit 1; }
log() { echo "curl-worker: $*" >&2; }

# --- dependencies -------------------------------------------------------------------------------
command -v curl >/dev/null || die "curl is required"
if ! command -v jq >/dev/null; then
	if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
		log "installing jq with apt-get"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq jq >/dev/null 2>&1 ||
			{ apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq jq >/dev/null; }
	fi
	command -v jq >/dev/null || die "jq is required (apt-get install jq)"
fi

# --- arguments ----------------------------------------------------------------------------------
env_file=""
wait_seconds="${WAIT_SECONDS:-20}"
tasks="${TASKS:-1}"
manual="${USE_MANUAL_WORKER:-}"
capabilities="${CAPABILITIES:-}"
while (($#)); do
	case "$1" in
	--wait) wait_seconds="${2:?--wait needs a value}"; shift 2 ;;
	--wait=*) wait_seconds="${1#*=}"; shift ;;
	--tasks) tasks="${2:?--tasks needs a value}"; shift 2 ;;
	--tasks=*) tasks="${1#*=}"; shift ;;
	--manual) manual=1; shift ;;
	--capabilities) capabilities="${2:?--capabilities needs a value}"; shift 2 ;;
	--capabilities=*) capabilities="${1#*=}"; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	-*) die "unknown flag $1" ;;
	*) [[ -z $env_file ]] || die "one env file only"; env_file="$1"; shift ;;
	esac
done
[[ $wait_seconds =~ ^[0-9]+$ ]] || die "--wait must be a whole number of seconds"
[[ $tasks =~ ^[1-9][0-9]*$ ]] || die "--tasks must be a whole number, at least 1"
if [[ -z $env_file ]]; then
	if [[ -n ${STATE_DIR:-} && -f $STATE_DIR/env ]]; then env_file="$STATE_DIR/env"; else env_file=".dev/env"; fi
fi
[[ -f $env_file ]] || die "no env file at $env_file (run \`make run\`, or name one)"

# --- settings: the file, then the environment on top -------------------------------------------
declare -A file_vars=()
while IFS= read -r line || [[ -n $line ]]; do
	line="${line%$'\r'}"
	[[ $line =~ ^[[:space:]]*(#|$) ]] && continue
	line="${line#export }"
	[[ $line == *=* ]] || continue
	key="${line%%=*}" value="${line#*=}"
	key="${key//[[:space:]]/}"
	if [[ $value =~ ^\"(.*)\"$ || $value =~ ^\'(.*)\'$ ]]; then value="${BASH_REMATCH[1]}"; fi
	file_vars[$key]="$value"
done <"$env_file"
setting() { local name=$1; if [[ -n ${!name:-} ]]; then echo "${!name}"; else echo "${file_vars[$name]:-}"; fi; }

GATEWAY_URL="$(setting GATEWAY_URL)"
CA_CERT="$(setting CA_CERT)"
if [[ -n $manual ]]; then
	WORKER_CERT="$(setting MANUAL_WORKER_CERT)"
	WORKER_KEY="$(setting MANUAL_WORKER_KEY)"
	manual_caps='{"manual": true}'
	capabilities="${capabilities:-$manual_caps}"
else
	WORKER_CERT="$(setting WORKER_CERT)"
	WORKER_KEY="$(setting WORKER_KEY)"
fi
no_caps='{}'
capabilities="${capabilities:-$no_caps}"
for v in GATEWAY_URL CA_CERT WORKER_CERT WORKER_KEY; do
	[[ -n ${!v} ]] || die "$v is not set (env file $env_file)"
done
for f in "$CA_CERT" "$WORKER_CERT" "$WORKER_KEY"; do [[ -r $f ]] || die "cannot read $f"; done
jq -e 'type == "object"' >/dev/null 2>&1 <<<"$capabilities" || die "--capabilities must be a JSON object"
GATEWAY_URL="${GATEWAY_URL%/}"

# --- HTTP -------------------------------------------------------------------------------------
workdir="$(mktemp -d)"
trap 'rm -rf "$workdir"' EXIT
BODY="$workdir/body"

# call EXPECTED_STATUS METHOD URL MAX_TIME [curl args...]: the answer's body is left in $BODY; a
# transport error or another status prints the problem and exits.
call() {
	local want=$1 method=$2 url=$3 max_time=$4 status
	shift 4
	: >"$BODY"
	if ! status=$(curl -sS --connect-timeout 10 --max-time "$max_time" \
		--cacert "$CA_CERT" --cert "$WORKER_CERT" --key "$WORKER_KEY" \
		-X "$method" -o "$BODY" -w '%{http_code}' "$@" "$url"); then
		die "$method $url: transport error"
	fi
	if [[ $status != "$want" ]]; then
		echo "curl-worker: $method $url answered $status, expected $want:" >&2
		jq . "$BODY" >&2 2>/dev/null || cat "$BODY" >&2
		echo >&2
		exit 1
	fi
}
json() { call "$1" POST "$2" "${3:-30}" -H 'Content-Type: application/json' "${@:4}"; }

# --- lease --------------------------------------------------------------------------------------
lease_request=$(jq -cn --argjson wait "$wait_seconds" --argjson caps "$capabilities" \
	'{max_tasks: 1, wait_seconds: $wait, capabilities: $caps, software_version: "curl-worker/1", protocol_version: "1"}')

# poll: long-poll for one lease; it is left in $lease (empty when none came). A repeated poll with
# the same Idempotency-Key would return the same lease, so a retry after a lost answer is safe.
poll() {
	local poll_key="curl-worker-$(date +%s)-$$-$RANDOM"
	log "polling $GATEWAY_URL for a task (up to ${wait_seconds}s)"
	json 200 "$GATEWAY_URL/v1/leases" $((wait_seconds + 30)) -H "Idempotency-Key: $poll_key" -d "$lease_request"
	lease=$(jq -c '.leases[0] // empty' "$BODY")
}

# check_lease: 0 while the last answer says the lease is held; when cancellation was asked for it
# completes the attempt cancelled and returns 1; a lost lease stops the script.
check_lease() {
	local state
	state=$(jq -r '.state // "active"' "$BODY")
	case "$state" in
	active) ;;
	cancel_requested)
		log "cancellation requested; completing cancelled"
		json 200 "$GATEWAY_URL/v1/attempts/$ATTEMPT/complete" 30 "${L[@]}" -d '{"outcome": "cancelled"}'
		jq -c '{task_id, attempt_status, task_state}' "$BODY"
		return 1 ;;
	lost) die "lease lost; stopping without completing" ;;
	*) die "unexpected lease state $state" ;;
	esac
}

# run_task: runs the task of $lease to its completion; when want_next is 1 the completion asks for
# the next lease, left in $lease (empty when none came).
run_task() {
	local want_next=$1
	ATTEMPT=$(jq -r .attempt_id <<<"$lease")
	TOKEN=$(jq -r .lease_token <<<"$lease")
	TASK=$(jq -r .task.id <<<"$lease")
	local plugin target
	plugin=$(jq -r '.task.payload.plugin // "none"' <<<"$lease")
	target=$(jq -r '[.task.payload.targets[]?, .task.payload.input.host?, .task.payload.input.target?]
		| map(select(type == "string" and . != "")) | first // "curl-worker.example"' <<<"$lease")
	log "leased task $TASK (attempt $ATTEMPT, plugin $plugin, heartbeat every $(jq -r .heartbeat_interval_seconds <<<"$lease")s)"
	L=(-H "Lease-Token: $TOKEN")
	lease=""

	json 200 "$GATEWAY_URL/v1/attempts/$ATTEMPT/start" 30 "${L[@]}"
	check_lease || return 0
	json 200 "$GATEWAY_URL/v1/attempts/$ATTEMPT/heartbeat" 30 "${L[@]}"
	check_lease || return 0
	log "lease renewed: $(jq -r .lease_ttl_seconds "$BODY")s left"

	local batch
	batch=$(jq -cn --arg host "$target" \
		'{sequence_number: 1, records: [{kind: "asset", asset: {type: "hostname", value: $host}, details: {source: "curl-worker"}}]}')
	json 200 "$GATEWAY_URL/v1/attempts/$ATTEMPT/results" 30 "${L[@]}" -H "Idempotency-Key: $ATTEMPT:1" -d "$batch"
	log "result batch 1 acknowledged: $(jq -c . "$BODY")"

	local log_line="curl-worker: asset $target reported"$'\n'
	json 200 "$GATEWAY_URL/v1/attempts/$ATTEMPT/logs" 30 "${L[@]}" -d "$(jq -cn --arg d "$log_line" '{offset: 0, data: $d}')"

	local artifact="$workdir/report.json" size sum session upload_id upload_url upload_method status
	jq -cn --arg task "$TASK" --arg host "$target" '{worker: "curl-worker", task: $task, asset: $host, ok: true}' >"$artifact"
	size=$(wc -c <"$artifact" | tr -d ' ')
	sum=$(sha256sum "$artifact" | cut -d' ' -f1)
	json 201 "$GATEWAY_URL/v1/attempts/$ATTEMPT/artifacts" 30 "${L[@]}" -d "$(jq -cn --argjson size "$size" --arg sum "$sum" \
		'{name: "report.json", content_type: "application/json", size_bytes: $size, sha256: $sum}')"
	session=$(cat "$BODY")
	upload_id=$(jq -r .upload_id <<<"$session")
	upload_url=$(jq -r .url <<<"$session")
	upload_method=$(jq -r '.method // "PUT"' <<<"$session")
	local put_headers=() h
	while IFS= read -r h; do [[ -n $h ]] && put_headers+=(-H "$h"); done < <(jq -r '.headers // {} | to_entries[] | "\(.key): \(.value)"' <<<"$session")
	# The fs backend answers 204; a presigned S3 PUT answers 200.
	: >"$BODY"
	status=$(curl -sS --connect-timeout 10 --max-time 60 --cacert "$CA_CERT" --cert "$WORKER_CERT" --key "$WORKER_KEY" \
		-X "$upload_method" "${put_headers[@]}" --data-binary "@$artifact" -o "$BODY" -w '%{http_code}' "$upload_url") ||
		die "$upload_method $upload_url: transport error"
	if [[ $status != 200 && $status != 204 ]]; then
		echo "curl-worker: upload answered $status:" >&2
		jq . "$BODY" >&2 2>/dev/null || cat "$BODY" >&2
		exit 1
	fi
	json 200 "$GATEWAY_URL/v1/uploads/$upload_id/commit" 30
	log "artifact committed: $(jq -c '{id, name, size_bytes}' "$BODY")"

	# Completing is idempotent, and so is the next lease it asks for: repeating this call after a
	# lost answer returns the same lease under a fresh token instead of leasing another.
	local complete='{"outcome": "succeeded", "last_sequence_number": 1}'
	if [[ $want_next == 1 ]]; then
		complete='{"outcome": "succeeded", "last_sequence_number": 1, "next": {"max_tasks": 1}}'
	fi
	json 200 "$GATEWAY_URL/v1/attempts/$ATTEMPT/complete" 30 "${L[@]}" -d "$complete"
	jq -c '{task_id, attempt_status, task_state}' "$BODY"
	lease=$(jq -c '.leases[0] // empty' "$BODY")
	if [[ -n $lease ]]; then log "the completion brought the next lease"; fi
}

# --- run ----------------------------------------------------------------------------------------
lease=""
for ((done_tasks = 0; done_tasks < tasks; done_tasks++)); do
	if [[ -z $lease ]]; then
		poll
		if [[ -z $lease ]]; then
			if ((done_tasks == 0)); then echo "curl-worker: no task within ${wait_seconds}s; nothing to do"; fi
			exit 0
		fi
	fi
	run_task $((done_tasks + 1 < tasks ? 1 : 0))
done
