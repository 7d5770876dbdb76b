// Subscription check: the official TypeScript SDK subscribes to a FlowSteer workflow's resources, edits the
// workflow, and reports the change notifications it received as one JSON summary on stdout
// (tests/conformance/test_ts_subscriptions.py asserts on it).
//
//   node subscribe.mjs stdio COMMAND [ARG...]   spawn the server over stdio (the environment is passed through)
//   node subscribe.mjs http URL                 streamable HTTP; FLOWSTEER_MCP_TOKEN, when set, is the bearer token
//
// Every notification is recorded with the phase it arrived in. After each change the script waits (up to
// WAIT_MS) for the notifications that change should bring before it goes on, so a missing one shows up as a
// timeout rather than a race. Exit status: 0 when all expected notifications came, 1 when one timed out, 2 on
// a crash (the summary still printed if possible).

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { transportFrom } from './transport.mjs';
import {
  McpError,
  ResourceListChangedNotificationSchema,
  ResourceUpdatedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';

const WAIT_MS = 10000;
const LIST_CHANGED = 'list_changed';
const summary = {
  transport: null, protocolVersion: null, capabilities: null, workflowId: null, uris: null,
  listed: {}, errors: {}, read: null, heard: [], timeouts: [],
};
let phase = 'connect';

function connectArgs(argv) {
  const { kind, transport } = transportFrom(argv, 'subscribe.mjs');
  summary.transport = kind;
  return transport;
}

/** What a phase brought: updated URIs and LIST_CHANGED, in arrival order. */
function heardIn(name) {
  return summary.heard.filter((h) => h.phase === name).map((h) => h.what);
}

/** Wait until phase `name` heard everything in `expected` (any order); record a timeout otherwise. */
async function expect(name, expected) {
  const deadline = Date.now() + WAIT_MS;
  const done = () => expected.every((what) => heardIn(name).includes(what));
  while (!done()) {
    if (Date.now() > deadline) {
      summary.timeouts.push({ phase: name, expected, heard: heardIn(name) });
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** Run `action` as phase `name` and wait for the notifications it must bring. */
async function step(name, action, expected) {
  phase = name;
  const result = await action();
  await expect(name, expected);
  return result;
}

async function protocolError(request) {
  try {
    await request();
    return { code: null };
  } catch (error) {
    if (error instanceof McpError) return { code: error.code, message: error.message };
    throw error;
  }
}

async function callTool(client, name, args) {
  const result = await client.callTool({ name, arguments: args });
  if (result.isError) throw new Error(`${name} failed: ${result.content?.[0]?.text}`);
  return result.structuredContent;
}

async function listedUris(client) {
  return (await client.listResources()).resources.map((r) => r.uri);
}

async function scenario(client) {
  summary.listed.before = await listedUris(client);
  const created = await step('create', () => callTool(client, 'create_workflow', { task: 'What is 17 * 23?', task_type: 'math' }), [LIST_CHANGED]);
  const id = created.workflow_id;
  const state = `flowsteer://workflows/${id}`;
  const mermaid = `${state}/mermaid`;
  summary.workflowId = id;
  summary.uris = { state, mermaid };
  summary.listed.after = await listedUris(client);

  phase = 'subscribe';
  summary.errors.unknownWorkflow = await protocolError(() => client.subscribeResource({ uri: 'flowsteer://workflows/wf_missing' }));
  summary.errors.unknownResource = await protocolError(() => client.subscribeResource({ uri: 'flowsteer://nothing' }));
  await client.subscribeResource({ uri: state });
  await client.subscribeResource({ uri: mermaid });

  await step('add_operator', () => callTool(client, 'add_operator', {
    workflow_id: id, operator: 'Plan', prompt: 'Split the product into easy parts.',
  }), [state, mermaid]);
  const read = await client.readResource({ uri: state });
  summary.read = { dsl: JSON.parse(read.contents[0].text).state.dsl };

  phase = 'unsubscribe';
  await client.unsubscribeResource({ uri: mermaid });
  await step('set_prompt', () => callTool(client, 'set_prompt', {
    workflow_id: id, node_id: 'node_1', prompt: 'Plan the multiplication.',
  }), [state]);
  await step('delete_workflow', () => callTool(client, 'delete_workflow', { workflow_id: id }), [state, LIST_CHANGED]);
  phase = 'end';
  await new Promise((resolve) => setTimeout(resolve, 300)); // anything unexpected still on its way lands in 'end'
}

async function main() {
  const transport = connectArgs(process.argv.slice(2));
  const setVersion = transport.setProtocolVersion?.bind(transport);
  transport.setProtocolVersion = (version) => {
    summary.protocolVersion = version;
    setVersion?.(version);
  };
  const client = new Client({ name: 'flowsteer-subscriptions', version: '1.0.0' });
  client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => summary.heard.push({ phase, what: n.params.uri }));
  client.setNotificationHandler(ResourceListChangedNotificationSchema, () => summary.heard.push({ phase, what: LIST_CHANGED }));
  await client.connect(transport);
  try {
    summary.capabilities = client.getServerCapabilities();
    await scenario(client);
  } finally {
    await client.close();
  }
}

let status = 0;
try {
  await main();
  status = summary.timeouts.length === 0 ? 0 : 1;
} catch (error) {
  summary.crash = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  status = 2;
}
process.stdout.write(JSON.stringify(summary) + '\n');
process.exit(status);
