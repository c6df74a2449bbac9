// local-idp.mjs — a real OpenID Connect provider on this machine for the SSO tests and the demo.
//
// Why: gpulab's campus SSO (jupyterhub_gpulab/auth) must be proven against a real provider's
// redirect flow, token exchange and userinfo, not a mock. This is npm's `oidc-provider` (a
// certified OpenID Connect implementation), installed by scripts/ensure-oidc-provider.sh.
// What: serves one confidential client (client_secret_basic, code flow, refresh tokens) and the
// provider's own development login page (any password; the login typed is the account). Each
// account's claims are read from USERS_FILE at every request, so a test (or an admin trying the
// demo) changes a user's groups by rewriting that file:
//   {"ana": {"preferred_username": "ana", "groups": ["/students"]}, ...}
// Consent is given automatically (a first-party client). Claims may carry every provider's
// shape (groups, isMemberOf, realm_access, a namespaced claim, Entra's overage marker); the group
// claims are released with the `profile` scope too (Keycloak's mapper, Entra ID and Auth0's
// Actions send them whatever the scopes).
// SHAPE serves the endpoints at the paths a provider uses, so gpulab's presets
// (jupyterhub_gpulab/auth/presets.py) run unchanged against it, only the host differs:
//   keycloak  ISSUER /realms/$REALM, .../protocol/openid-connect/{auth,token,userinfo,certs}
//   entra     /$TENANT/oauth2/v2.0/{authorize,token}, the claims in the ID token
//   okta      ISSUER /oauth2/default, .../v1/{authorize,token,userinfo,keys}
//   auth0     /authorize, /oauth/token, /userinfo
//   cilogon   /authorize, /oauth2/token, /oauth2/userinfo
//   oidc      oidc-provider's own /auth, /token, /me (the default)
// Refresh tokens are issued at every login (as Keycloak and Entra ID with offline_access do).
// Environment: OIDC_PROVIDER_MODULE (path of oidc-provider's lib/index.js), PORT, USERS_FILE,
// CLIENT_ID, CLIENT_SECRET, REDIRECT_URIS (space separated), ACCESS_TTL (seconds, default 3600),
// SHAPE, REALM (default campus), TENANT (default campus-tenant), ID_TOKEN_CLAIMS=1 to put the
// claims in the ID token too (as Entra ID puts its groups; on for SHAPE=entra).
// Prints "local-idp: <issuer> ready" once listening.
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

const env = (k, d) => process.env[k] ?? d;
const { default: Provider } = await import(pathToFileURL(env('OIDC_PROVIDER_MODULE')).href);
const port = Number(env('PORT', '9090'));
const origin = `http://127.0.0.1:${port}`;
const shape = env('SHAPE', 'oidc');
const realm = env('REALM', 'campus');
const tenant = env('TENANT', 'campus-tenant');
const kc = `/realms/${realm}/protocol/openid-connect`;
const shapes = {
  keycloak: [`/realms/${realm}`, {
    authorization: `${kc}/auth`, token: `${kc}/token`, userinfo: `${kc}/userinfo`,
    jwks: `${kc}/certs`, end_session: `${kc}/logout`,
  }],
  entra: [`/${tenant}/v2.0`, {
    authorization: `/${tenant}/oauth2/v2.0/authorize`, token: `/${tenant}/oauth2/v2.0/token`,
    jwks: `/${tenant}/discovery/v2.0/keys`,
  }],
  okta: ['/oauth2/default', {
    authorization: '/oauth2/default/v1/authorize', token: '/oauth2/default/v1/token',
    userinfo: '/oauth2/default/v1/userinfo', jwks: '/oauth2/default/v1/keys',
  }],
  auth0: ['', { authorization: '/authorize', token: '/oauth/token', userinfo: '/userinfo' }],
  cilogon: ['', {
    authorization: '/authorize', token: '/oauth2/token', userinfo: '/oauth2/userinfo',
    jwks: '/oauth2/certs',
  }],
  oidc: ['', {}],
};
if (!(shape in shapes)) throw new Error(`SHAPE=${shape}: use one of ${Object.keys(shapes)}`);
const [issuerPath, routes] = shapes[shape];
const issuer = env('ISSUER', origin + issuerPath);
const idTokenClaims = env('ID_TOKEN_CLAIMS', '') === '1' || shape === 'entra';

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
  scopes: ['openid', 'profile', 'email', 'groups', 'offline_access', 'org.cilogon.userinfo'],
  claims: {
    openid: ['sub'],
    profile: ['preferred_username', 'name', 'nickname', 'eppn', ...groupClaims],
    email: ['email'],
    groups: groupClaims,
    'org.cilogon.userinfo': ['eppn', 'isMemberOf'],
  },
  routes,
  cookies: { keys: ['gpulab-local-idp-cookie-key'] },
  ttl: { AccessToken: Number(env('ACCESS_TTL', '3600')) },
  features: { devInteractions: { enabled: true } },
  conformIdTokenClaims: !idTokenClaims,
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
    grant.addOIDCScope('openid profile email groups offline_access org.cilogon.userinfo');
    grant.addOIDCClaims(groupClaims);
    await grant.save();
    return grant;
  },
});
provider.proxy = false;
provider.listen(port, '127.0.0.1', () => console.log(`local-idp: ${issuer} ready`));
