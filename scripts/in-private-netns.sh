#!/bin/sh
# Run a command, as the calling user, in a private network namespace whose only interface is
# loopback (up): the tests and the WebRTC benchmarks can then reach nothing but 127.0.0.1.
#
#   scripts/in-private-netns.sh COMMAND [ARG...]
#
# root: `unshare -n`. Others: an unprivileged user namespace of their own (below). Ubuntu 23.10
# and later block that by default
# (kernel.apparmor_restrict_unprivileged_userns=1: "unshare: write failed /proc/self/uid_map:
# Operation not permitted"), so there the namespace is made with sudo and the command runs as
# the caller again (setpriv), with the caller's environment. IN_NETNS_NONINTERACTIVE=1: sudo
# may not ask for a password (`sudo -n`), for callers that cannot answer one (a test).
set -eu

[ "$#" -gt 0 ] || { echo "usage: $0 COMMAND [ARG...]" >&2; exit 2; }

if [ "$(id -u)" = 0 ]; then
  exec unshare -n sh -c 'ip link set lo up && exec "$@"' sh "$@"
fi
# a user namespace that maps the caller to themselves, capabilities kept just long enough to
# bring loopback up: the command runs as a plain user. Mapped to root instead (`unshare -rn`),
# code that asks "am I root?" got yes without root's powers: the tests' PostgreSQL cluster,
# started as root through the postgres user, failed to chown its folder (EINVAL).
if unshare -c -n --keep-caps true 2>/dev/null; then
  exec unshare -c -n --keep-caps sh -c \
    'ip link set lo up && exec setpriv --inh-caps=-all --ambient-caps=-all "$@"' sh "$@"
fi
if unshare -rn true 2>/dev/null; then  # util-linux before 2.38: root inside
  exec unshare -rn sh -c 'ip link set lo up && exec "$@"' sh "$@"
fi

restricted=/proc/sys/kernel/apparmor_restrict_unprivileged_userns
why="this system does not let users make network namespaces"
allow="allow user namespaces (sysctl user.max_user_namespaces)"
if [ "$(cat "$restricted" 2>/dev/null || echo 0)" = 1 ]; then
  why="$why (Ubuntu's AppArmor restriction, $restricted = 1)"
  allow="sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"
fi
if ! command -v sudo >/dev/null 2>&1 || ! command -v setpriv >/dev/null 2>&1; then
  echo "$0: $why, and sudo or setpriv (util-linux) is missing to make one." >&2
  echo "Run as root, or $allow" >&2
  exit 1
fi
echo "$0: $why; making it with sudo, the command runs as $(id -un)" >&2
# sudo resets the environment: the caller's (export -p, in a file only the caller can read)
# comes back after dropping to the caller's uid, gid and groups
env_file=$(mktemp)
export -p > "$env_file"
status=0
sudo_flags=
[ -z "${IN_NETNS_NONINTERACTIVE:-}" ] || sudo_flags=-n
sudo $sudo_flags unshare -n sh -c '
  ip link set lo up || exit 1
  uid=$1 gid=$2; shift 2
  exec setpriv --reuid="$uid" --regid="$gid" --init-groups \
    sh -c '"'"'. "$1" && shift && exec "$@"'"'"' sh "$@"
' sh "$(id -u)" "$(id -g)" "$env_file" "$@" || status=$?
rm -f "$env_file"
exit "$status"
