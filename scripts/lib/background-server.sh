# Sourced by the scripts that start a test server in the background (seaweedfs.sh,
# opensearch.sh, fake-gcs.sh, azurite.sh). Each defines `ready` (true once the server
# answers) before calling `await_server`. Progress goes to stderr.

# server_running PIDFILE: the process recorded in PIDFILE is alive (started earlier and
# still starting, or up but not yet ready).
server_running() {
    [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

# start_server PIDFILE LOGFILE COMMAND...: starts COMMAND in a session of its own (so it
# outlives the script and a Ctrl-C), stdin closed and output to LOGFILE (no descriptor of
# the caller's stays open in it: callers read the script's stdout to its end).
start_server() {
    local pidfile=$1 logfile=$2
    shift 2
    setsid "$@" </dev/null >"$logfile" 2>&1 &
    echo $! >"$pidfile"
}

# await_server NAME PIDFILE LOGFILE SECONDS: waits until `ready` succeeds; fails with the
# log's tail when the process exits first or SECONDS pass.
await_server() {
    local name=$1 pidfile=$2 logfile=$3 limit=$4 start=$SECONDS pid
    pid=$(cat "$pidfile")
    until ready; do
        if ! kill -0 "$pid" 2>/dev/null; then
            tail -n 30 "$logfile" >&2
            echo "error: $name exited (are its ports taken by something else?)" >&2
            return 1
        fi
        if ((SECONDS - start >= limit)); then
            echo "error: $name not ready after $limit s (log: $logfile)" >&2
            return 1
        fi
        sleep 0.5
    done
    echo "$name ready after $((SECONDS - start)) s (pid $pid)" >&2
}
