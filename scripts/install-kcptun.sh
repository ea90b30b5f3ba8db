#!/usr/bin/env bash
# Installs Debian's kcptun (kcptun-client, kcptun-server) with apt-get when
# kcptun-client is missing, then prints the installed version. The interop
# tests and scripts/field.sh use it as the reference kcptun.
set -euo pipefail
if ! command -v kcptun-client >/dev/null; then
	[ "$(id -u)" = 0 ] || { echo "install-kcptun.sh: kcptun-client is missing and apt-get needs root" >&2; exit 1; }
	echo "install-kcptun.sh: apt-get install kcptun" >&2
	apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcptun >&2
fi
command -v kcptun-server >/dev/null || { echo "install-kcptun.sh: kcptun-server is missing" >&2; exit 1; }
echo "kcptun $(dpkg-query -W -f '${Version}' kcptun 2>/dev/null || echo '(not from a Debian package)'): $(command -v kcptun-client), $(command -v kcptun-server)"
