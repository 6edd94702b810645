// An OTLP/HTTP endpoint for the traces scenario, in a process of its own so its CPU is not the
// engine's: takes every POST, counts requests and bytes, answers 200. Prints its port, then on
// stdin's end prints the counts as JSON and exits.
import { createServer } from 'node:http';
import process from 'node:process';

let requests = 0;
let bytes = 0;
const server = createServer((request, response) => {
  request.on('data', (chunk) => (bytes += chunk.length));
  request.on('end', () => {
    requests += 1;
    response.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
  });
});
server.listen(0, '127.0.0.1', () => process.stdout.write(`${server.address().port}\n`));
process.stdin.resume();
process.stdin.on('end', () => {
  process.stdout.write(`${JSON.stringify({ requests, bytes })}\n`);
  process.exit(0);
});
