// Shared by the scripts in this directory: command line, client options, JSON lines.
//
// Every script uses the official Apache RocketMQ 5 Node.js client (npm
// `rocketmq-client-nodejs`, pinned in ../package.json) and nothing of txmq. It prints one
// JSON object per line on stdout: {"event": ..., "t_ms": <wall clock ms>, ...}. A failed
// client call is an "error" line (op, type, code, message, client_log); the script goes
// on or stops as its scenario needs and exits 0. Anything unexpected is a stack trace on
// stderr and exit 1.
'use strict';

const { format, parseArgs } = require('node:util');

// The client's own log: warnings and errors are copied to stderr and kept, so an error
// line can carry what the client logged meanwhile. Info lines are kept too (some results
// are only logged, e.g. the end of a transaction a TransactionChecker answered) and, with
// --verbose, printed. Passing a logger also keeps the client from writing its default
// ~/logs/rocketmq/rocketmq_client_nodejs.log.
class ClientLog {
  constructor(verbose) {
    this.verbose = verbose;
    this.lines = [];
  }

  #record(level, args) {
    const [ first, ...rest ] = args;
    let line;
    if (first instanceof Error) {
      line = `${first.name}: ${first.message}`;
    } else {
      line = format(first, ...rest);
    }
    const entry = `[${level}] ${line}`;
    this.lines.push(entry);
    if (this.lines.length > 2000) this.lines.splice(0, 1000);
    if (level !== 'INFO' && level !== 'DEBUG') {
      process.stderr.write(`rocketmq-client: ${entry}\n`);
    } else if (this.verbose) {
      process.stderr.write(`rocketmq-client: ${entry}\n`);
    }
    return entry;
  }

  info(...args) { this.#record('INFO', args); }
  warn(...args) { this.#record('WARN', args); }
  error(...args) { this.#record('ERROR', args); }
  debug(...args) { if (this.verbose) this.#record('DEBUG', args); }
  close() {}

  mark() { return this.lines.length; }
  since(mark) { return this.lines.slice(mark); }
}

const COMMON_OPTIONS = {
  endpoint: { type: 'string' },
  'access-key': { type: 'string', default: '' },
  'secret-key': { type: 'string', default: '' },
  'request-timeout-ms': { type: 'string', default: '5000' },
  verbose: { type: 'boolean', default: false },
  help: { type: 'boolean', short: 'h', default: false },
};

function parse(usage, options) {
  let parsed;
  try {
    parsed = parseArgs({ options: { ...COMMON_OPTIONS, ...options }, allowPositionals: false });
  } catch (err) {
    process.stderr.write(`${err.message}\n${usage}\n`);
    process.exit(2);
  }
  const values = parsed.values;
  if (values.help) {
    process.stdout.write(`${usage}\n`);
    process.exit(0);
  }
  if (!values.endpoint) {
    process.stderr.write(`--endpoint is required\n${usage}\n`);
    process.exit(2);
  }
  return values;
}

const COMMON_USAGE = `common options:
  --endpoint HOST:PORT        the RocketMQ 5 gRPC endpoint (txmq's gateway), required
  --access-key AK --secret-key SK   sign every call (MQv2-HMAC-SHA1)
  --request-timeout-ms N      every unary call (default 5000; the client wants >= 1000)
  --verbose                   also print the client's info log on stderr`;

// Options every client takes. TLS: the client dials plaintext unless sslEnabled is true
// (BaseClient: `this.sslEnabled = options.sslEnabled === true`); it is set to false here
// explicitly because txmq's gateway serves plaintext gRPC.
function clientOptions(values, log) {
  const options = {
    endpoints: values.endpoint,
    namespace: '',
    sslEnabled: false,
    requestTimeout: Number(values['request-timeout-ms']),
    logger: log,
  };
  if (values['access-key']) {
    options.sessionCredentials = {
      accessKey: values['access-key'],
      accessSecret: values['secret-key'],
    };
  }
  return options;
}

function emit(event, fields = {}) {
  process.stdout.write(JSON.stringify({ event, t_ms: Date.now(), ...fields }) + '\n');
}

// The error of a failed call as JSON fields: the client's exceptions carry the v2 status
// code (`code`); the client log lines written since `mark` are attached.
function errorFields(err, log, mark) {
  const fields = {
    type: err && err.name ? err.name : typeof err,
    code: err && typeof err.code === 'number' ? err.code : null,
    message: err && err.message ? err.message : String(err),
    client_log: log ? log.since(mark).filter(l => !l.startsWith('[INFO]')).slice(-10) : [],
  };
  if (err && err.cause) fields.cause = String(err.cause.message || err.cause);
  return fields;
}

// Run `fn`; on failure print an error line for `op` and return undefined.
async function reported(op, log, context, fn) {
  const mark = log.mark();
  try {
    return await fn();
  } catch (err) {
    emit('error', { op, ...context, ...errorFields(err, log, mark) });
    return undefined;
  }
}

// A received (or checked) MessageView as JSON.
function messageFields(view) {
  return {
    message_id: view.messageId,
    topic: view.topic,
    body: view.body ? view.body.toString('utf8') : null,
    tag: view.tag ?? null,
    keys: [ ...(view.keys || []) ].sort(),
    properties: Object.fromEntries(view.properties || []),
    delivery_attempt: view.deliveryAttempt ?? null,
    born_host: view.bornHost ?? null,
    born_timestamp_ms: view.bornTimestamp ? view.bornTimestamp.getTime() : null,
    receipt_handle: view.receiptHandle ?? null,
    offset: view.offset ?? null,
    corrupted: Boolean(view.corrupted),
  };
}

function parseProperties(pairs) {
  const out = new Map();
  for (const pair of pairs || []) {
    const eq = pair.indexOf('=');
    if (eq <= 0) {
      process.stderr.write(`--property wants NAME=VALUE, got ${JSON.stringify(pair)}\n`);
      process.exit(2);
    }
    out.set(pair.slice(0, eq), pair.slice(eq + 1));
  }
  return out;
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

// Run `main`, then exit: 0 when it returns, 1 (stack on stderr) when it throws. The
// explicit exit also ends a process whose client left a timer or stream behind.
function run(main) {
  main().then(
    () => process.exit(0),
    err => {
      process.stderr.write(`unexpected: ${err && err.stack ? err.stack : err}\n`);
      process.exit(1);
    },
  );
}

module.exports = {
  ClientLog,
  COMMON_USAGE,
  clientOptions,
  emit,
  errorFields,
  messageFields,
  parse,
  parseProperties,
  reported,
  run,
  sleep,
};
