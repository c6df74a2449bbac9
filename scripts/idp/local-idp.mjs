// local-idp.mjs — a real OpenID Connect provider on this machine for the SSO tests and the demo.
//
// Why: gpulab's campus SSO (jupyterhub_gpulab/auth) must be proven against a real provider's
// redirect flow, token exchange and userinfo, not a mock. This is npm's `oidc-provider` (a
// certified OpenID Connect implementation), installed by scripts/ensure-oidc-provider.sh.
// What: serves ISSUER (http://127.0.0.1:PORT) with one confidential client (client_secret_basic,
// code flow, refresh tokens) and the provider's own development login page (any password; the
// login typed is the account). Each account's claims are read from USERS_FILE at every request,
// so a test (or an admin trying the demo) changes a user's groups by rewriting that file:
//   {"ana": {"preferred_username": "ana", "groups": ["/students"]}, ...}
// Consent is given automatically (a first-party client). Claims may carry every provider's
// shape (groups, isMemberOf, realm_access, a namespaced claim, Entra's overage marker).
// Refresh tokens are issued at every login (as Keycloak and Entra ID with offline_access do).
// Environment: OIDC_PROVIDER_MODULE (path of oidc-provider's lib/index.js), PORT, USERS_FILE,
// CLIENT_ID, CLIENT_SECRET, REDIRECT_URIS (space separated), ACCESS_TTL (seconds, default 3600),
// ID_TOKEN_CLAIMS=1 to put the claims in the ID token too (as Entra ID puts its groups).
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

const env = (k, d) => process.env[k] ?? d;
const { default: Provider } = await import(pathToFileURL(env('OIDC_PROVIDER_MODULE')).href);
const port = Number(env('PORT', '9090'));
const issuer = env('ISSUER', `http://127.0.0.1:${port}`);

function users() {
  return JSON.parse(readFileSync(env('USERS_FILE'), 'utf8'));
}

const groupClaims = ['groups', 'hasgroups', 'isMemberOf', 'realm_access', 'https://uni.example/groups'];

const provider = new Provider(issuer, {
  clients: [{
    client_id: env('CLIENT_ID', 'jupyterhub'),
    client_secret: env('CLIENT_SECRET', 'jupyterhub-secret'),
    redirect_uris: env('REDIRECT_URIS', '').split(' ').filter(Boolean),
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
  }],
  scopes: ['openid', 'profile', 'email', 'groups', 'offline_access'],
  claims: {
    openid: ['sub'],
    profile: ['preferred_username', 'name', 'nickname', 'eppn'],
    email: ['email'],
    groups: groupClaims,
  },
  cookies: { keys: ['gpulab-local-idp-cookie-key'] },
  ttl: { AccessToken: Number(env('ACCESS_TTL', '3600')) },
  features: { devInteractions: { enabled: true } },
  conformIdTokenClaims: env('ID_TOKEN_CLAIMS', '') !== '1',
  async issueRefreshToken(ctx, client) {
    return client.grantTypeAllowed('refresh_token');
  },
  async findAccount(ctx, id) {
    if (!(id in users())) return undefined;
    return {
      accountId: id,
      async claims() {
        return { sub: id, ...(users()[id] || {}) };   // read again: groups may have changed
      },
    };
  },
  async loadExistingGrant(ctx) {
    const grantId = ctx.oidc.result?.consent?.grantId
      || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) return ctx.oidc.provider.Grant.find(grantId);
    const grant = new ctx.oidc.provider.Grant({
      clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId,
    });
    grant.addOIDCScope('openid profile email groups offline_access');
    grant.addOIDCClaims(groupClaims);
    await grant.save();
    return grant;
  },
});
provider.proxy = false;
provider.listen(port, '127.0.0.1', () => console.log(`local-idp: ${issuer} ready`));
