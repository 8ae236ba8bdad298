// Worker thread of the JSON-lines batch verifier: parses and verifies the chunks of lines it is sent, in order.
import { parentPort, workerData } from 'node:worker_threads';
import { createNodeCrypto } from '../shared/node/crypto-node.js';
import type { TrustManifest } from '../shared/proof/index.js';
import { verifyLine, type LineOutcome } from './verify-input.js';

interface Chunk {
  lines: string[];
  labels: string[];
}

const settings = {
  crypto: createNodeCrypto({ cacheKeys: Boolean((workerData as { cacheKeys?: boolean }).cacheKeys) }),
  ...((workerData as { manifest?: TrustManifest }).manifest
    ? { manifest: (workerData as { manifest: TrustManifest }).manifest }
    : {}),
};

parentPort!.on('message', (chunk: Chunk) => {
  const outcomes: LineOutcome[] = chunk.lines.map((line, i) => verifyLine(line, chunk.labels[i]!, settings));
  parentPort!.postMessage(outcomes);
});
