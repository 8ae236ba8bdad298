// Unix-socket server of the runner protocol: decodes frames, dispatches
// RunnerMethods to the capsule manager, encodes {id, ok, result|error}.
// Internal error details are logged to stderr, never sent with customer data.
import { chmodSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { DEFAULT_FRAME_LIMITS, encodeFrame, FrameDecoder } from '../shared/node/framing.js';
import { RunnerError, type RunnerHello } from '../shared/runner-protocol.js';
import type { CapsuleManager } from './capsule.js';

export interface ServerDeps {
  manager: CapsuleManager;
  hello: () => RunnerHello;
  maxBodyBytes: number;
}

type Handler = (params: Record<string, unknown>, body: Buffer) => Promise<{ result: unknown; body?: Buffer }>;

function handlers(d: ServerDeps): Record<string, Handler> {
  const m = d.manager;
  return {
    hello: async () => ({ result: d.hello() }),
    create: async (p) => ({ result: await m.create(p as never) }),
    exec: async (p) => ({ result: await m.exec(p as never) }),
    upload: async (p, body) => ({ result: await m.upload(p as never, body) }),
    usage: async (p) => ({ result: m.usage(p as never) }),
    list_output: async (p) => ({ result: m.listOutput(p as never) }),
    read_output: async (p) => {
      const r = m.readOutput(p as never);
      return { result: r.entry, body: r.bytes };
    },
    destroy: async (p) => ({ result: await m.destroy(p as never) }),
    list: async () => ({ result: { capsules: m.ids() } }),
  };
}

export function startServer(socketPath: string, d: ServerDeps): Promise<Server> {
  const table = handlers(d);
  const limits = { ...DEFAULT_FRAME_LIMITS, maxBodyBytes: d.maxBodyBytes };
  const server = createServer((sock: Socket) => {
    const decoder = new FrameDecoder(limits);
    const send = (header: Record<string, unknown>, body: Buffer | null = null): void => {
      if (sock.destroyed) return;
      try {
        sock.write(encodeFrame(header, body, limits));
      } catch (e) {
        sock.write(
          encodeFrame(
            { id: header['id'] ?? null, ok: false, error: { code: 'too_large', message: (e as Error).message } },
            null,
            limits,
          ),
        );
      }
    };
    sock.on('data', (chunk: Buffer) => {
      for (const ev of decoder.push(chunk)) {
        if (ev.kind === 'error') {
          const hid = ev.error.header?.['id'];
          const code = ev.error.kind === 'too_large' ? 'too_large' : 'invalid';
          send({
            id: typeof hid === 'number' ? hid : null,
            ok: false,
            error: { code, message: `body: ${ev.error.message}` },
          });
          if (ev.error.fatal) sock.end();
          continue;
        }
        const { header, body } = ev.frame;
        const id = typeof header['id'] === 'number' ? header['id'] : null;
        const method = header['method'];
        const params = header['params'];
        const h = typeof method === 'string' && Object.hasOwn(table, method) ? table[method] : undefined;
        if (!h) {
          send({
            id,
            ok: false,
            error: { code: 'invalid', message: `method: unknown ${JSON.stringify(String(method)).slice(0, 64)}` },
          });
          continue;
        }
        if (typeof params !== 'object' || params === null || Array.isArray(params)) {
          send({ id, ok: false, error: { code: 'invalid', message: 'params: must be an object' } });
          continue;
        }
        h(params as Record<string, unknown>, body).then(
          (r) => send({ id, ok: true, result: r.result }, r.body ?? null),
          (e: unknown) => {
            if (e instanceof RunnerError) {
              send({ id, ok: false, error: { code: e.code, message: e.message } });
            } else {
              process.stderr.write(`runner: internal error in ${method}: ${(e as Error)?.stack ?? String(e)}\n`);
              send({ id, ok: false, error: { code: 'internal', message: `${method}: internal error` } });
            }
          },
        );
      }
    });
    sock.on('error', () => sock.destroy());
  });
  rmSync(socketPath, { force: true });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    // Create the socket 0600 from the start (umask), then make sure.
    const old = process.umask(0o177);
    server.listen(socketPath, () => {
      process.umask(old);
      chmodSync(socketPath, 0o600);
      resolve(server);
    });
  });
}
