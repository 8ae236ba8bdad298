// One proxied request/response: MCP inspection of the (bounded) request body,
// forwarding to exactly the checked address, streaming the response back
// while hashing it, and the activity events for it.
import { createHash, type Hash } from 'node:crypto';
import {
  request as httpRequest,
  type ClientRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type OutgoingHttpHeaders,
  type ServerResponse,
} from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { TLSSocket } from 'node:tls';
import type { EgressOutcome, TlsMetadata } from './events.js';
import type { Runtime, Target } from './runtime.js';
import { asSha512 } from './hashing.js';
import { denialBody, inspectBody, toolAllowed, type Inspection } from './mcp-policy.js';
import { mcpResult } from './mcp-result.js';
import type { BudgetHold } from './budget.js';
import { refuse } from './refusals.js';
import { SegmentedStream, type Segment } from './segments.js';
import { exchangeEvents, segmentEvent, type ExchangeRecord } from './exchange-events.js';
import { StreamChunker } from './sse.js';
import { classifyUpstreamError, tlsMetadata } from './upstream.js';

const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authorization',
  'proxy-authenticate',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'host',
  // The proxy already holds (or streams) the body; the upstream's 100-continue is not awaited.
  'expect',
]);

function endToEnd(headers: IncomingHttpHeaders): OutgoingHttpHeaders {
  const named = new Set(
    String(headers.connection ?? '')
      .toLowerCase()
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean),
  );
  const out: OutgoingHttpHeaders = {};
  for (const [k, v] of Object.entries(headers)) {
    if (v === undefined || HOP_BY_HOP.has(k) || named.has(k)) continue;
    out[k] = v;
  }
  return out;
}

const one = (v: string | string[] | undefined): string | undefined => (Array.isArray(v) ? v.join(', ') : v);

export function hostHeader(t: Target): string {
  const h = t.host.includes(':') ? `[${t.host}]` : t.host;
  return t.port === (t.scheme === 'https' ? 443 : 80) ? h : `${h}:${t.port}`;
}

/** Bytes of a refused body read and thrown away before the connection is cut. */
const DISCARD_MAX_BYTES = 64 * 1024 * 1024;
const DISCARD_MAX_MS = 30_000;

/**
 * After an early refusal the rest of the body is read and thrown away, so a client still sending
 * can read the answer (RFC 9110 section 15: a server may answer before the body is complete);
 * past a bound of bytes or time the socket is cut.
 */
function discardRest(req: IncomingMessage): void {
  let n = 0;
  const cut = setTimeout(() => req.socket.destroy(), DISCARD_MAX_MS).unref();
  req.on('data', (c: Buffer) => {
    n += c.length;
    if (n > DISCARD_MAX_BYTES) req.socket.destroy();
  });
  req.once('close', () => clearTimeout(cut));
  req.resume();
}

export function forward(
  rt: Runtime,
  req: IncomingMessage,
  res: ServerResponse,
  target: Target,
  pathAndQuery: string,
): void {
  const exchange = rt.nextExchange();
  const startedAt = rt.clock.nowIso();
  const t0 = rt.clock.monoMs();
  const encoding = one(req.headers['content-encoding']);
  const compressed = encoding !== undefined && encoding.trim() !== '' && encoding.trim().toLowerCase() !== 'identity';
  const hasBody =
    (req.headers['content-length'] !== undefined && req.headers['content-length'] !== '0') ||
    req.headers['transfer-encoding'] !== undefined;
  req.on('error', () => {
    /* client went away; res 'close' handles it */
  });

  if (!hasBody || compressed) {
    // Compressed bodies: SPEC item 9 fail-open, forwarded without a tool check.
    send(
      rt,
      req,
      res,
      target,
      pathAndQuery,
      { exchange, startedAt, t0 },
      Buffer.alloc(0),
      hasBody ? req : null,
      compressed ? { kind: 'fail_open', reason: 'compressed_body' } : { kind: 'not_tools_call' },
      null,
    );
    return;
  }
  const started = { exchange, startedAt, t0 };
  if (!rt.mcpPolicy) {
    // No tool policy, nothing to enforce: stream at once. A bounded copy still identifies a
    // tools/call for the McpToolInvoked record (send, "deferred").
    send(rt, req, res, target, pathAndQuery, started, Buffer.alloc(0), req, { kind: 'deferred' }, null);
    return;
  }
  // With a tool policy the body is held until it is classified: bounded per body (413) and by the
  // capsule's and the process's inspection budgets (429).
  const hold = rt.hold();
  const chunks: Buffer[] = [];
  let size = 0;
  let handedOff = false;
  let firstByte = -1;
  const streamRest = (inspection: Inspection) => {
    handedOff = true;
    req.off('data', onData);
    req.pause();
    send(rt, req, res, target, pathAndQuery, started, Buffer.concat(chunks), req, inspection, hold);
  };
  const refuseBody = (
    reason: 'body_too_large_for_inspection' | 'inspection_budget_exhausted',
    message: string,
    extra: OutgoingHttpHeaders = {},
  ) => {
    handedOff = true;
    req.off('data', onData);
    chunks.length = 0;
    hold.release();
    rt.refuse({ host: target.host, port: target.port, reason });
    // Kept alive: the client may still be sending; closing now would reset the connection and lose the answer.
    refuse(res, reason, message, { connection: 'keep-alive', ...extra });
    discardRest(req);
  };
  const onData = (c: Buffer) => {
    chunks.push(c);
    size += c.length;
    if (firstByte < 0) {
      // Only a body whose first non-whitespace byte is "{" can be a single tools/call (JSON allows
      // leading space, tab, CR, LF). Anything else is streamed at once: the classification is
      // already certain (batch, or not a JSON-RPC object), so nothing is held back.
      const i = c.findIndex((b) => b !== 0x20 && b !== 0x09 && b !== 0x0a && b !== 0x0d);
      if (i >= 0) {
        firstByte = c[i] as number;
        if (firstByte !== 0x7b) {
          streamRest(
            firstByte === 0x5b
              ? { kind: 'fail_open', reason: 'batch_array' }
              : { kind: 'fail_open', reason: 'malformed_envelope' },
          );
          return;
        }
      }
    }
    if (size > rt.limits.maxInspectBytes) {
      // Fail closed: an oversize tools/call would otherwise pass unchecked.
      refuseBody(
        'body_too_large_for_inspection',
        `request body over ${rt.limits.maxInspectBytes} bytes cannot be checked against mcp_policy`,
      );
      return;
    }
    if (!hold.take(c.length)) {
      refuseBody(
        'inspection_budget_exhausted',
        'too many request bodies held for mcp_policy inspection at once; retry later',
        { 'retry-after': String(rt.limits.inspectRetryAfterS) },
      );
    }
  };
  req.on('data', onData);
  req.once('end', () => {
    if (handedOff) return;
    const body = Buffer.concat(chunks);
    const inspection = inspectBody(body, encoding);
    if (inspection.kind === 'tools_call' && !toolAllowed(rt.mcpPolicy, inspection.toolName)) {
      // Rejected before forwarding; not recorded in the proof (SPEC item 9).
      hold.release();
      rt.refuse({ host: target.host, port: target.port, reason: 'mcp_tool_denied' });
      const text = denialBody(inspection.id, inspection.toolName);
      res.writeHead(200, {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(text),
        'x-capsule-egress-error': 'mcp_tool_denied',
      });
      res.end(text);
      return;
    }
    send(rt, req, res, target, pathAndQuery, started, body, null, inspection, hold);
  });
}

/** The mutable facts of one exchange while its bytes flow (send() wires the I/O to it). */
class ExchangeState {
  readonly reqHash: Hash;
  reqBytes: number;
  readonly respHash: Hash = createHash('sha512');
  respBytes = 0;
  status: number | null = null;
  tls: TlsMetadata | null = null;
  streamed = false;
  merkle: SegmentedStream | null = null;
  chunker: StreamChunker | null = null;
  /** The identified tools/call, and the bounded response copy its result is looked for in. */
  mcp: ToolsCall | null;
  mcpChunks: Buffer[] | null;
  mcpBytes = 0;
  /** "deferred" (no tool policy): a copy of a "{" body, bounded like an inspected one, classified at its end. */
  copy: Buffer[] | null;
  copyStarted = false;
  /** The response began before the tools/call was identified: its start was not kept. */
  resultMissed = false;
  respContentType: string | undefined;
  done = false;
  /** The upstream connection (and TLS handshake) completed. */
  secure = false;

  constructor(prefix: Buffer, inspection: Inspection | { kind: 'deferred' }) {
    this.reqHash = createHash('sha512').update(prefix);
    this.reqBytes = prefix.length;
    this.mcp = inspection.kind === 'tools_call' ? inspection : null;
    this.mcpChunks = this.mcp ? [] : null;
    this.copy = inspection.kind === 'deferred' ? [] : null;
  }
}
type ToolsCall = Extract<Inspection, { kind: 'tools_call' }>;

interface Started {
  exchange: number;
  startedAt: string;
  t0: number;
}

function send(
  rt: Runtime,
  req: IncomingMessage,
  res: ServerResponse,
  target: Target,
  pathAndQuery: string,
  s: Started,
  prefix: Buffer,
  rest: IncomingMessage | null,
  inspection: Inspection | { kind: 'deferred' },
  heldPrefix: BudgetHold | null,
): void {
  const L = rt.limits;
  // Bytes held for this exchange: the inspected prefix (until written), copies (until classified or finished).
  const hold = heldPrefix ?? rt.hold();
  const prefixHeld = hold.held;
  const method = (req.method ?? 'GET').toUpperCase();
  const headers = endToEnd(req.headers);
  headers.host = hostHeader(target);
  if (rest === null) headers['content-length'] = String(prefix.length);
  else if (req.headers['content-length'] !== undefined) headers['content-length'] = req.headers['content-length'];
  if (
    rest === null &&
    prefix.length === 0 &&
    req.headers['content-length'] === undefined &&
    method !== 'POST' &&
    method !== 'PUT' &&
    method !== 'PATCH'
  ) {
    delete headers['content-length'];
  }
  // The mutable facts of this exchange while bytes flow; finish() turns them into its record.
  const x = new ExchangeState(prefix, inspection);

  const opts = {
    host: target.address,
    port: target.port,
    method,
    path: pathAndQuery,
    headers,
    setHost: false,
    timeout: L.connectTimeoutMs,
    ...(target.scheme === 'https'
      ? {
          agent: rt.pools.https,
          secureContext: rt.trust,
          rejectUnauthorized: true,
          ...(target.hostIsIp ? {} : { servername: target.host }),
        }
      : { agent: rt.pools.http }),
  };
  const ureq: ClientRequest = target.scheme === 'https' ? httpsRequest(opts) : httpRequest(opts);

  const timers: NodeJS.Timeout[] = [];
  // The headers bound starts once the whole request is sent: a slow upload is not the upstream's delay.
  let headersTimer: NodeJS.Timeout | undefined;
  ureq.once('finish', () => {
    if (x.done || x.status !== null) return;
    headersTimer = setTimeout(
      () => ureq.destroy(Object.assign(new Error('upstream response headers timed out'), { code: 'UPSTREAM_TIMEOUT' })),
      L.headersTimeoutMs,
    );
    timers.push(headersTimer);
  });
  timers.push(setTimeout(() => abort('upstream_timeout', 'exchange exceeded its time bound'), L.maxExchangeMs));

  const stopNow = () => {
    ureq.destroy();
    refuse(res, 'proxy_stopped', 'capsule egress stopped');
    finish('proxy_stopped');
  };
  rt.inFlight.add(stopNow);
  const finish = (outcome: EgressOutcome) => {
    if (x.done) return;
    x.done = true;
    x.copy = null;
    hold.release();
    rt.inFlight.delete(stopNow);
    for (const t of timers) clearTimeout(t);
    const duration = Math.max(0, Math.round((rt.clock.monoMs() - s.t0) * 1000) / 1000);
    let stream: ExchangeRecord['stream'] = null;
    if (x.chunker && x.merkle) {
      x.chunker.end();
      const last = x.merkle.end();
      if (last) emitSegment(last);
      stream = { chunks: x.merkle.chunks, segments: x.merkle.segments, root: x.merkle.root() };
    }
    const record: ExchangeRecord = {
      exchange: s.exchange,
      startedAt: s.startedAt,
      endedAt: rt.clock.nowIso(),
      method,
      target,
      pathAndQuery,
      requestHeaders: req.headers,
      requestBodyHash: asSha512(x.reqHash.digest()),
      requestBodyBytes: x.reqBytes,
      status: x.status,
      responseBodyHash: x.status === null ? null : asSha512(x.respHash.digest()),
      responseBodyBytes: x.respBytes,
      streamed: x.streamed,
      tls: x.tls,
      durationMs: duration,
      outcome,
      stream,
      tool: x.mcp
        ? {
            call: x.mcp,
            result:
              x.status === null
                ? { outcome: 'http_error', hash: null }
                : outcome !== 'completed' || x.resultMissed
                  ? { outcome: 'no_result', hash: null }
                  : mcpResult(x.status, x.respContentType, x.mcpChunks ? Buffer.concat(x.mcpChunks) : null, x.mcp.id),
          }
        : null,
    };
    for (const e of exchangeEvents(record)) rt.emit(e);
  };

  function emitSegment(g: Segment): void {
    rt.emit(segmentEvent(s.exchange, rt.clock.nowIso(), g));
  }

  function abort(outcome: Exclude<EgressOutcome, 'completed' | 'client_aborted'>, message: string): void {
    if (x.done) return;
    ureq.destroy();
    refuse(res, outcome, message);
    finish(outcome);
  }

  ureq.on('socket', (sock) => {
    // A kept-alive socket finished its handshake long ago; only a fresh one gets the listener (else it leaks per request).
    // Once connected, the connect bound gives way to the idle bound (slow but live upstreams are fine).
    if (ureq.reusedSocket) {
      x.secure = true;
      ureq.setTimeout(L.idleTimeoutMs);
      return;
    }
    sock.once(target.scheme === 'https' ? 'secureConnect' : 'connect', () => {
      x.secure = true;
      ureq.setTimeout(L.idleTimeoutMs);
    });
  });
  ureq.on('timeout', () => ureq.destroy(Object.assign(new Error('upstream timed out'), { code: 'ETIMEDOUT' })));
  ureq.on('error', (err: NodeJS.ErrnoException) => {
    if (x.done) return;
    if (x.status !== null) {
      abort('upstream_unreachable', 'upstream connection failed mid-response');
      return;
    }
    let c = classifyUpstreamError(err);
    if (target.scheme === 'https' && !x.secure && c.outcome === 'upstream_unreachable' && err.code === 'ECONNRESET') {
      c = { outcome: 'upstream_tls_failed', status: 502, code: err.code };
    }
    if (c.outcome === 'upstream_tls_failed')
      x.tls = { version: null, cipher: null, peer_certificate_sha256: null, validation: `failed:${c.code}` };
    abort(c.outcome, `${c.outcome.replace(/_/g, ' ')} (${c.code})`);
  });

  ureq.on('response', (ures: IncomingMessage) => {
    clearTimeout(headersTimer);
    if (x.done) {
      ures.destroy();
      return;
    }
    // Node's parser passes any three digits (e.g. 099), but writeHead throws below 100: left
    // unchecked, that throw would escape this listener and take the whole proxy down.
    const code = ures.statusCode;
    if (code === undefined || code < 100 || code > 999) {
      ures.destroy();
      abort('upstream_unreachable', `upstream sent an invalid status (${String(code)})`);
      return;
    }
    x.status = code;
    ureq.setTimeout(L.idleTimeoutMs);
    if (target.scheme === 'https') x.tls = tlsMetadata(ures.socket as TLSSocket);
    x.respContentType = one(ures.headers['content-type']);
    const declared = Number(ures.headers['content-length'] ?? NaN);
    if (method !== 'HEAD' && Number.isFinite(declared) && declared > L.maxResponseBytes) {
      ures.destroy();
      abort('response_too_large', `upstream response of ${declared} bytes exceeds ${L.maxResponseBytes}`);
      return;
    }
    const sse = x.respContentType?.toLowerCase().includes('text/event-stream') ?? false;
    x.streamed = sse || /chunked/i.test(one(ures.headers['transfer-encoding']) ?? '');
    if (x.streamed) {
      x.merkle = new SegmentedStream();
      const m = x.merkle;
      rt.emit({
        type: 'StreamingEgressStarted',
        at: rt.clock.nowIso(),
        exchange: s.exchange,
        host: target.host,
        port: target.port,
        status: x.status,
        framing: sse ? 'sse' : 'blocks',
      });
      const bounds = sse
        ? { maxChunkBytes: L.maxSseChunkBytes, minChunkBytes: L.minSseChunkBytes }
        : { maxChunkBytes: L.streamBlockBytes };
      x.chunker = new StreamChunker({ sse, ...bounds }, (c) => {
        const g = m.push(c.digest, c.bytes);
        if (g) emitSegment(g);
      });
    }
    res.writeHead(x.status, endToEnd(ures.headers));
    ures.on('data', (c: Buffer) => {
      if (x.done) return;
      x.respBytes += c.length;
      if (x.respBytes > L.maxResponseBytes) {
        ures.destroy();
        abort('response_too_large', 'response too large');
        return;
      }
      x.respHash.update(c);
      x.chunker?.write(c);
      if (x.mcpChunks) {
        x.mcpBytes += c.length;
        // Past its own bound or the inspection budget the copy is dropped: outcome result_too_large.
        if (x.mcpBytes > L.maxMcpResultBytes || !hold.take(c.length)) {
          hold.give(x.mcpBytes - c.length);
          x.mcpChunks = null;
        } else x.mcpChunks.push(c);
      }
      if (!res.write(c)) ures.pause();
    });
    res.on('drain', () => ures.resume());
    ures.on('end', () => {
      if (x.done) return;
      res.end();
      finish('completed');
    });
    ures.on('error', () => abort('upstream_unreachable', 'upstream connection failed mid-response'));
    ures.on('close', () => {
      if (!ures.complete) abort('upstream_unreachable', 'upstream closed mid-response');
    });
  });

  res.on('close', () => {
    if (!x.done && !res.writableFinished) {
      ureq.destroy();
      finish('client_aborted');
    }
  });

  const encoding = one(req.headers['content-encoding']);
  const keepCopy = (c: Buffer): void => {
    if (!x.copy) return;
    if (!x.copyStarted) {
      const i = c.findIndex((b) => b !== 0x20 && b !== 0x09 && b !== 0x0a && b !== 0x0d);
      if (i < 0) return;
      x.copyStarted = true;
      if (c[i] !== 0x7b) {
        x.copy = null; // not a single JSON-RPC object: nothing to identify
        return;
      }
    }
    if (x.reqBytes > L.maxInspectBytes || !hold.take(c.length)) {
      // Too large or over budget: forwarded all the same (no policy), just not identified as a tool call.
      hold.give(hold.held - prefixHeld);
      x.copy = null;
      return;
    }
    x.copy.push(c);
  };
  const classifyCopy = (): void => {
    if (!x.copy || !x.copyStarted) return;
    const found = inspectBody(Buffer.concat(x.copy), encoding);
    x.copy = null;
    hold.give(hold.held - prefixHeld);
    if (found.kind !== 'tools_call') return;
    x.mcp = found;
    // The response began before the request ended (rare): its start was not kept.
    if (x.status === null) x.mcpChunks = [];
    else x.resultMissed = true;
  };
  ureq.write(prefix, () => hold.give(prefixHeld));
  if (rest === null) {
    ureq.end();
    return;
  }
  rest.on('data', (c: Buffer) => {
    x.reqHash.update(c);
    x.reqBytes += c.length;
    keepCopy(c);
    if (!ureq.write(c)) rest.pause();
  });
  ureq.on('drain', () => rest.resume());
  rest.on('end', () => {
    classifyCopy();
    ureq.end();
  });
  rest.resume();
}
