// Long calls as a standard client meets them: the official TypeScript SDK against a server whose executor takes
// longer than the SDK's default 60 s request timeout for each model call. Four calls run at once, each on a
// workflow of its own, and one JSON summary goes to stdout (tests/conformance/test_ts_long_calls.py asserts on it):
//
//   tasks    default client options, the asynchronous form over MCP tasks:
//            client.experimental.tasks.callToolStream(run_workflow)
//   job      default client options, the asynchronous form over plain tools: start_job(act), then get_job polls
//   sync     the synchronous form with { onprogress, resetTimeoutOnProgress: true }: callTool(run_workflow)
//   control  default client options, the synchronous form: callTool(run_workflow), which must time out (-32001),
//            showing that the scenario is real and that the forms above are what make it work
//
//   node long_calls.mjs stdio COMMAND [ARG...]   spawn the server over stdio (the environment is passed through)
//   node long_calls.mjs http URL                 streamable HTTP; FLOWSTEER_MCP_TOKEN, when set, is the bearer token
//
// Exit status: 0 when the script ran (the test judges the summary), 2 on a crash (the summary still printed).

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { transportFrom } from './transport.mjs';
import { McpError } from '@modelcontextprotocol/sdk/types.js';

const ADD = '<action>add</action><operator>Custom</operator><prompt>Answer with the number only.</prompt>';
const JOB_WAIT_S = 20; // each get_job poll stays well under the 60 s default timeout
const summary = { transport: null, protocolVersion: null, taskCapability: null, forms: {} };

function connectArgs(argv) {
  const { kind, transport } = transportFrom(argv, 'long_calls.mjs');
  summary.transport = kind;
  return transport;
}

/** A workflow for one timed call. Without `executeEachStep` it gets its Custom node now, without running it,
 * so that only the timed run calls the executor; with it, the timed call is the edit (which runs the workflow). */
async function builtWorkflow(client, executeEachStep) {
  const options = executeEachStep ? { finish: 'relaxed' } : { finish: 'relaxed', execute_each_step: false };
  const created = await client.callTool({
    name: 'create_workflow', arguments: { task: 'What is 6 * 7?', task_type: 'math', options },
  });
  const id = created.structuredContent.workflow_id;
  if (!executeEachStep) {
    await client.callTool({ name: 'add_operator', arguments: { workflow_id: id, operator: 'Custom', prompt: 'Answer with the number only.' } });
  }
  return id;
}

function failure(error) {
  return error instanceof McpError ? { code: error.code, message: error.message } : { code: null, message: String(error) };
}

async function tasksForm(client) {
  const id = await builtWorkflow(client, false);
  const started = Date.now();
  const statuses = [];
  let result = null;
  let error = null;
  const stream = client.experimental.tasks.callToolStream({ name: 'run_workflow', arguments: { workflow_id: id } });
  for await (const message of stream) {
    if (message.type === 'taskCreated') statuses.push({ status: message.task.status, ms: Date.now() - started });
    if (message.type === 'taskStatus') statuses.push({ status: message.task.status, message: message.task.statusMessage, ms: Date.now() - started });
    if (message.type === 'result') result = message.result;
    if (message.type === 'error') error = failure(message.error);
  }
  return {
    elapsedMs: Date.now() - started,
    error,
    statuses,
    executionStatus: result?.structuredContent?.execution?.status ?? null,
    output: result?.structuredContent?.execution?.output ?? null,
  };
}

async function jobForm(client) {
  const id = await builtWorkflow(client, true);
  const started = Date.now();
  const begun = (await client.callTool({ name: 'start_job', arguments: { name: 'act', arguments: { workflow_id: id, text: ADD } } })).structuredContent;
  const acceptedMs = Date.now() - started;
  const polls = [];
  let job = begun;
  while (job.status === 'working') {
    job = (await client.callTool({ name: 'get_job', arguments: { job_id: begun.job_id, wait_s: JOB_WAIT_S } })).structuredContent;
    polls.push({ status: job.status, message: job.message, ms: Date.now() - started });
  }
  return {
    elapsedMs: Date.now() - started,
    acceptedMs,
    status: job.status,
    polls,
    dsl: job.result?.state?.dsl ?? null,
    executionStatus: job.result?.execution?.status ?? null,
    output: job.result?.execution?.output ?? null,
    error: job.error,
  };
}

async function syncForm(client) {
  const id = await builtWorkflow(client, false);
  const started = Date.now();
  const events = [];
  let result = null;
  let error = null;
  try {
    result = await client.callTool({ name: 'run_workflow', arguments: { workflow_id: id } }, undefined, {
      resetTimeoutOnProgress: true,
      onprogress: (p) => events.push({ ms: Date.now() - started, progress: p.progress, total: p.total, message: p.message }),
    });
  } catch (caught) {
    error = failure(caught);
  }
  const gaps = events.map((e, i) => e.ms - (i === 0 ? 0 : events[i - 1].ms));
  return {
    elapsedMs: Date.now() - started,
    error,
    events,
    maxGapMs: gaps.length ? Math.max(...gaps, Date.now() - started - events[events.length - 1].ms) : null,
    executionStatus: result?.structuredContent?.execution?.status ?? null,
    output: result?.structuredContent?.execution?.output ?? null,
  };
}

async function controlForm(client) {
  const id = await builtWorkflow(client, false);
  const started = Date.now();
  try {
    const result = await client.callTool({ name: 'run_workflow', arguments: { workflow_id: id } });
    return { elapsedMs: Date.now() - started, error: null, executionStatus: result.structuredContent?.execution?.status ?? null };
  } catch (caught) {
    return { elapsedMs: Date.now() - started, error: failure(caught) };
  }
}

async function main() {
  const client = new Client({ name: 'flowsteer-long-calls', version: '1.0.0' });
  await client.connect(connectArgs(process.argv.slice(2)));
  try {
    summary.protocolVersion = client.transport?.protocolVersion ?? null;
    summary.taskCapability = client.getServerCapabilities()?.tasks ?? null;
    await client.listTools(); // the SDK learns each tool's taskSupport and output schema from the list
    const [tasks, job, sync, control] = await Promise.all([
      tasksForm(client), jobForm(client), syncForm(client), controlForm(client),
    ]);
    summary.forms = { tasks, job, sync, control };
  } finally {
    await client.close();
  }
}

let status = 0;
try {
  await main();
} catch (error) {
  summary.crash = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  status = 2;
}
process.stdout.write(JSON.stringify(summary) + '\n');
process.exit(status);
