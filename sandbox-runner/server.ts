// Unix-socket server of the runner protocol: decodes frames, dispatches
// RunnerMethods to the capsule manager, encodes {id, ok, result|error}.
// Internal error details are logged to stderr, never sent with customer data.
import { chmodSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { DEFAULT_FRAME_LIMITS, encodeFrame, FrameDecoder } from '../shared/node/framing.js';
import {
  describeIssue,
  RUNNER_REQUEST_SCHEMAS,
  RunnerError,
  type RunnerHello,
  type RunnerMethods,
} from '../shared/runner-protocol.js';
import type { CapsuleManager } from './capsule.js';

export interface ServerDeps {
  manager: CapsuleManager;
  hello: () => RunnerHello;
  maxBodyBytes: number;
}

type Result = { result: unknown; body?: Buffer };
type Handlers = { [K in keyof RunnerMethods]: (params: RunnerMethods[K][0], body: Buffer) => Promise<Result> };

function handlers(d: ServerDeps): Handlers {
  const m = d.manager;
  return {
    hello: async () => ({ result: d.hello() }),
    create: async (p) => ({ result: await m.create(p) }),
    exec: async (p) => ({ result: await m.exec(p) }),
    upload: async (p, body) => ({ result: await m.upload(p, body) }),
    usage: async (p) => ({ result: m.usage(p) }),
    list_output: async (p) => ({ result: await m.listOutput(p) }),
    read_output: async (p) => {
      const r = await m.readOutput(p);
      return { result: r.entry, body: r.bytes };
    },
    destroy: async (p) => ({ result: await m.destroy(p) }),
    list: async () => ({ result: { capsules: m.ids() } }),
  };
}

/** Parses params with the method's schema, then calls its handler (the two typed together). */
function dispatch<K extends keyof RunnerMethods>(
  table: Handlers,
  method: K,
  params: unknown,
  body: Buffer,
): Promise<Result> {
  const parsed = RUNNER_REQUEST_SCHEMAS[method].safeParse(params);
  if (!parsed.success) return Promise.reject(new RunnerError('invalid', describeIssue(parsed.error)));
  return table[method](parsed.data, body);
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
        const known = typeof method === 'string' && Object.hasOwn(table, method);
        if (!known) {
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
        if (ev.frame.badTextField !== undefined) {
          // Names (filename) and commands are bytes on disk and in argv: refused, never repaired with U+FFFD.
          const field = ev.frame.badTextField.replace(/^params\./, '');
          send({ id, ok: false, error: { code: 'invalid', message: `${field}: must be valid UTF-8` } });
          continue;
        }
        dispatch(table, method as keyof RunnerMethods, params, body).then(
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
