// OAuth conformance client: the official TypeScript SDK (a client nobody on this project wrote) against a FlowSteer
// server that is an OAuth resource server. Prints one JSON summary on stdout; tests/conformance/test_oauth_e2e.py
// asserts on it.
//
//   node oauth_client.mjs bearer URL     send `Authorization: Bearer $FLOWSTEER_OAUTH_TOKEN` (no OAuth logic)
//   node oauth_client.mjs discover URL   let the SDK's ClientCredentialsProvider do the OAuth work: on the 401 it
//                                        reads the protected resource metadata the challenge names, then the
//                                        issuer's metadata, asks the token endpoint for a token for the resource
//                                        (client $OAUTH_CLIENT_ID / $OAUTH_CLIENT_SECRET, issuer $OAUTH_ISSUER,
//                                        scopes $OAUTH_SCOPE) and retries.
//
// Both modes connect, call list_workflows, then create_workflow, and report each outcome plus every HTTP exchange
// the client made (method, path, status, WWW-Authenticate; for token requests the scope and resource asked for).
// Exit status: 0 when the script ran to the end (the outcomes are facts for the test to judge), 2 on a crash.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { ClientCredentialsProvider } from '@modelcontextprotocol/sdk/client/auth-extensions.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const summary = { mode: null, connected: false, connectError: null, calls: {}, exchanges: [] };

function describe(error) {
  return { name: error?.name ?? 'Error', code: error?.code ?? null, message: String(error?.message ?? error).slice(0, 400) };
}

/** fetch that records what the client sends and gets (never a token or a secret). */
async function recordingFetch(input, init) {
  const url = new URL(input instanceof Request ? input.url : String(input));
  const response = await fetch(input, init);
  const exchange = {
    method: init?.method ?? 'GET',
    path: url.pathname,
    status: response.status,
    wwwAuthenticate: response.headers.get('www-authenticate'),
  };
  if (init?.body instanceof URLSearchParams) {
    exchange.scope = init.body.get('scope');
    exchange.resource = init.body.get('resource');
    exchange.grantType = init.body.get('grant_type');
  }
  summary.exchanges.push(exchange);
  return response;
}

function transportFor(mode, url) {
  if (mode === 'bearer') {
    const token = process.env.FLOWSTEER_OAUTH_TOKEN;
    const headers = token ? { Authorization: `Bearer ${token}` } : {};
    return new StreamableHTTPClientTransport(url, { requestInit: { headers }, fetch: recordingFetch });
  }
  if (mode === 'discover') {
    const authProvider = new ClientCredentialsProvider({
      clientId: process.env.OAUTH_CLIENT_ID,
      clientSecret: process.env.OAUTH_CLIENT_SECRET,
      expectedIssuer: process.env.OAUTH_ISSUER,
      scope: process.env.OAUTH_SCOPE,
      clientName: 'flowsteer-oauth-conformance',
    });
    return new StreamableHTTPClientTransport(url, { authProvider, fetch: recordingFetch });
  }
  throw new Error('usage: node oauth_client.mjs bearer|discover URL');
}

async function outcome(name, call) {
  try {
    summary.calls[name] = { ok: true, ...(await call()) };
  } catch (error) {
    summary.calls[name] = { ok: false, error: describe(error) };
  }
}

async function main() {
  const [mode, target] = process.argv.slice(2);
  summary.mode = mode;
  const client = new Client({ name: 'flowsteer-oauth-conformance', version: '1.0.0' });
  try {
    await client.connect(transportFor(mode, new URL(target)));
  } catch (error) {
    summary.connectError = describe(error);
    return;
  }
  summary.connected = true;
  try {
    summary.server = client.getServerVersion()?.name ?? null;
    await outcome('list_workflows', async () => {
      const result = await client.callTool({ name: 'list_workflows', arguments: {} });
      return { isError: result.isError === true, count: result.structuredContent?.workflows?.length ?? null };
    });
    await outcome('create_workflow', async () => {
      const result = await client.callTool({ name: 'create_workflow', arguments: { task: 'What is 6 * 7?', task_type: 'math' } });
      return { isError: result.isError === true, workflowId: result.structuredContent?.workflow_id ?? null };
    });
  } finally {
    await client.close();
  }
}

let status = 0;
try {
  await main();
} catch (error) {
  summary.crash = describe(error);
  status = 2;
}
process.stdout.write(JSON.stringify(summary) + '\n');
process.exit(status);
