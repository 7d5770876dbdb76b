// A real authorization server for tests/conformance/test_oauth_e2e.py: oidc-provider, a certified OpenID
// Provider nobody on this project wrote, issuing JWT access tokens through the client_credentials grant with
// resource indicators (RFC 8707), so a token's `aud` is the resource the client asked for.
//
//   node provider.mjs PORT
//
// Listens on 127.0.0.1:PORT (issuer http://127.0.0.1:PORT) and prints one JSON line when ready. Clients, both
// with the secret in $OAUTH_CLIENT_SECRET and the scopes in $OAUTH_SCOPES (space-separated):
//   flowsteer-e2e        tokens live 300 s
//   flowsteer-e2e-short  tokens live $OAUTH_SHORT_TTL seconds (default 1), for the expiry case
// Any http(s) resource is accepted, so the test can also get a token for another audience. The signing keys
// (one EC key that signs, one RSA key beside it) are made fresh at every start and only exist in memory.

import { generateKeyPairSync } from 'node:crypto';
import Provider from 'oidc-provider';

const port = Number(process.argv[2]);
if (!Number.isInteger(port) || port <= 0) {
  process.stderr.write('usage: node provider.mjs PORT\n');
  process.exit(2);
}
const secret = process.env.OAUTH_CLIENT_SECRET;
if (!secret) {
  process.stderr.write('set OAUTH_CLIENT_SECRET\n');
  process.exit(2);
}
const scopes = process.env.OAUTH_SCOPES ?? 'flowsteer:read flowsteer:write';
const shortTtl = Number(process.env.OAUTH_SHORT_TTL ?? 1);
const issuer = `http://127.0.0.1:${port}`;

function privateJwk(type, options, kid, alg) {
  const { privateKey } = generateKeyPairSync(type, options);
  return { ...privateKey.export({ format: 'jwk' }), kid, alg, use: 'sig' };
}

const client = (id) => ({
  client_id: id,
  client_secret: secret,
  grant_types: ['client_credentials'],
  redirect_uris: [],
  response_types: [],
  scope: scopes,
});

const provider = new Provider(issuer, {
  clients: [client('flowsteer-e2e'), client('flowsteer-e2e-short')],
  scopes: ['openid', ...scopes.split(' ')],
  jwks: {
    keys: [
      privateJwk('ec', { namedCurve: 'P-256' }, 'e2e-ec', 'ES256'),
      privateJwk('rsa', { modulusLength: 2048 }, 'e2e-rsa', 'RS256'),
    ],
  },
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => undefined,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, resource, requester) => {
        const url = new URL(resource);
        if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error('not an http(s) resource');
        return {
          scope: scopes,
          audience: resource,
          accessTokenFormat: 'jwt',
          accessTokenTTL: requester.clientId === 'flowsteer-e2e-short' ? shortTtl : 300,
          jwt: { sign: { alg: 'ES256' } },
        };
      },
    },
  },
});

const server = provider.listen(port, '127.0.0.1', () => {
  process.stdout.write(`${JSON.stringify({ ready: true, issuer })}\n`);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
