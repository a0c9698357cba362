// MQTT.js, the npm package mqtt, as a browser page would use it: MQTT 5.0 over a WebSocket.
// Usage: node script.mjs URL FILTER COUNT [CAFILE]
// Subscribes to FILTER at QoS 1, says {"subscribed": [...]}, publishes a retained message to
// js/hello, prints each message it gets as one JSON line and exits 0 after COUNT of them.
import { readFileSync } from "node:fs";
import mqtt from "mqtt";

const [url, filter, count, ca] = process.argv.slice(2);
const options = { protocolVersion: 5, clientId: `mqttjs-${process.pid}`, reconnectPeriod: 0 };
if (ca) options.ca = readFileSync(ca);
const client = mqtt.connect(url, options);
let left = Number(count);

client.on("message", (topic, payload, packet) => {
  const { qos, retain } = packet;
  console.log(JSON.stringify({ topic, payload: payload.toString(), qos, retain }));
  left -= 1;
  if (left === 0) client.end(false, {}, () => process.exit(0));
});
client.on("error", (error) => {
  console.error(`mqtt.js: ${error.message}`);
  process.exit(1);
});
client.on("connect", () => {
  client.subscribe(filter, { qos: 1 }, (error, granted) => {
    if (error) {
      console.error(`mqtt.js: subscribe: ${error.message}`);
      process.exit(1);
    }
    console.log(JSON.stringify({ subscribed: granted.map((g) => g.qos) }));
    client.publish("js/hello", "from mqtt.js", { qos: 1, retain: true });
  });
});
setTimeout(() => {
  console.error("mqtt.js: timed out");
  process.exit(2);
}, 20000);
