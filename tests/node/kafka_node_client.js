// kafka-node 5 (which picks the broker's highest version capped at its own,
// never looking at the broker's lowest): Produce v2 (message format v1),
// ListOffsets v0, classic group v0-1, Fetch v2, OffsetCommit v2,
// OffsetFetch v1.
//
//   node kafka_node_client.js BOOTSTRAP TOPIC ATTRIBUTES COUNT
//
// Produces COUNT keyed messages (ATTRIBUTES: 0 none, 1 gzip), reads the
// latest offset, consumes them in group "node-TOPIC", commits, reads the
// commit back and prints one JSON line.
'use strict';
const kafka = require('kafka-node');

const [bootstrap, topic, attributes, countText] = process.argv.slice(2);
const count = parseInt(countText, 10);
const group = 'node-' + topic;
const client = new kafka.KafkaClient({kafkaHost: bootstrap, requestTimeout: 10000});
const producer = new kafka.Producer(client, {partitionerType: 0});
const out = {};

function fail (e) {
  console.error('ERROR', e && (e.stack || e));
  process.exit(2);
}

function consume (offset) {
  const consumer = new kafka.ConsumerGroup(
    {kafkaHost: bootstrap, groupId: group, fromOffset: 'earliest', autoCommit: false, protocol: ['roundrobin']},
    [topic]
  );
  const got = [];
  consumer.on('error', fail);
  consumer.on('message', (m) => {
    got.push([m.offset, m.key, m.value]);
    if (got.length !== count) return;
    // After kafka-node has taken the fetch's offsets in.
    setTimeout(() => consumer.commit(true, (err) => {
      if (err) fail(err);
      out.received = got;
      offset.fetchCommits(group, [{topic, partition: 0}], (err, commits) => {
        if (err) fail(err);
        out.committed = commits[topic][0];
        console.log(JSON.stringify(out));
        consumer.close(true, () => producer.close(() => client.close(() => process.exit(0))));
      });
    }), 200);
  });
}

producer.on('error', fail);
producer.on('ready', () => {
  const messages = [];
  for (let i = 0; i < count; i++) messages.push(new kafka.KeyedMessage('k' + i, 'v' + i));
  producer.send([{topic, partition: 0, messages, attributes: parseInt(attributes, 10)}], (err, result) => {
    if (err) fail(err);
    out.baseOffset = result[topic]['0'];
    const offset = new kafka.Offset(client);
    offset.fetchLatestOffsets([topic], (err, latest) => {
      if (err) fail(err);
      out.latest = latest[topic][0];
      consume(offset);
    });
  });
});
setTimeout(() => fail('timed out: ' + JSON.stringify(out)), 60000);
