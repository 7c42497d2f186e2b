#!/usr/bin/env node
// A SimpleConsumer with the official RocketMQ 5 Node.js client: subscribes --group to
// --topic with the tag expression --filter, then receive(--batch, --invisible-ms) and
// ack every message until --until-acked messages are acked (or --deadline-s passes);
// then, with --drain-s, keeps receiving (and acking) that long to show that nothing
// else arrives.
// Prints: receiving (once started), received (per non-empty receive: started_ms,
// ended_ms, drain, messages), acked / error per ack, stopped (why), done.
'use strict';

const { SimpleConsumer } = require('rocketmq-client-nodejs');
const c = require('./_common');

const USAGE = `usage: node consumer.js --endpoint HOST:PORT --topic TOPIC --group GROUP [options]
  --topic TOPIC          an existing topic
  --group GROUP          consumer group
  --filter EXPR          tag expression (default *)
  --until-acked N        stop after N acks (default 1)
  --batch N              max messages per receive (default 16)
  --invisible-ms N       invisible duration of received messages (default 20000)
  --await-ms N           long-polling time of a receive (default 3000)
  --deadline-s N         give up after N seconds (default 40)
  --drain-s N            then keep receiving N seconds (default 0)
${c.COMMON_USAGE}`;

async function main() {
  const args = c.parse(USAGE, {
    topic: { type: 'string' },
    group: { type: 'string' },
    filter: { type: 'string', default: '*' },
    'until-acked': { type: 'string', default: '1' },
    batch: { type: 'string', default: '16' },
    'invisible-ms': { type: 'string', default: '20000' },
    'await-ms': { type: 'string', default: '3000' },
    'deadline-s': { type: 'string', default: '40' },
    'drain-s': { type: 'string', default: '0' },
  });
  if (!args.topic || !args.group) throw new Error('--topic and --group are required');
  const log = new c.ClientLog(args.verbose);
  const consumer = new SimpleConsumer({
    ...c.clientOptions(args, log),
    consumerGroup: args.group,
    subscriptions: new Map([ [ args.topic, args.filter ] ]),
    awaitDuration: Number(args['await-ms']),
  });

  const started = await c.reported('startup', log, {}, async () => {
    await consumer.startup();
    return true;
  });
  if (!started) return;
  c.emit('receiving', { client_id: consumer.clientId, topic: args.topic, group: args.group });

  const untilAcked = Number(args['until-acked']);
  const batch = Number(args.batch);
  const invisibleMs = Number(args['invisible-ms']);
  const deadline = Date.now() + Number(args['deadline-s']) * 1000;
  let acked = 0;
  let errors = 0;

  async function receiveOnce(drain) {
    const startedMs = Date.now();
    const views = await c.reported('receive', log, { drain }, () => consumer.receive(batch, invisibleMs));
    if (!views) {
      errors++;
      await c.sleep(200); // do not spin on a failing receive
      return;
    }
    if (!views.length) return;
    c.emit('received', {
      started_ms: startedMs,
      ended_ms: Date.now(),
      drain,
      messages: views.map(c.messageFields),
    });
    for (const view of views) {
      const ok = await c.reported('ack', log, { message_id: view.messageId, drain }, async () => {
        await consumer.ack(view);
        return true;
      });
      if (ok) {
        acked++;
        c.emit('acked', { message_id: view.messageId, delivery_attempt: view.deliveryAttempt ?? null, drain });
      }
    }
  }

  let why = 'deadline';
  while (Date.now() < deadline) {
    if (acked >= untilAcked) {
      why = 'until_acked';
      break;
    }
    await receiveOnce(false);
  }
  if (acked >= untilAcked) why = 'until_acked';
  const drainUntil = Date.now() + Number(args['drain-s']) * 1000;
  while (Date.now() < drainUntil) {
    await receiveOnce(true);
  }
  c.emit('stopped', { why, acked, receive_errors: errors });
  await c.reported('shutdown', log, {}, () => consumer.shutdown());
  c.emit('done', { acked });
}

c.run(main);
