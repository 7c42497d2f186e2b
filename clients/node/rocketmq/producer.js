#!/usr/bin/env node
// Normal messages with the official RocketMQ 5 Node.js client: Producer.send of --count
// messages, each with --tag, keys "<prefix>-<i>" and "<prefix>-all", the --property
// NAME=VALUE user properties plus "index" = i, and body "<body-prefix>-<i>".
// Prints: started, sent (per message: index, message_id, offset, body), done.
'use strict';

const { Producer } = require('rocketmq-client-nodejs');
const c = require('./_common');

const USAGE = `usage: node producer.js --endpoint HOST:PORT --topic TOPIC [options]
  --topic TOPIC          an existing topic
  --count N              messages to send (default 1)
  --tag TAG              message tag (default: none)
  --key-prefix P         keys P-<i> and P-all (default: k-<pid>)
  --body-prefix B        body B-<i> (default: hello)
  --property NAME=VALUE  a user property (repeatable)
${c.COMMON_USAGE}`;

async function main() {
  const args = c.parse(USAGE, {
    topic: { type: 'string' },
    count: { type: 'string', default: '1' },
    tag: { type: 'string', default: '' },
    'key-prefix': { type: 'string', default: `k-${process.pid}` },
    'body-prefix': { type: 'string', default: 'hello' },
    property: { type: 'string', multiple: true, default: [] },
  });
  if (!args.topic) throw new Error('--topic is required');
  const log = new c.ClientLog(args.verbose);
  const properties = c.parseProperties(args.property);
  const producer = new Producer({ ...c.clientOptions(args, log), topics: [ args.topic ] });

  const started = await c.reported('startup', log, {}, async () => {
    await producer.startup();
    return true;
  });
  if (!started) return;
  c.emit('started', { client_id: producer.clientId, topic: args.topic });

  const count = Number(args.count);
  let sent = 0;
  for (let i = 0; i < count; i++) {
    const body = `${args['body-prefix']}-${i}`;
    const message = {
      topic: args.topic,
      body: Buffer.from(body),
      keys: [ `${args['key-prefix']}-${i}`, `${args['key-prefix']}-all` ],
      properties: new Map([ ...properties, [ 'index', String(i) ] ]),
    };
    if (args.tag) message.tag = args.tag;
    const receipt = await c.reported('send', log, { index: i }, () => producer.send(message));
    if (receipt) {
      sent++;
      c.emit('sent', {
        index: i,
        message_id: receipt.messageId,
        offset: receipt.offset,
        transaction_id: receipt.transactionId || null,
        body,
      });
    }
  }

  await c.reported('shutdown', log, {}, () => producer.shutdown());
  c.emit('done', { sent });
}

c.run(main);
