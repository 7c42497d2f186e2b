#!/usr/bin/env node
// Transactional messages with the official RocketMQ 5 Node.js client: a Producer with a
// TransactionChecker; per entry of --actions one transaction (beginTransaction,
// send(message, transaction)), then:
//   commit    transaction.commit()
//   rollback  transaction.rollback()
//   check     nothing: the transaction is left open and the script waits (up to
//             --check-wait-s) until the broker asks the TransactionChecker about it; the
//             checker answers COMMIT, and the client ends it (SOURCE_SERVER_CHECK).
// Message i has body "tx-<i>-<action>", --tag, keys "<prefix>-<i>" and "<prefix>-all" and
// the user property action=<action>.
// Prints: started, sent (action, message_id, transaction_id), committed / rolled_back /
// left_open, check (per check the checker got: the checked message and the answer),
// check_ended (the client logged the end of a checked transaction), done.
'use strict';

const { Producer } = require('rocketmq-client-nodejs');
// The client's index does not export the v2 enums; its generated protobuf module does.
const { TransactionResolution } = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');
const c = require('./_common');

const USAGE = `usage: node transactional.js --endpoint HOST:PORT --topic TOPIC [options]
  --topic TOPIC          an existing topic
  --actions LIST         comma-separated commit|rollback|check (default commit,rollback)
  --tag TAG              message tag (default: none)
  --key-prefix P         keys P-<i> and P-all (default: tk-<pid>)
  --check-wait-s N       how long to wait for the checks of "check" entries (default 20)
${c.COMMON_USAGE}`;

const ACTIONS = new Set([ 'commit', 'rollback', 'check' ]);

async function main() {
  const args = c.parse(USAGE, {
    topic: { type: 'string' },
    actions: { type: 'string', default: 'commit,rollback' },
    tag: { type: 'string', default: '' },
    'key-prefix': { type: 'string', default: `tk-${process.pid}` },
    'check-wait-s': { type: 'string', default: '20' },
  });
  if (!args.topic) throw new Error('--topic is required');
  const actions = args.actions.split(',').map(a => a.trim()).filter(Boolean);
  for (const a of actions) {
    if (!ACTIONS.has(a)) throw new Error(`unknown action ${a}`);
  }
  const log = new c.ClientLog(args.verbose);

  // What this producer decided (or will decide) per message id: a check is answered with
  // it, so a check arriving early for a committed/rolled-back one still gets the truth.
  const intended = new Map();
  const checked = new Set();
  const checker = {
    async check(view) {
      const action = intended.get(view.messageId);
      const answer = action === 'rollback' ? 'ROLLBACK' : 'COMMIT';
      c.emit('check', { action: action ?? null, answer, message: c.messageFields(view) });
      checked.add(view.messageId);
      return answer === 'ROLLBACK' ? TransactionResolution.ROLLBACK : TransactionResolution.COMMIT;
    },
  };
  const producer = new Producer({ ...c.clientOptions(args, log), topics: [ args.topic ], checker });

  const started = await c.reported('startup', log, {}, async () => {
    await producer.startup();
    return true;
  });
  if (!started) return;
  c.emit('started', { client_id: producer.clientId, topic: args.topic });

  const open = [];
  for (const [ i, action ] of actions.entries()) {
    const transaction = producer.beginTransaction();
    const message = {
      topic: args.topic,
      body: Buffer.from(`tx-${i}-${action}`),
      keys: [ `${args['key-prefix']}-${i}`, `${args['key-prefix']}-all` ],
      properties: new Map([ [ 'action', action ] ]),
    };
    if (args.tag) message.tag = args.tag;
    // The message id is made by the client before the send; record the intent as soon as
    // the receipt names it (a check cannot come before the half message is stored).
    const receipt = await c.reported('send', log, { index: i, action }, () => producer.send(message, transaction));
    if (!receipt) continue;
    intended.set(receipt.messageId, action);
    c.emit('sent', {
      index: i,
      action,
      message_id: receipt.messageId,
      transaction_id: receipt.transactionId,
      offset: receipt.offset,
    });
    const context = { index: i, action, message_id: receipt.messageId };
    if (action === 'commit') {
      if (await c.reported('commit', log, context, async () => { await transaction.commit(); return true; })) {
        c.emit('committed', context);
      }
    } else if (action === 'rollback') {
      if (await c.reported('rollback', log, context, async () => { await transaction.rollback(); return true; })) {
        c.emit('rolled_back', context);
      }
    } else {
      c.emit('left_open', context);
      open.push(receipt.messageId);
    }
  }

  // Wait for the checks of the open transactions, and for the client to log the end of
  // each (Producer.onRecoverOrphanedTransactionCommand logs success or the exception).
  if (open.length) {
    const deadline = Date.now() + Number(args['check-wait-s']) * 1000;
    const ended = new Set();
    while (ended.size < open.length && Date.now() < deadline) {
      for (const id of open) {
        if (ended.has(id) || !checked.has(id)) continue;
        const line = log.lines.find(l => l.includes(id) &&
          (l.includes('Recover orphaned transaction message success') ||
           l.includes('Exception raised while checking the transaction')));
        if (line) {
          ended.add(id);
          c.emit('check_ended', { message_id: id, ok: line.includes('success'), log: line });
        }
      }
      await c.sleep(50);
    }
    for (const id of open) {
      if (!ended.has(id)) {
        c.emit('error', {
          op: 'check', message_id: id, type: 'Timeout', code: null,
          message: checked.has(id) ? 'checked, but the end of the transaction was not logged in time'
            : 'no check arrived in time',
          client_log: log.lines.filter(l => !l.startsWith('[INFO]')).slice(-10),
        });
      }
    }
  }

  await c.reported('shutdown', log, {}, () => producer.shutdown());
  c.emit('done', { sent: intended.size });
}

c.run(main);
