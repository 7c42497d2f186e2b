#!/usr/bin/env node
// txmq polyglot proof: a transactional producer in Node.js built from protos/ alone.
//
// The .proto files are loaded at run time (no generated code, nothing copied). Given one
// bootstrap address the program:
//   1. route:         Route/QueryRoute -> a store and a txcheck endpoint
//   2. channel:       Transaction/ProducerChannel (hello) so the broker can check us
//   3. send:          Store/SendMessage, transaction_prepared, client-made unique_id
//   4. commit:        Transaction/EndTransaction COMMIT with the half message's offsets
//   5. send_unknown / end_unknown / check / check_commit:
//                     a second half message ended UNKNOWN; the broker's check arrives on
//                     the channel and is answered COMMIT (from_transaction_check = true)
//   6. error:         a send to an unknown topic, decoded from the `txmq-error-bin` trailer
// One JSON line per step on stdout; exit 0 on success, 1 (with a "fatal" line) otherwise.
'use strict';

const crypto = require('node:crypto');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');

const USAGE = `usage: node tx_producer.js --endpoint HOST:PORT --topic TOPIC [options]
  --endpoint HOST:PORT    bootstrap address (any txmq service serves Route)
  --topic TOPIC           an existing topic to send the two transactional messages to
  --group GROUP           producer group (default PG_NODE)
  --client-id ID          channel client id (default node-<pid>-<random>)
  --missing-topic TOPIC   topic for the error demo (default NoSuchTopic-<random>)
  --answer-via rpc|stream answer the check with the EndTransaction RPC (default) or on
                          the ProducerChannel stream (ProducerCommand.end_transaction)
  --protos DIR            proto include dir (default: <repo>/protos)
  --timeout-s N           overall budget for waits: route, leader, check (default 30)`;

const ERROR_KEY = 'txmq-error-bin';
const PROTO_FILES = [
  'txmq/v1/common.proto',
  'txmq/v1/errors.proto',
  'txmq/v1/route.proto',
  'txmq/v1/store.proto',
  'txmq/v1/txcheck.proto',
];

// ---------------------------------------------------------------------------------------
// arguments

function parseArgs(argv) {
  const opts = {
    endpoint: '',
    topic: '',
    group: 'PG_NODE',
    clientId: `node-${process.pid}-${crypto.randomBytes(3).toString('hex')}`,
    missingTopic: `NoSuchTopic-${crypto.randomBytes(4).toString('hex')}`,
    answerVia: 'rpc',
    protos: path.resolve(__dirname, '..', '..', 'protos'),
    timeoutS: 30,
  };
  const names = {
    '--endpoint': 'endpoint',
    '--topic': 'topic',
    '--group': 'group',
    '--client-id': 'clientId',
    '--missing-topic': 'missingTopic',
    '--answer-via': 'answerVia',
    '--protos': 'protos',
    '--timeout-s': 'timeoutS',
  };
  for (let i = 0; i < argv.length; i++) {
    let arg = argv[i];
    if (arg === '-h' || arg === '--help') {
      process.stdout.write(USAGE + '\n');
      process.exit(0);
    }
    let value;
    const eq = arg.indexOf('=');
    if (eq > 0) {
      value = arg.slice(eq + 1);
      arg = arg.slice(0, eq);
    }
    const key = names[arg];
    if (!key) usage(`unknown option ${arg}`);
    if (value === undefined) {
      if (i + 1 >= argv.length) usage(`${arg} needs a value`);
      value = argv[++i];
    }
    opts[key] = value;
  }
  opts.timeoutS = Number(opts.timeoutS);
  if (!opts.endpoint) usage('--endpoint is required');
  if (!opts.topic) usage('--topic is required');
  if (!Number.isFinite(opts.timeoutS) || opts.timeoutS <= 0) usage('--timeout-s must be a positive number');
  if (!['rpc', 'stream'].includes(opts.answerVia)) usage('--answer-via is rpc or stream');
  return opts;
}

function usage(problem) {
  process.stderr.write(`${problem}\n${USAGE}\n`);
  process.exit(2);
}

// ---------------------------------------------------------------------------------------
// protos, loaded at run time

function loadProtos(includeDir) {
  const options = {
    keepCase: true, // field names exactly as in the .proto files (snake_case)
    longs: String, // int64 as decimal strings: no precision loss
    enums: String, // enum values by name
    bytes: Buffer,
    defaults: true,
    oneofs: true, // a oneof's set field is named in e.g. command.command
    includeDirs: [includeDir],
  };
  const definition = protoLoader.loadSync(PROTO_FILES, options);
  const v1 = grpc.loadPackageDefinition(definition).txmq.v1;
  // ErrorDetail is no RPC's message, so proto-loader gives it no (de)serializer: decode
  // it with protobufjs (proto-loader's own parser) from the same files.
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => (path.isAbsolute(target) ? target : path.join(includeDir, target));
  root.loadSync(PROTO_FILES, { keepCase: true });
  const errorDetail = root.lookupType('txmq.v1.ErrorDetail');
  return { v1, errorDetail };
}

// ---------------------------------------------------------------------------------------
// helpers

function emit(step, fields) {
  process.stdout.write(JSON.stringify({ step, ...fields }) + '\n');
}

function newUniqueId() {
  return crypto.randomBytes(16).toString('hex').toUpperCase(); // 32 uppercase hex digits
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const STATUS_NAMES = Object.fromEntries(Object.entries(grpc.status).map(([k, v]) => [v, k]));

// A failed call -> { grpc_status, code, message, retriable, metadata } from the
// `txmq-error-bin` trailer (absent for transport failures).
function decodeError(err, errorDetail) {
  const out = {
    grpc_status: STATUS_NAMES[err.code] || String(err.code),
    code: null,
    message: err.details || err.message,
    retriable: err.code === grpc.status.UNAVAILABLE || err.code === grpc.status.DEADLINE_EXCEEDED,
    metadata: {},
  };
  const raw = err.metadata ? err.metadata.get(ERROR_KEY) : [];
  if (raw && raw.length > 0) {
    const detail = errorDetail.toObject(errorDetail.decode(raw[0]), {
      enums: String,
      defaults: true,
      objects: true,
    });
    out.code = detail.code;
    out.message = detail.message;
    out.retriable = detail.retriable;
    out.metadata = detail.metadata || {};
  }
  return out;
}

class TxmqCallError extends Error {
  constructor(rpc, detail) {
    super(`${rpc} failed: ${detail.code || detail.grpc_status}: ${detail.message}`);
    this.rpc = rpc;
    this.detail = detail;
  }
}

function deadline(seconds) {
  return new Date(Date.now() + seconds * 1000);
}

class Client {
  constructor(opts, protos) {
    this.opts = opts;
    this.v1 = protos.v1;
    this.errorDetail = protos.errorDetail;
    this.clients = [];
  }

  stub(Service, address) {
    const client = new Service(address, grpc.credentials.createInsecure());
    this.clients.push(client);
    return client;
  }

  // One unary call as a promise; a failure becomes a TxmqCallError with the decoded detail.
  call(stub, rpc, request, timeoutS = 10) {
    return new Promise((resolve, reject) => {
      stub[rpc](request, { deadline: deadline(timeoutS) }, (err, response) => {
        if (err) reject(new TxmqCallError(rpc, decodeError(err, this.errorDetail)));
        else resolve(response);
      });
    });
  }

  // Retry retriable failures (no check-loop leader yet, a store restarting) until `untilMs`.
  async callRetrying(stub, rpc, request, untilMs) {
    let delay = 50;
    for (;;) {
      try {
        return await this.call(stub, rpc, request, Math.max(1, (untilMs - Date.now()) / 1000));
      } catch (err) {
        if (!(err instanceof TxmqCallError) || !err.detail.retriable || Date.now() + delay > untilMs) throw err;
        await sleep(delay);
        delay = Math.min(delay * 2, 1000);
      }
    }
  }

  close() {
    for (const c of this.clients) c.close();
  }
}

// ---------------------------------------------------------------------------------------
// the producer channel

class ProducerChannel {
  constructor(client, address, group, clientId) {
    this.group = group;
    this.clientId = clientId;
    this.waiters = []; // { txid, resolve }
    this.pending = []; // checks nobody waited for yet
    this.onCheck = null;
    this.closed = false;
    const stub = client.stub(client.v1.Transaction, address);
    this.call = stub.ProducerChannel();
    this.opened = new Promise((resolve, reject) => {
      // The service sends its headers once the channel is registered.
      this.call.once('metadata', () => resolve());
      this.call.once('error', (err) => reject(new TxmqCallError('ProducerChannel', decodeError(err, client.errorDetail))));
    });
    this.call.on('data', (command) => this.dispatch(command));
    this.call.on('error', (err) => {
      if (!this.closed) process.stderr.write(`producer channel broke: ${err.message}\n`);
    });
    this.call.write({ hello: { producer_group: group, client_id: clientId } });
  }

  dispatch(command) {
    if (command.command !== 'check') return;
    const check = command.check;
    const i = this.waiters.findIndex((w) => w.txid === check.transaction_id);
    if (i >= 0) {
      const [w] = this.waiters.splice(i, 1);
      w.resolve(check);
    } else if (this.onCheck) {
      this.onCheck(check);
    }
  }

  nextCheck(txid, timeoutMs) {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        reject(new Error(`no transaction check for ${txid} within ${timeoutMs} ms`));
      }, timeoutMs);
      const waiter = {
        txid,
        resolve: (check) => {
          clearTimeout(timer);
          resolve(check);
        },
      };
      this.waiters.push(waiter);
    });
  }

  send(command) {
    this.call.write(command);
  }

  close() {
    this.closed = true;
    this.call.end();
    this.call.cancel();
  }
}

// ---------------------------------------------------------------------------------------
// the steps

async function queryRoute(client, opts, untilMs) {
  const route = client.stub(client.v1.Route, opts.endpoint);
  let delay = 100;
  for (;;) {
    let response = null;
    let problem;
    try {
      response = await client.call(route, 'QueryRoute', { topic: opts.topic }, 5);
    } catch (err) {
      if (!(err instanceof TxmqCallError)) throw err;
      problem = err;
    }
    if (response) {
      const queue = response.queues.find((q) => (q.perm & 2) !== 0 && q.write_queue_nums > 0);
      const txcheck = response.txcheck_endpoints[0];
      if (queue && txcheck) return { response, queue, txcheck };
      problem = new Error(`route of ${opts.topic} has ${queue ? 'no txcheck endpoint' : 'no writable queue'} yet`);
    }
    // Registrations reach every service's route view through etcd: give them time.
    if (Date.now() + delay > untilMs) throw problem;
    await sleep(delay);
    delay = Math.min(delay * 2, 1000);
  }
}

function prepared(topic, body, group) {
  return {
    message: {
      topic,
      body: Buffer.from(body),
      unique_id: newUniqueId(),
      properties: { lang: 'nodejs' },
      born_timestamp_ms: String(Date.now()),
    },
    producer_group: group,
    transaction_prepared: true,
  };
}

// END_TRANSACTION for a half message: `half` is a SendResult (after our own send) or a
// CheckTransactionState (answering a check: the offsets of the half record it names,
// which is a put-back copy at the tail of the half queue, not the original).
function endRequest(group, half, resolution, fromCheck) {
  const isCheck = half.tran_state_table_offset !== undefined;
  return {
    producer_group: group,
    transaction_id: half.transaction_id || half.msg_id,
    commit_log_offset: half.commit_log_offset,
    // RocketMQ tranStateTableOffset: the half message's queue offset in the half queue.
    tran_state_table_offset: isCheck ? half.tran_state_table_offset : half.queue_offset,
    resolution,
    from_transaction_check: fromCheck,
    store_id: isCheck ? half.store_id : half.queue.store_id,
  };
}

function sendFields(request, result) {
  return {
    unique_id: request.message.unique_id,
    msg_id: result.msg_id,
    transaction_id: result.transaction_id,
    status: result.status,
    store_id: result.queue.store_id,
    queue_id: result.queue.queue_id,
    queue_offset: result.queue_offset,
    commit_log_offset: result.commit_log_offset,
  };
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const until = Date.now() + opts.timeoutS * 1000;
  const client = new Client(opts, loadProtos(opts.protos));
  let channel = null;
  try {
    // 1. route
    const { queue, txcheck } = await queryRoute(client, opts, until);
    emit('route', {
      topic: opts.topic,
      store_id: queue.store_id,
      store_address: queue.store_address,
      write_queue_nums: queue.write_queue_nums,
      txcheck_address: txcheck.address,
      txcheck_instance_id: txcheck.instance_id,
    });
    const store = client.stub(client.v1.Store, queue.store_address);
    const transaction = client.stub(client.v1.Transaction, txcheck.address);

    // 2. the producer channel; a check for a transaction we already know is answered
    //    with what we decided, any other with UNKNOWN (as a fresh producer would).
    channel = new ProducerChannel(client, txcheck.address, opts.group, opts.clientId);
    await channel.opened;
    emit('channel', { address: txcheck.address, producer_group: opts.group, client_id: opts.clientId });
    const decided = new Map(); // txid -> resolution
    channel.onCheck = (check) => {
      const resolution = decided.get(check.transaction_id) || 'TRANSACTION_RESOLUTION_UNKNOWN';
      channel.send({ end_transaction: endRequest(opts.group, check, resolution, true) });
      emit('other_check', { transaction_id: check.transaction_id, answered: resolution });
    };

    // 3. a prepared (half) message
    const first = prepared(opts.topic, 'node tx 1: committed by the producer', opts.group);
    const sent1 = (await client.call(store, 'SendMessage', first)).result;
    emit('send', sendFields(first, sent1));

    // 4. commit it
    decided.set(first.message.unique_id, 'TRANSACTION_RESOLUTION_COMMIT');
    const ended1 = await client.callRetrying(
      transaction,
      'EndTransaction',
      endRequest(opts.group, sent1, 'TRANSACTION_RESOLUTION_COMMIT', false),
      until,
    );
    emit('commit', {
      transaction_id: first.message.unique_id,
      committed_topic: ended1.committed ? ended1.committed.message.topic : null,
      committed_queue_offset: ended1.committed ? ended1.committed.queue_offset : null,
    });

    // 5. a second one, left UNKNOWN until the broker checks it
    const second = prepared(opts.topic, 'node tx 2: committed on check', opts.group);
    const txid2 = second.message.unique_id;
    const checked = channel.nextCheck(txid2, Math.max(1000, until - Date.now()));
    checked.catch(() => {}); // awaited below; no unhandled rejection meanwhile
    const sent2 = (await client.call(store, 'SendMessage', second)).result;
    emit('send_unknown', sendFields(second, sent2));
    await client.call(transaction, 'EndTransaction', endRequest(opts.group, sent2, 'TRANSACTION_RESOLUTION_UNKNOWN', false));
    emit('end_unknown', { transaction_id: txid2 });

    const check = await checked;
    emit('check', {
      transaction_id: check.transaction_id,
      commit_log_offset: check.commit_log_offset,
      tran_state_table_offset: check.tran_state_table_offset,
      store_id: check.store_id,
      body: check.message && check.message.message ? check.message.message.body.toString() : null,
    });
    decided.set(txid2, 'TRANSACTION_RESOLUTION_COMMIT');
    const answer = endRequest(opts.group, check, 'TRANSACTION_RESOLUTION_COMMIT', true);
    let committed2 = null;
    if (opts.answerVia === 'stream') {
      channel.send({ end_transaction: answer }); // one-way: a lost answer is asked again
    } else {
      committed2 = (await client.callRetrying(transaction, 'EndTransaction', answer, until)).committed;
    }
    emit('check_commit', {
      transaction_id: txid2,
      via: opts.answerVia,
      committed_queue_offset: committed2 ? committed2.queue_offset : null,
    });

    // 6. a typed error: send to a topic that does not exist
    const bad = {
      message: { topic: opts.missingTopic, body: Buffer.from('nowhere'), unique_id: newUniqueId() },
    };
    try {
      await client.call(store, 'SendMessage', bad);
      throw new Error(`send to the unknown topic ${opts.missingTopic} succeeded`);
    } catch (err) {
      if (!(err instanceof TxmqCallError)) throw err;
      emit('error', { topic: opts.missingTopic, ...err.detail });
    }

    emit('done', { transaction_ids: [first.message.unique_id, txid2] });
    if (opts.answerVia === 'stream') await sleep(200); // let the one-way answer leave
  } finally {
    if (channel) channel.close();
    client.close();
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    emit('fatal', { error: err.message, detail: err.detail || null });
    process.exit(1);
  },
);
