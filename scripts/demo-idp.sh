#!/usr/bin/env bash
# demo-idp.sh — start the demo's local identity provider (GPULAB_DEMO_AUTH=oidc ./scripts/demo.sh).
#
# Why: an admin trying gpulab should see the real single sign-on flow (redirect, login page,
# groups from the provider's claims) before connecting the campus provider.
# What: installs npm's oidc-provider (scripts/ensure-oidc-provider.sh), copies the demo's users
# (scripts/idp/demo-users.json: Keycloak-shaped "/students" … groups) to $STATE/idp-users.json
# unless there (edit that file to change someone's groups: the hub picks the change up within
# its refresh age, 1 minute in the demo), starts scripts/idp/local-idp.mjs in the background on
# 127.0.0.1:$GPULAB_IDP_PORT (default 9000) as a Keycloak realm "campus" (Keycloak's endpoint
# paths), for the hub at $GPULAB_IP:$GPULAB_PORT, and waits for it. Writes its pid to
# $STATE/idp.pid and its log to $STATE/idp.log. Prints one line: the issuer URL
# (http://127.0.0.1:9000/realms/campus). Any password logs in; a user not in the file cannot.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${GPULAB_STATE_DIR:-$REPO/.state}
PORT=${GPULAB_IDP_PORT:-9000}
HUB="http://${GPULAB_IP:-127.0.0.1}:${GPULAB_PORT:-8000}"
mkdir -p "$STATE"

module=$("$REPO/scripts/ensure-oidc-provider.sh" | tail -n 1)
[ -f "$STATE/idp-users.json" ] || cp "$REPO/scripts/idp/demo-users.json" "$STATE/idp-users.json"
if [ -f "$STATE/idp.pid" ] && kill -0 "$(cat "$STATE/idp.pid")" 2>/dev/null; then
    kill "$(cat "$STATE/idp.pid")" && sleep 0.5   # ours, from an earlier run
fi
OIDC_PROVIDER_MODULE=$module PORT=$PORT USERS_FILE=$STATE/idp-users.json \
    CLIENT_ID=${GPULAB_IDP_CLIENT_ID:-jupyterhub} CLIENT_SECRET=${GPULAB_IDP_CLIENT_SECRET:-gpulab-demo-secret} \
    REDIRECT_URIS="$HUB/hub/oauth_callback" SHAPE=keycloak REALM=campus \
    nohup node "$REPO/scripts/idp/local-idp.mjs" >"$STATE/idp.log" 2>&1 &
echo $! >"$STATE/idp.pid"
for _ in $(seq 1 100); do
    if node -e 'fetch(process.argv[1]).then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))' \
        "http://127.0.0.1:$PORT/.well-known/openid-configuration" 2>/dev/null; then
        echo "http://127.0.0.1:$PORT/realms/campus"
        exit 0
    fi
    kill -0 "$(cat "$STATE/idp.pid")" 2>/dev/null || break
    sleep 0.1
done
echo "demo-idp: the local identity provider did not start; see $STATE/idp.log" >&2
tail -n 20 "$STATE/idp.log" >&2 || true
exit 1
