// Worker thread of the verify pool: parses one POST /v1/verify body and
// verifies it, so a large AuditRecord never blocks the request thread.
import { parentPort } from 'node:worker_threads';
import { ApiError } from '../../shared/errors.js';
import { createNodeCrypto } from '../../shared/node/crypto-node.js';
import { parseJsonObject } from '../domain/index.js';
import { verifyHostedRequest } from './hosted-verify.js';

export interface VerifyJob {
  id: number;
  bytes: Uint8Array;
  now: string;
}

export type VerifyReply =
  | { id: number; result: unknown }
  | { id: number; error: { code: ApiError['code']; message: string; extra: Record<string, unknown> } }
  | { id: number; crash: string };

const crypto = createNodeCrypto({ cacheKeys: true });
const decoder = new TextDecoder();

parentPort!.on('message', (job: VerifyJob) => {
  let reply: VerifyReply;
  try {
    const body = parseJsonObject(decoder.decode(job.bytes));
    reply = { id: job.id, result: verifyHostedRequest(body, () => job.now, crypto) };
  } catch (e) {
    reply =
      e instanceof ApiError
        ? { id: job.id, error: { code: e.code, message: e.message, extra: { ...e.extra } } }
        : { id: job.id, crash: e instanceof Error ? e.message : String(e) };
  }
  parentPort!.postMessage(reply);
});
