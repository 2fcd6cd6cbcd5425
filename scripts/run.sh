#!/bin/sh
# `make run`: corrald in the foreground on LISTEN with the native runtime and the host image.
# Ctrl-C stops corrald cleanly; sandboxes keep running and are re-adopted on the next start.
set -eu
BUILD=${1:-build}
LISTEN=${2:-127.0.0.1:8080}
STATE_DIR=${3:-/var/lib/corral}

cat <<MSG
corrald: listening on http://$LISTEN  (state: $STATE_DIR)
  CLI:   $BUILD/corral --server http://$LISTEN run -- uname -a
  curl:  curl -s -XPOST http://$LISTEN/v1/sandboxes -H 'content-type: application/json' \\
           -d '{"image":{"uri":"host"},"entrypoint":["sleep","infinity"],"resourceLimits":{"cpu":"1","memory":"512Mi"},"timeout":600}'
Ctrl-C to stop (sandboxes survive and are re-adopted on restart).
MSG
exec "$BUILD/corrald" --listen "$LISTEN" --state-dir "$STATE_DIR"
