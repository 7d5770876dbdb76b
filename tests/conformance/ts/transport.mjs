// The transport every conformance script connects with, from its command line:
//   stdio COMMAND [ARG...]   spawn the server over stdio (the environment is passed through)
//   http URL                 streamable HTTP; FLOWSTEER_MCP_TOKEN, when set, is sent as the bearer token

import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

/** {kind, transport} for argv, or an Error naming `script`'s usage. */
export function transportFrom(argv, script) {
  const [kind, target, ...rest] = argv;
  if (kind === 'stdio' && target) {
    return { kind, transport: new StdioClientTransport({ command: target, args: rest, env: { ...process.env }, stderr: 'inherit' }) };
  }
  if (kind === 'http' && target) {
    const token = process.env.FLOWSTEER_MCP_TOKEN;
    const headers = token ? { Authorization: `Bearer ${token}` } : {};
    return { kind, transport: new StreamableHTTPClientTransport(new URL(target), { requestInit: { headers } }) };
  }
  throw new Error(`usage: node ${script} stdio COMMAND [ARG...] | node ${script} http URL`);
}
