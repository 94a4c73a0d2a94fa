#!/bin/sh
# Container entrypoint: repair, then hand the process over to the gateway.
#
# `jazz-bridge repair` puts the root's modes and owners back and recreates the conversation
# accounts this container's /etc/passwd does not have yet from the uid map on the volume.
# Any other command (`homes list`, `doctor`, ...) runs as given, without the repair.
set -eu
[ "$#" -gt 0 ] || set -- serve
if [ "$1" = "serve" ]; then
    jazz-bridge repair
fi
exec jazz-bridge "$@"
