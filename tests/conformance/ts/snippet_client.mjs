// Client-configuration check: connects the official TypeScript SDK the way each README snippet configures a
// client (tests/conformance/test_client_snippets.py extracts them and replaces paths, port and token), lists the
// tools, and calls list_library, which every configuration offers. One JSON summary goes to stdout.
//
//   node snippet_client.mjs SPECS.json
//
// SPECS.json is a list of {label, transport: "stdio", command, args, env} or {label, transport: "http", url,
// headers}. Exit status: 0 when the script ran (the test judges the summary), 2 on a crash.

import { readFileSync } from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

function transportFor(spec) {
  if (spec.transport === 'stdio') {
    return new StdioClientTransport({ command: spec.command, args: spec.args, env: spec.env, stderr: 'inherit' });
  }
  return new StreamableHTTPClientTransport(new URL(spec.url), { requestInit: { headers: spec.headers ?? {} } });
}

async function tryOne(spec) {
  const client = new Client({ name: 'flowsteer-snippet-check', version: '1.0.0' });
  try {
    await client.connect(transportFor(spec));
    const { tools } = await client.listTools();
    const library = await client.callTool({ name: 'list_library', arguments: { task_type: 'code' } });
    const section = library.structuredContent?.task_types?.[0];
    return {
      label: spec.label,
      connected: true,
      server: client.getServerVersion()?.name ?? null,
      tools: tools.map((t) => t.name).sort(),
      codeDefault: section?.default ?? null,
      error: library.isError ? library.content?.[0]?.text ?? 'error' : null,
    };
  } catch (error) {
    return { label: spec.label, connected: false, error: error instanceof Error ? `${error.name}: ${error.message}` : String(error) };
  } finally {
    await client.close().catch(() => {});
  }
}

const summary = { results: [] };
let status = 0;
try {
  const specs = JSON.parse(readFileSync(process.argv[2], 'utf8'));
  for (const spec of specs) summary.results.push(await tryOne(spec));
} catch (error) {
  summary.crash = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  status = 2;
}
process.stdout.write(JSON.stringify(summary) + '\n');
process.exit(status);
