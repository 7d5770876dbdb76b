// Conformance client: drives a FlowSteer MCP server with the official TypeScript SDK, a client nobody on this
// project wrote, and prints one JSON summary on stdout (tests/conformance/test_ts_client.py asserts on it).
//
//   node client.mjs stdio COMMAND [ARG...]   spawn the server over stdio (the environment is passed through)
//   node client.mjs http URL                 streamable HTTP; FLOWSTEER_MCP_TOKEN, when set, is the bearer token
//
// Generic protocol checks live here (`checks`, each {name, ok, detail}); the server-specific expectations
// (which tool is destructive, which error code) are asserted by the pytest test from the reported facts.
// Exit status: 0 when every check passed, 1 when one failed, 2 on a crash (the summary still printed if possible).

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { transportFrom } from './transport.mjs';
import { McpError } from '@modelcontextprotocol/sdk/types.js';

const summary = { transport: null, server: null, tools: {}, roundTrip: {}, progress: {}, errors: {}, checks: [] };

function check(name, ok, detail = null) {
  summary.checks.push({ name, ok: Boolean(ok), detail });
}

function connectArgs(argv) {
  const { kind, transport } = transportFrom(argv, 'client.mjs');
  summary.transport = kind;
  return transport;
}

/** The JSON-RPC error of a request that must fail: {code, message}, or {code: null} when it succeeded. */
async function protocolError(request) {
  try {
    const result = await request();
    return { code: null, message: JSON.stringify(result).slice(0, 300) };
  } catch (error) {
    if (error instanceof McpError) return { code: error.code, message: error.message };
    throw error;
  }
}

function strictlyIncreasing(events) {
  return events.every((e, i) => i === 0 || e.progress > events[i - 1].progress);
}

function withinTotal(events) {
  return events.every((e) => e.total === undefined || e.progress <= e.total);
}

/** Call a tool, recording its progress notifications; structuredContent is validated by the SDK. */
async function callWithProgress(client, name, args) {
  const events = [];
  const result = await client.callTool({ name, arguments: args }, undefined, {
    onprogress: (p) => events.push({ progress: p.progress, total: p.total, message: p.message }),
  });
  return { result, events };
}

async function listTools(client) {
  const { tools } = await client.listTools(); // also compiles each outputSchema for callTool's validation
  for (const tool of tools) {
    summary.tools[tool.name] = { title: tool.title ?? null, annotations: tool.annotations ?? null, outputSchema: Boolean(tool.outputSchema) };
  }
  check('tools have titles', tools.every((t) => typeof t.title === 'string' && t.title.length > 0));
  check('tools have output schemas', tools.every((t) => t.outputSchema && t.outputSchema.type === 'object'));
  const writers = tools.filter((t) => !t.annotations?.readOnlyHint);
  check(
    'writing tools state destructiveHint',
    writers.every((t) => typeof t.annotations?.destructiveHint === 'boolean'),
    writers.filter((t) => typeof t.annotations?.destructiveHint !== 'boolean').map((t) => t.name),
  );
}

async function roundTrip(client) {
  const created = await client.callTool({
    name: 'create_workflow',
    arguments: { task: 'What is 17 * 23?', task_type: 'math', options: { finish: 'relaxed' } },
  });
  const id = created.structuredContent.workflow_id;
  check('create_workflow returns a workflow_id', typeof id === 'string' && id.startsWith('wf_'));
  check('a new workflow has no execution', created.structuredContent.execution === null);

  const pending = await client.callTool({ name: 'act', arguments: { workflow_id: id, text: '<action>add</action><operator>Plan</operator>' } });
  const request = pending.structuredContent.state.awaiting_prompt_for;
  check('awaiting_prompt_for is an object', request !== null && typeof request === 'object' && request.node_id === 'node_1', request);

  const acted = await callWithProgress(client, 'act', { workflow_id: id, text: 'Split the product into easy parts.' });
  const step = acted.result.structuredContent;
  check('act completes the pending edit', step.ok === true && step.state.dsl === 'Plan' && step.state.awaiting_prompt_for === null, step.message);

  const added = await callWithProgress(client, 'add_structure', {
    workflow_id: id, structure: 'parallel', operators: ['Custom', 'Custom'], prompts: ['Multiply directly.', 'Multiply by parts.'],
  });
  const detail = (await client.callTool({ name: 'get_workflow', arguments: { workflow_id: id } })).structuredContent;
  check('get_workflow shows the edits', detail.workflow_id === id && detail.state.dsl === 'Plan -> [Custom, Custom]' && detail.state.round === 3, detail.state);

  const run = await callWithProgress(client, 'run_workflow', { workflow_id: id });
  const executed = run.result.structuredContent.execution.status !== 'no_executor';
  summary.roundTrip = { workflowId: id, dsl: detail.state.dsl, round: detail.state.round, runStatus: run.result.structuredContent.execution.status, executed };
  summary.progress = { act: acted.events, add_structure: added.events, run_workflow: run.events };

  const finished = await callWithProgress(client, 'finish', { workflow_id: id });
  summary.roundTrip.finished = finished.result.structuredContent.done;
  summary.roundTrip.endReason = finished.result.structuredContent.end_reason;
  for (const [tool, events] of Object.entries(summary.progress)) {
    check(`${tool} progress strictly increases`, strictlyIncreasing(events), events.map((e) => e.progress));
    check(`${tool} progress never passes total`, withinTotal(events), events);
  }
  return id;
}

async function errors(client) {
  summary.errors.unknownTool = await protocolError(() => client.callTool({ name: 'no_such_tool', arguments: {} }));
  summary.errors.missingPromptArgument = await protocolError(() => client.getPrompt({ name: 'flow_director', arguments: {} }));
  summary.errors.unknownPrompt = await protocolError(() => client.getPrompt({ name: 'no_such_prompt', arguments: {} }));
  summary.errors.unknownResource = await protocolError(() => client.readResource({ uri: 'flowsteer://nothing' }));
  summary.errors.unknownWorkflowResource = await protocolError(() => client.readResource({ uri: 'flowsteer://workflows/wf_missing' }));
  const invalid = await client.callTool({ name: 'get_workflow', arguments: { workflow_id: 3 } });
  summary.errors.invalidArguments = { isError: invalid.isError === true, text: invalid.content?.[0]?.text ?? null };
  const created = await client.callTool({ name: 'create_workflow', arguments: { task: 'What is 6 * 7?', task_type: 'math' } });
  const id = created.structuredContent.workflow_id;
  const unfed = await client.callTool({ name: 'add_operator', arguments: { workflow_id: id, operator: 'ScEnsemble' } });
  const after = await client.callTool({ name: 'get_workflow', arguments: { workflow_id: id } });
  summary.errors.unfedEnsemble = {
    isError: unfed.isError === true,
    text: unfed.content?.[0]?.text ?? null,
    dslAfter: after.structuredContent?.state?.dsl ?? null,
  };
}

async function main() {
  const client = new Client({ name: 'flowsteer-conformance', version: '1.0.0' });
  await client.connect(connectArgs(process.argv.slice(2)));
  try {
    summary.server = { info: client.getServerVersion(), capabilities: client.getServerCapabilities() };
    await listTools(client);
    await roundTrip(client);
    await errors(client);
  } finally {
    await client.close();
  }
}

let status = 0;
try {
  await main();
  status = summary.checks.every((c) => c.ok) ? 0 : 1;
} catch (error) {
  summary.crash = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  status = 2;
}
process.stdout.write(JSON.stringify(summary) + '\n');
process.exit(status);
