// RunnerPort over the runner's Unix socket, or over TCP with mutual TLS (a
// runner on another machine: the client presents the control plane's
// certificate and accepts only a runner certificate from the operator's CA).
// Requests are multiplexed by id on one connection; a response frame is
// {id, ok, result | error}. No reconnect:
// once the connection is gone every pending and later call fails with
// RunnerError('unavailable').
import { createConnection, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import {
  RunnerError,
  type CreateCapsuleRequest,
  type CreatedCapsule,
  type DestroyResult,
  type ExecRequest,
  type ExecResult,
  type ExecResultHeader,
  type FileEntry,
  type ListedFile,
  type RunnerErrorCode,
  type CapsuleUsage,
  type RunnerHello,
  type RunnerMethods,
  type RunnerPort,
} from '../runner-protocol.js';
import { DEFAULT_FRAME_LIMITS, encodeFrameParts, FrameDecoder, writeFrame, type FrameLimits } from './framing.js';
import { requestTrace } from './trace.js';

const ERROR_CODES: ReadonlySet<string> = new Set<RunnerErrorCode>([
  'not_found',
  'invalid',
  'too_large',
  'busy',
  'no_space',
  'unavailable',
  'capacity',
  'internal',
]);

/** A runner reached over TCP with mutual TLS: its address and this client's PEM material. */
export interface RunnerTlsTarget {
  host: string;
  port: number;
  /** The operator's CA: the runner's certificate must chain to it and name `host` (or `servername`). */
  ca: string;
  /** The name the certificate must carry when `host` is an address found through it (DNS discovery). */
  servername?: string;
  cert: string;
  key: string;
}

interface Pending {
  resolve: (v: { result: unknown; body: Buffer }) => void;
  reject: (e: RunnerError) => void;
}

export class RunnerClient implements RunnerPort {
  private socket: Socket | null = null;
  private connecting: Promise<Socket> | null = null;
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private closed = false;

  constructor(
    /** A Unix socket path, or a mutual-TLS address. */
    private readonly target: string | RunnerTlsTarget,
    private readonly limits: FrameLimits = DEFAULT_FRAME_LIMITS,
  ) {}

  hello(): Promise<RunnerHello> {
    return this.call('hello', {});
  }
  create(req: CreateCapsuleRequest): Promise<CreatedCapsule> {
    return this.call('create', req);
  }
  async exec(req: ExecRequest): Promise<ExecResult> {
    const { result, body } = await this.raw('exec', { ...req, output_in_body: true }, null);
    const r = result as ExecResult | ExecResultHeader;
    if (!('stdout_bytes' in r)) return r; // a runner that predates the output-in-body form
    const { stdout_bytes: n, stderr_bytes: m, ...rest } = r;
    if (!Number.isInteger(n) || !Number.isInteger(m) || n < 0 || m < 0 || n + m !== body.length)
      throw new RunnerError('internal', `exec: output lengths ${n} + ${m} do not match a body of ${body.length} bytes`);
    return { ...rest, stdout: body.toString('utf8', 0, n), stderr: body.toString('utf8', n, n + m) };
  }
  upload(capsuleId: string, filename: string, bytes: Uint8Array): Promise<FileEntry> {
    return this.call('upload', { capsule_id: capsuleId, filename }, bytes);
  }
  async listOutput(capsuleId: string): Promise<ListedFile[]> {
    return (await this.call('list_output', { capsule_id: capsuleId })).files;
  }
  async readOutput(capsuleId: string, filename: string): Promise<{ entry: FileEntry; bytes: Uint8Array }> {
    const { result, body } = await this.raw('read_output', { capsule_id: capsuleId, filename }, null);
    return { entry: result as FileEntry, bytes: new Uint8Array(body.buffer, body.byteOffset, body.byteLength) };
  }
  destroy(capsuleId: string): Promise<DestroyResult> {
    return this.call('destroy', { capsule_id: capsuleId });
  }
  async list(): Promise<string[]> {
    return (await this.call('list', {})).capsules;
  }
  usage(capsuleId: string): Promise<CapsuleUsage> {
    return this.call('usage', { capsule_id: capsuleId });
  }

  async close(): Promise<void> {
    this.closed = true;
    const s = this.socket;
    this.socket = null;
    this.failAll(new RunnerError('unavailable', 'runner client closed'));
    if (s && !s.destroyed) {
      await new Promise<void>((resolve) => {
        s.once('close', () => resolve());
        s.end();
        setTimeout(() => {
          s.destroy();
          resolve();
        }, 500).unref();
      });
    }
  }

  private async call<M extends keyof RunnerMethods>(
    method: M,
    params: RunnerMethods[M][0],
    body: Uint8Array | null = null,
  ): Promise<RunnerMethods[M][1]> {
    const { result } = await this.raw(method, params, body);
    return result as RunnerMethods[M][1];
  }

  private async raw(
    method: string,
    params: unknown,
    body: Uint8Array | null,
  ): Promise<{ result: unknown; body: Buffer }> {
    if (this.closed) throw new RunnerError('unavailable', 'runner client closed');
    const socket = await this.connect();
    const id = this.nextId++;
    let frame: Uint8Array[];
    try {
      const trace = requestTrace.getStore();
      frame = encodeFrameParts(
        { id, method, params: params as Record<string, unknown>, ...(trace ? { trace } : {}) },
        body,
        this.limits,
      );
    } catch (e) {
      throw new RunnerError('too_large', (e as Error).message);
    }
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      writeFrame(socket, frame);
    });
  }

  private connect(): Promise<Socket> {
    if (this.socket) return Promise.resolve(this.socket);
    if (this.connecting) return this.connecting;
    this.connecting = new Promise<Socket>((resolve, reject) => {
      const t = this.target;
      const s =
        typeof t === 'string'
          ? createConnection(t)
          : tlsConnect({
              host: t.host,
              port: t.port,
              // Discovered by DNS: dial the address, check the certificate names the discovered name.
              ...(t.servername ? { servername: t.servername } : {}),
              ca: t.ca,
              ...(t.cert && t.key ? { cert: t.cert, key: t.key } : {}),
              minVersion: 'TLSv1.3',
            });
      const decoder = new FrameDecoder(this.limits);
      s.once(typeof t === 'string' ? 'connect' : 'secureConnect', () => {
        this.socket = s;
        this.connecting = null;
        resolve(s);
      });
      s.on('data', (chunk: Buffer) => {
        for (const ev of decoder.push(chunk)) {
          if (ev.kind === 'error') {
            if (ev.error.fatal) {
              this.failAll(new RunnerError('internal', `runner sent a bad frame: ${ev.error.message}`));
              s.destroy();
            }
            continue;
          }
          this.onResponse(ev.frame.header, ev.frame.body);
        }
      });
      s.on('error', (err) => {
        if (this.connecting) {
          this.connecting = null;
          const where = typeof this.target === 'string' ? this.target : `${this.target.host}:${this.target.port}`;
          reject(new RunnerError('unavailable', `cannot reach runner at ${where}: ${err.message}`));
        }
      });
      s.on('close', () => {
        if (this.socket === s) this.socket = null;
        this.closed = true;
        this.failAll(new RunnerError('unavailable', 'runner connection closed'));
      });
    });
    return this.connecting;
  }

  private onResponse(header: Record<string, unknown>, body: Buffer): void {
    const id = header['id'];
    if (typeof id !== 'number') return;
    const p = this.pending.get(id);
    if (!p) return;
    this.pending.delete(id);
    if (header['ok'] === true) {
      p.resolve({ result: header['result'], body });
      return;
    }
    const err = header['error'] as { code?: unknown; message?: unknown } | undefined;
    const code =
      typeof err?.code === 'string' && ERROR_CODES.has(err.code) ? (err.code as RunnerErrorCode) : 'internal';
    const message = typeof err?.message === 'string' ? err.message : 'runner error';
    p.reject(new RunnerError(code, message));
  }

  private failAll(e: RunnerError): void {
    const all = [...this.pending.values()];
    this.pending.clear();
    for (const p of all) p.reject(e);
  }
}
