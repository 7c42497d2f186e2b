#!/usr/bin/env node
// A PushConsumer with the official RocketMQ 5 Node.js client: subscribes --group to
// --topic (tag expression --filter); its MessageListener returns SUCCESS for every
// message. Runs until --until-consumed messages were consumed, or until consumed plus
// discarded reach it, or --deadline-s passes.
//
// "Discarded": the client drops a message before the listener sees it when the message
// fails its body-digest check (StandardConsumeService: "Message corrupted, discarding").
// That is logged through the client's default logger, which a caller cannot replace for
// the consume service, so the script reads it back from
// $HOME/logs/rocketmq/rocketmq_client_nodejs.log (set HOME to isolate it).
// Prints: started, consumed (per message the listener got), discarded (per message id the
// client logged as discarded), stopped (why, counts), done.
'use strict';

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { PushConsumer, ConsumeResult } = require('rocketmq-client-nodejs');
const c = require('./_common');

const USAGE = `usage: node push_consumer.js --endpoint HOST:PORT --topic TOPIC --group GROUP [options]
  --topic TOPIC          an existing topic
  --group GROUP          consumer group
  --filter EXPR          tag expression (default *)
  --until-consumed N     stop once N messages were consumed or discarded (default 1)
  --deadline-s N         give up after N seconds (default 20)
  --shutdown-wait-s N    wait at most N seconds for shutdown, then exit (default 3)
${c.COMMON_USAGE}`;

const DEFAULT_LOG = path.join(os.homedir(), 'logs/rocketmq/rocketmq_client_nodejs.log');
const DISCARDED = /Message corrupted, discarding, messageId=(\S+)/;

function discardedIds(fromByte) {
  let text = '';
  try {
    text = fs.readFileSync(DEFAULT_LOG, 'utf8').slice(fromByte);
  } catch {
    return [];
  }
  const ids = [];
  for (const line of text.split('\n')) {
    const m = DISCARDED.exec(line);
    if (m) ids.push(m[1]);
  }
  return ids;
}

async function main() {
  const args = c.parse(USAGE, {
    topic: { type: 'string' },
    group: { type: 'string' },
    filter: { type: 'string', default: '*' },
    'until-consumed': { type: 'string', default: '1' },
    'deadline-s': { type: 'string', default: '20' },
    'shutdown-wait-s': { type: 'string', default: '3' },
  });
  if (!args.topic || !args.group) throw new Error('--topic and --group are required');
  const log = new c.ClientLog(args.verbose);
  let logStart = 0;
  try {
    logStart = fs.statSync(DEFAULT_LOG).size;
  } catch {
    logStart = 0;
  }

  const consumed = [];
  const consumer = new PushConsumer({
    ...c.clientOptions(args, log),
    consumerGroup: args.group,
    subscriptions: new Map([ [ args.topic, args.filter ] ]),
    messageListener: {
      async consume(view) {
        consumed.push(view.messageId);
        c.emit('consumed', { message: c.messageFields(view) });
        return ConsumeResult.SUCCESS;
      },
    },
  });
  const started = await c.reported('startup', log, {}, async () => {
    await consumer.startup();
    return true;
  });
  if (!started) return;
  c.emit('started', { client_id: consumer.clientId, topic: args.topic, group: args.group, client_default_log: DEFAULT_LOG });

  const want = Number(args['until-consumed']);
  const deadline = Date.now() + Number(args['deadline-s']) * 1000;
  const reported = new Set();
  let why = 'deadline';
  while (Date.now() < deadline) {
    for (const id of discardedIds(logStart)) {
      if (!reported.has(id)) {
        reported.add(id);
        c.emit('discarded', { message_id: id });
      }
    }
    const distinct = new Set([ ...consumed, ...reported ]);
    if (new Set(consumed).size >= want) {
      why = 'until_consumed';
      break;
    }
    if (distinct.size >= want) {
      why = 'consumed_or_discarded';
      break;
    }
    await c.sleep(100);
  }
  c.emit('stopped', { why, consumed: consumed.length, discarded: reported.size });
  // PushConsumer.shutdown waits for in-flight long-polling receives (the server's
  // long-polling timeout, up to 30 s): give it --shutdown-wait-s, then exit regardless.
  const shutdown = c.reported('shutdown', log, {}, async () => {
    await consumer.shutdown();
    return 'done';
  });
  const waited = await Promise.race([ shutdown, c.sleep(Number(args['shutdown-wait-s']) * 1000).then(() => 'timeout') ]);
  if (waited === 'timeout') c.emit('shutdown_abandoned', { after_s: Number(args['shutdown-wait-s']) });
  c.emit('done', { consumed: consumed.length, discarded: reported.size });
}

c.run(main);
