// Server of the runner protocol: decodes frames, dispatches RunnerMethods to
// the capsule manager, encodes {id, ok, result|error}. Served on a 0600 Unix
// socket (the local control plane) and, when configured, on TCP with mutual
// TLS only (control planes on other machines, each with a client certificate
// from the operator's CA). Internal error details are logged to stderr, never
// sent with customer data.
import { traceOf } from '../shared/node/trace.js';
import { chmodSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { createServer as createTlsServer, type Server as TlsServer } from 'node:tls';
import {
  DEFAULT_FRAME_LIMITS,
  encodeFrame,
  encodeFrameParts,
  FrameDecoder,
  writeFrame,
} from '../shared/node/framing.js';
import {
  describeIssue,
  RUNNER_REQUEST_SCHEMAS,
  RunnerError,
  type ExecResult,
  type ExecResultHeader,
  type RunnerHello,
  type RunnerMethods,
} from '../shared/runner-protocol.js';
import { fitJson } from './output-fit.js';
import type { CapsuleManager } from './capsule.js';
import type { ExecAnswer } from './exec.js';

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
    exec: async (p) => execAnswer(await m.exec(p), p.output_in_body === true),
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

/**
 * exec's answer: the output-in-body form (raw UTF-8, no escaping), or for a control plane that
 * predates it the plain form, whose streams are cut to what fits the frame header once
 * JSON-escaped (output-fit.ts) and flagged, so the result itself is never lost to its size.
 */
function execAnswer(r: ExecAnswer, inBody: boolean): Result {
  const { output, ...rest } = r;
  // The exec thread's buffer, moved here: a view of it, never a copy.
  const body = Buffer.from(output.bytes.buffer, output.bytes.byteOffset, output.bytes.byteLength);
  if (inBody) {
    const header: ExecResultHeader = {
      ...rest,
      stdout_bytes: output.stdout_bytes,
      stderr_bytes: body.length - output.stdout_bytes,
    };
    return { result: header, body };
  }
  const stdout = body.toString('utf8', 0, output.stdout_bytes);
  const stderr = body.toString('utf8', output.stdout_bytes);
  // A stream cut here loses its hash: it would not be of the text returned.
  const { stdout_sha512, stderr_sha512, ...plain } = rest;
  // Each stream gets half the frame header, less room for the other members.
  const room = Math.floor((DEFAULT_FRAME_LIMITS.maxHeaderBytes - 64 * 1024) / 2);
  const o = fitJson(stdout, room);
  const e = fitJson(stderr, room);
  return {
    result: {
      ...plain,
      stdout: o.text,
      stderr: e.text,
      stdout_truncated: r.stdout_truncated || o.cut,
      stderr_truncated: r.stderr_truncated || e.cut,
      ...(stdout_sha512 && !o.cut ? { stdout_sha512 } : {}),
      ...(stderr_sha512 && !e.cut ? { stderr_sha512 } : {}),
    } satisfies ExecResult,
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

/** One connection's frame loop (the same over the Unix socket and over TLS). */
function connectionHandler(d: ServerDeps): (sock: Socket) => void {
  const table = handlers(d);
  const limits = { ...DEFAULT_FRAME_LIMITS, maxBodyBytes: d.maxBodyBytes };
  return (sock: Socket) => {
    const decoder = new FrameDecoder(limits);
    const send = (header: Record<string, unknown>, body: Buffer | null = null): void => {
      if (sock.destroyed) return;
      try {
        writeFrame(sock, encodeFrameParts(header, body, limits));
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
        // The control plane's request and trace ids: echoed back, and named in the log line of a failure.
        const trace = traceOf(header['trace']);
        const t = trace ? { trace } : {};
        dispatch(table, method as keyof RunnerMethods, params, body).then(
          (r) => send({ id, ok: true, result: r.result, ...t }, r.body ?? null),
          (e: unknown) => {
            const code = e instanceof RunnerError ? e.code : 'internal';
            // One JSON line per failed request: method, code and ids only (messages may name customer files).
            process.stderr.write(
              `${JSON.stringify({ svc: 'runner', msg: 'request failed', method, code, ...trace })}\n`,
            );
            if (e instanceof RunnerError) {
              send({ id, ok: false, error: { code: e.code, message: e.message }, ...t });
            } else {
              process.stderr.write(`runner: internal error in ${method}: ${(e as Error)?.stack ?? String(e)}\n`);
              send({ id, ok: false, error: { code: 'internal', message: `${method}: internal error` }, ...t });
            }
          },
        );
      }
    });
    sock.on('error', () => sock.destroy());
  };
}

export function startServer(socketPath: string, d: ServerDeps): Promise<Server> {
  const server = createServer(connectionHandler(d));
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

/** PEM material of the TLS listener: the operator's CA (clients must chain to it), this runner's certificate and key. */
export interface TlsMaterial {
  ca: string;
  cert: string;
  key: string;
}

/**
 * The TCP listener: TLS 1.3 only, a client certificate issued by the
 * operator's CA required (no plaintext, no anonymous clients).
 */
export function startTlsServer(host: string, port: number, tls: TlsMaterial, d: ServerDeps): Promise<TlsServer> {
  const handle = connectionHandler(d);
  const server = createTlsServer(
    {
      ca: tls.ca,
      cert: tls.cert,
      key: tls.key,
      requestCert: true,
      rejectUnauthorized: true,
      minVersion: 'TLSv1.3',
    },
    (sock) => handle(sock),
  );
  // A failed handshake (wrong CA, no certificate) closes that socket only.
  server.on('tlsClientError', (_e, sock) => sock.destroy());
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve(server));
  });
}
